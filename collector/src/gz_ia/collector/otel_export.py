"""OpenTelemetry export: ship stored events to an OTLP/HTTP backend as log records (``gz-ia export otel``).

The exporter is a separate consumer, off the ingest path: it reads what the collector has already
written, page by page, and keeps its own position per session. The position advances only after
the backend answered 2xx for a batch, so a backend that is down or refusing loses nothing and never
slows the collector; the exporter retries the same batch with a growing pause. Positions live in
``$XDG_STATE_HOME/gz-ia/otel/<root key>/<session>.json`` (``--state-dir`` moves them) and are
replaced atomically (temporary file, fsync, rename).

Each position records the last exported ``seq``, which the collector assigns per session from 1
without gaps: an event at or below it is never sent again, and a jump over missing numbers (data
retention deleted before export) is counted in ``gzia_otel_dropped_events_total`` instead of being
lost silently. Delivery is at least once across a crash between the backend's 2xx and the
position's rename (``session.id`` + ``gz_ia.seq`` identify a record for deduplication); across a
clean stop, a restart, a backend outage or a collector restart it is exactly once.

Field mapping (OTel Logs Data Model; see docs/user-guide.md):

=====================  ==========================================================================
LogRecord              from the stored event
=====================  ==========================================================================
Timestamp              ``timestamp``
ObservedTimestamp      when the exporter read the event
SeverityNumber/Text    ``FAILED`` → 17 ``ERROR``; otherwise 9 ``INFO``
EventName              ``gz_ia.stage_event``
Body                   empty (events carry their data in attributes)
TraceId                first 16 bytes of SHA-256 of the tree's root session id
SpanId                 first 8 bytes of SHA-256 of ``session_id``: subagents nest under their root
Attributes             ``session.id``, ``gen_ai.agent.name``, ``gz_ia.*``: see :func:`event_attributes`
Resource               ``service.name`` (``OTEL_SERVICE_NAME``, default ``gz-ia-collector``),
                       ``service.version``, ``host.name``, plus ``OTEL_RESOURCE_ATTRIBUTES``
=====================  ==========================================================================

The OTLP endpoint, headers, compression and timeout come from the standard
``OTEL_EXPORTER_OTLP_[LOGS_]*`` variables. Every OpenTelemetry import is in this module and happens
only when an exporter is built, so the collector itself never needs the ``[otel]`` extra.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import msgspec
from prometheus_client import CollectorRegistry, Counter, Gauge

from gz_ia.client.schema import Status, StoredEvent, is_safe_session_id

from . import _pages

__all__ = [
    "OTEL_EXTRA_HINT",
    "BatchSender",
    "CursorStore",
    "ExportSettings",
    "MissingExtraError",
    "OtelExporter",
    "Position",
    "event_attributes",
    "root_key",
    "span_id_of",
    "trace_id_of",
]

log = logging.getLogger("gz_ia.otel")

OTEL_EXTRA_HINT: Final = "pip install 'gz-ia-collector[otel]'"
EVENT_NAME: Final = "gz_ia.stage_event"
SCOPE_NAME: Final = "gz_ia.collector.otel_export"
_MAX_PARENT_HOPS: Final = 64


class MissingExtraError(RuntimeError):
    """The ``[otel]`` extra is not installed, so export cannot be configured."""


class Position(msgspec.Struct, kw_only=True):
    """Where export stands in one session: the last ``seq`` the backend accepted, and the cursor after it."""

    seq: int = 0
    cursor: str | None = None
    session_id: str = ""


_position_decoder: Final = msgspec.json.Decoder(Position)
_position_encoder: Final = msgspec.json.Encoder()


def root_key(root: Path) -> str:
    """Return the directory name that keeps one root's positions apart from another's."""
    return hashlib.sha256(str(root.absolute()).encode()).hexdigest()[:16]


def default_state_dir() -> Path:
    """Return ``$XDG_STATE_HOME/gz-ia/otel`` (``~/.local/state/gz-ia/otel``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gz-ia" / "otel"


class CursorStore:
    """The persisted export positions of one root, one small JSON file per session."""

    def __init__(self, state_dir: Path, root: Path) -> None:
        self.directory = state_dir / root_key(root)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker = self.directory / "root.txt"
        if not marker.exists():
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(str(root.absolute()) + "\n")

    def load(self, session_id: str) -> Position:
        """Return the session's position; a missing or unreadable file means from the start."""
        path = self.directory / f"{session_id}.json"
        try:
            return _position_decoder.decode(path.read_bytes())
        except FileNotFoundError:
            return Position(session_id=session_id)
        except (OSError, msgspec.DecodeError) as exc:
            # Starting over can only duplicate, never lose: the seq check still skips nothing new.
            log.warning("unreadable export position %s (%s): exporting the session from its start", path, exc)
            return Position(session_id=session_id)

    def save(self, position: Position) -> None:
        """Replace the session's position atomically (temporary file, fsync, rename)."""
        path = self.directory / f"{position.session_id}.json"
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, _position_encoder.encode(position))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)


def trace_id_of(root_session_id: str) -> int:
    """Return the 128-bit trace id shared by every session of one tree."""
    value = int.from_bytes(hashlib.sha256(root_session_id.encode()).digest()[:16], "big")
    return value or 1  # all-zero ids are invalid in OTLP


def span_id_of(session_id: str) -> int:
    """Return the 64-bit span id of one session."""
    value = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big")
    return value or 1


def event_attributes(event: StoredEvent, root_session_id: str) -> dict[str, str | int | float | bool]:
    """Return the OTel attributes of one stored event (unset optional fields are left out)."""
    attributes: dict[str, str | int | float | bool] = {
        "session.id": event.session_id,
        "gen_ai.agent.name": event.agent,
        "gz_ia.agent": event.agent,
        "gz_ia.action": event.action,
        "gz_ia.stage": event.stage.value,
        "gz_ia.status": event.status.value,
        "gz_ia.seq": event.seq,
        "gz_ia.root_session_id": root_session_id,
    }
    if event.parent_session_id:
        attributes["gz_ia.parent_session_id"] = event.parent_session_id
    if event.role:
        attributes["gz_ia.role"] = event.role
    if event.duration_ms is not None:
        attributes["gz_ia.duration_ms"] = event.duration_ms
    if event.error:
        attributes["exception.message"] = event.error
    for key, value in (event.attrs or {}).items():
        attributes[f"gz_ia.attr.{key}"] = value
    return attributes


class BatchSender(Protocol):
    """What the exporter needs from the OTLP side: send a batch, say whether it was accepted."""

    def send(self, items: Sequence[tuple[StoredEvent, str]]) -> bool:
        """Send ``(event, root session id)`` pairs; True only when the backend answered 2xx."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class _OtlpSender:
    """The real :class:`BatchSender`: SDK log records through ``OTLPLogExporter`` (OTLP/HTTP protobuf)."""

    def __init__(self, *, version: str, endpoint: str | None = None) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry._logs import LogRecord, SeverityNumber
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
            from opentelemetry.sdk._logs import ReadableLogRecord
            from opentelemetry.sdk._logs.export import LogRecordExportResult
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        except ImportError as exc:
            raise MissingExtraError(
                f"OpenTelemetry export needs the optional [otel] extra ({exc}); install it with: {OTEL_EXTRA_HINT}"
            ) from exc
        self._trace = trace
        self._log_record = LogRecord
        self._readable = ReadableLogRecord
        self._severity_error = SeverityNumber.ERROR
        self._severity_info = SeverityNumber.INFO
        self._success = LogRecordExportResult.SUCCESS
        self._resource = Resource.create(
            {
                "service.name": os.environ.get("OTEL_SERVICE_NAME") or "gz-ia-collector",
                "service.version": version,
                "host.name": socket.gethostname(),
            }
        )
        self._scope = InstrumentationScope(SCOPE_NAME, version)
        # Any: the SDK leaves shutdown() unannotated, and this module is the only one that calls it.
        self._exporter: Any = OTLPLogExporter(endpoint=endpoint)

    def _record(self, event: StoredEvent, root_session_id: str, observed: int) -> Any:
        context = self._trace.set_span_in_context(
            self._trace.NonRecordingSpan(
                self._trace.SpanContext(
                    trace_id=trace_id_of(root_session_id),
                    span_id=span_id_of(event.session_id),
                    is_remote=False,
                    trace_flags=self._trace.TraceFlags(self._trace.TraceFlags.SAMPLED),
                )
            )
        )
        failed = event.status is Status.FAILED
        record = self._log_record(
            timestamp=int(event.timestamp.timestamp() * 1_000_000) * 1000,
            observed_timestamp=observed,
            context=context,
            severity_number=self._severity_error if failed else self._severity_info,
            severity_text="ERROR" if failed else "INFO",
            attributes=event_attributes(event, root_session_id),
            event_name=EVENT_NAME,
        )
        return self._readable(log_record=record, resource=self._resource, instrumentation_scope=self._scope)

    def send(self, items: Sequence[tuple[StoredEvent, str]]) -> bool:
        observed = time.time_ns()
        records = [self._record(event, root_id, observed) for event, root_id in items]
        return bool(self._exporter.export(records) == self._success)

    def close(self) -> None:
        self._exporter.shutdown()


def make_sender(*, version: str, endpoint: str | None = None) -> BatchSender:
    """Build the OTLP/HTTP sender (standard ``OTEL_EXPORTER_OTLP_*`` settings).

    Raises:
        MissingExtraError: the ``[otel]`` extra is not installed.
    """
    return _OtlpSender(version=version, endpoint=endpoint)


class _Metrics:
    """The exporter's Prometheus metrics (``gzia_otel_*``) on the registry it was given."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.exported = Counter(
            "gzia_otel_exported_events", "Events the OTLP backend accepted (2xx)", registry=registry
        )
        self.batches = Counter("gzia_otel_export_batches", "Batches the OTLP backend accepted", registry=registry)
        self.failures = Counter(
            "gzia_otel_export_failures",
            "Batches the OTLP backend refused or did not answer; retried",
            registry=registry,
        )
        self.dropped = Counter(
            "gzia_otel_dropped_events",
            "Events deleted (retention) before they could be exported",
            registry=registry,
        )
        self.lag_events = Gauge(
            "gzia_otel_lag_events",
            "Events written by the collector and not yet accepted by the backend",
            registry=registry,
        )
        self.lag_seconds = Gauge(
            "gzia_otel_lag_seconds",
            "Age of the oldest event not yet accepted by the backend (0: caught up)",
            registry=registry,
        )
        self.last_success = Gauge(
            "gzia_otel_last_success_timestamp_seconds", "When the backend last accepted a batch", registry=registry
        )
        self.up = Gauge("gzia_otel_backend_up", "1 if the last export attempt succeeded, else 0", registry=registry)


@dataclass
class ExportSettings:
    """How the exporter runs; every field has a working default."""

    roots: list[Path]
    state_dir: Path = field(default_factory=default_state_dir)
    poll_interval: float = 1.0
    batch_size: int = 512
    retry_initial: float = 0.5
    retry_max: float = 30.0


class OtelExporter:
    """Tail every session of the given roots and ship new events through a :class:`BatchSender`.

    Args:
        settings: roots, state directory, pacing.
        sender: where batches go (the OTLP/HTTP sender in production).
        registry: Prometheus registry for the ``gzia_otel_*`` metrics.
        clock: wall clock in seconds, injectable for tests.
    """

    def __init__(
        self,
        settings: ExportSettings,
        sender: BatchSender,
        *,
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if settings.batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.settings = settings
        self.sender = sender
        self.clock = clock
        self.metrics = _Metrics(registry)
        self._stores = {root: CursorStore(settings.state_dir, root) for root in settings.roots}
        self._positions: dict[tuple[Path, str], Position] = {}
        self._parents: dict[tuple[Path, str], str | None] = {}
        self._backoff = 0.0

    # --- one pass --------------------------------------------------------------------------------

    def run_once(self) -> tuple[int, bool]:
        """Export what is available now, batch by batch; return (events exported, every batch accepted)."""
        exported = 0
        lag_events = 0
        oldest: float | None = None
        healthy = True
        for root, store in self._stores.items():
            for session_id in _pages.list_session_ids(root):
                sent, ok, lag, since = self._export_session(root, store, session_id, allow_send=healthy)
                exported += sent
                healthy = healthy and ok
                lag_events += lag
                if since is not None:
                    oldest = since if oldest is None else min(oldest, since)
        self.metrics.lag_events.set(lag_events)
        self.metrics.lag_seconds.set(max(0.0, self.clock() - oldest) if oldest is not None else 0.0)
        return exported, healthy

    def _position(self, root: Path, store: CursorStore, session_id: str) -> Position:
        key = (root, session_id)
        position = self._positions.get(key)
        if position is None:
            position = store.load(session_id)
            position.session_id = session_id
            self._positions[key] = position
        return position

    def _export_session(
        self, root: Path, store: CursorStore, session_id: str, *, allow_send: bool
    ) -> tuple[int, bool, int, float | None]:
        """Return (exported, healthy, events still behind, timestamp of the oldest one behind)."""
        position = self._position(root, store, session_id)
        exported = 0
        while True:
            try:
                page = _pages.read_page(root, session_id, cursor=position.cursor, limit=self.settings.batch_size)
            except _pages.SessionNotFound:
                return exported, True, 0, None
            except ValueError:
                # A cursor from another reader version: fall back to the seq watermark alone.
                log.info("export position of %s no longer matches the reader; resuming by seq", session_id)
                position.cursor = None
                continue
            if page.expired and position.cursor is not None:
                # Retention deleted what followed the cursor: start again from the oldest retained
                # event; the seq watermark skips what was sent, and a gap is counted as dropped.
                position.cursor = None
                continue
            fresh = [entry for entry in page.entries if entry.event.seq > position.seq]
            if not fresh:
                if page.entries and page.next_cursor is not None:
                    position.cursor = page.next_cursor  # only already-exported lines: skip them
                    if not page.end:
                        continue
                return exported, True, 0, None
            if not allow_send:
                return exported, True, self._behind(root, session_id, position), fresh[0].event.timestamp.timestamp()
            gap = fresh[0].event.seq - position.seq - 1
            items = [(entry.event, self._root_session(root, entry.event)) for entry in fresh]
            if not self.sender.send(items):
                self.metrics.failures.inc()
                self.metrics.up.set(0)
                return exported, False, self._behind(root, session_id, position), fresh[0].event.timestamp.timestamp()
            if gap > 0:
                log.warning("session %s: %d events were deleted before export", session_id, gap)
                self.metrics.dropped.inc(gap)
            position.seq = fresh[-1].event.seq
            position.cursor = fresh[-1].cursor
            store.save(position)
            exported += len(fresh)
            self.metrics.exported.inc(len(fresh))
            self.metrics.batches.inc()
            self.metrics.up.set(1)
            self.metrics.last_success.set(self.clock())
            if page.end:
                return exported, True, 0, None

    def _behind(self, root: Path, session_id: str, position: Position) -> int:
        try:
            last = _pages.read_page(root, session_id, limit=1, reverse=True).entries
        except (_pages.SessionNotFound, ValueError):
            return 0
        return max(0, last[0].event.seq - position.seq) if last else 0

    def _root_session(self, root: Path, event: StoredEvent) -> str:
        """Follow ``parent_session_id`` up through the root's sessions to the tree's root."""
        current = event.session_id
        parent = event.parent_session_id
        self._parents.setdefault((root, current), parent)
        seen = {current}
        for _ in range(_MAX_PARENT_HOPS):
            if parent is None or parent in seen or not is_safe_session_id(parent):
                return current
            seen.add(parent)
            current = parent
            parent = self._parent_of(root, current)
        return current

    def _parent_of(self, root: Path, session_id: str) -> str | None:
        key = (root, session_id)
        if key not in self._parents:
            try:
                first = _pages.read_page(root, session_id, limit=1).entries
            except (_pages.SessionNotFound, ValueError):
                return None  # not written (yet) under this root: it counts as the top
            if not first:
                return None
            self._parents[key] = first[0].event.parent_session_id
        return self._parents[key]

    # --- the loop --------------------------------------------------------------------------------

    def run(self, stop: threading.Event, *, once: bool = False) -> int:
        """Export until ``stop`` is set (or, with ``once``, until caught up or the backend fails).

        Returns:
            0, or 1 when ``once`` ended with events the backend did not accept.
        """
        while not stop.is_set():
            _, healthy = self.run_once()
            if once:
                return 0 if healthy else 1
            if healthy:
                self._backoff = 0.0
                stop.wait(self.settings.poll_interval)
            else:
                self._backoff = min(self.settings.retry_max, max(self.settings.retry_initial, self._backoff * 2))
                log.warning("OTLP backend did not accept the batch; retrying in %.1f s", self._backoff)
                stop.wait(self._backoff)
        return 0

    def close(self) -> None:
        """Close the sender."""
        with contextlib.suppress(Exception):
            self.sender.close()


def positions(state_dir: Path, root: Path) -> Mapping[str, Position]:
    """Return the persisted positions of a root (for ``gz-ia export otel --status`` and tests)."""
    directory = state_dir / root_key(root)
    found: dict[str, Position] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.json")):
        with contextlib.suppress(OSError, msgspec.DecodeError):
            found[path.stem] = _position_decoder.decode(path.read_bytes())
    return found
