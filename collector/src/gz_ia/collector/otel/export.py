"""OpenTelemetry export: ship stored events to an OTLP/HTTP backend as spans and log records (``gz-ia export otel``).

The exporter is a separate consumer, off the ingest path: it reads what the collector has already
written, page by page, and keeps its own position per session and signal. A position advances only
after the backend answered 2xx, so a backend that is down or refusing loses nothing and never slows
the collector; the exporter retries with a growing pause. Positions: :mod:`.positions`; the
OTLP side: :mod:`.senders`. After each pass the exporter tells retention which segments it
still needs (:mod:`..storage.export_holds`).

Traces (:mod:`.spans`): each action cycle is a span, sent once its FINISH is read; each
session is a span, sent only once the session is final: no cycle of it open and quiet for
``session_idle`` seconds (or quiet for ``stale_after`` seconds with cycles never finished). Some
backends keep the first version of a span id (Phoenix), others the last (MLflow), so a span is never
sent before it is final; a session that grows after that is sent again, with the same ids. Ids are
derived from the root session, the session and the cycle, so every re-send (after a timeout, a
crash, :meth:`OtelExporter.resend`) is the same span.

Signals are independent: each has its own health and its own retry pause, so a backend that
refuses log records (Phoenix and MLflow have no ``/v1/logs``) never holds back a span. A refused
signal is logged once, loudly, with its endpoint and the backend's answer; it shows in
``gzia_otel_signal_refused`` and in the exporter's status file (:mod:`.status`), which
``gz-ia status`` reads.

Log records: one per event; ``TraceId`` is the tree's trace and ``SpanId`` the session's span.
A record can arrive twice only when an attempt got no answer in time (the backend may have stored it
anyway) or the exporter died between the backend's 2xx and the position's rename; after an
unanswered attempt the request timeout doubles, up to ``timeout_max``, so a slow backend is not
sent the same batch over and over. ``session.id`` + ``gz_ia.seq`` identify a record.

Each position records the last exported ``seq`` (the collector assigns it per session from 1
without gaps): a jump over missing numbers (retention deleted them before export) is counted in
``gzia_otel_dropped_events_total`` and logged, never silent.

The OTLP endpoint, headers, compression and timeout come from the standard ``OTEL_EXPORTER_OTLP_*``
variables. Every OpenTelemetry import is in :mod:`.senders` and happens only when a sender is
built, so the collector itself never needs the ``[otel]`` extra.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from gz_ia.client.schema import is_safe_session_id
from gz_ia.collector import reading
from gz_ia.collector.storage.export_holds import write_hold
from gz_ia.collector.storage.roots import LayoutError, open_root

from .positions import CursorStore, Position, default_state_dir, root_key
from .senders import OTEL_EXTRA_HINT, SIGNALS, BatchSender, MissingExtraError, Outcome, make_sender
from .spans import SessionInfo, SpanData, TraceState, fold, session_span
from .status import SignalReport, StatusFile

__all__ = [
    "OTEL_EXTRA_HINT",
    "SIGNALS",
    "ExportSettings",
    "MissingExtraError",
    "OtelExporter",
    "StatusFile",
    "default_state_dir",
    "make_sender",
]

log = logging.getLogger("gz_ia.otel")

_MAX_PARENT_HOPS: Final = 64

_State = TypeVar("_State", Position, TraceState)


class _Metrics:
    """The exporter's Prometheus metrics (``gzia_otel_*``) on the registry it was given."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.exported = Counter(
            "gzia_otel_exported_events", "Events the OTLP backend accepted as log records (2xx)", registry=registry
        )
        self.spans = Counter(
            "gzia_otel_exported_spans",
            "Spans the OTLP backend accepted (2xx), counting a session span each time it is re-sent",
            registry=registry,
        )
        self.batches = Counter("gzia_otel_export_batches", "Batches the OTLP backend accepted", registry=registry)
        self.failures = Counter(
            "gzia_otel_export_failures",
            "Batches the OTLP backend refused or did not answer in time; retried",
            registry=registry,
        )
        self.unanswered = Counter(
            "gzia_otel_export_unanswered",
            "Batches the OTLP backend did not answer in time (it may have stored them: re-sent)",
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
        self.refused = Gauge(
            "gzia_otel_signal_refused",
            "1 while the backend refuses (or does not answer) this signal; the other signals go on",
            ["signal"],
            registry=registry,
        )


@dataclass
class ExportSettings:
    """How the exporter runs; every field has a working default."""

    roots: list[Path]
    state_dir: Path = field(default_factory=default_state_dir)
    poll_interval: float = 1.0
    batch_size: int = 512
    retry_initial: float = 0.5
    retry_max: float = 30.0
    signals: tuple[str, ...] = SIGNALS
    session_idle: float = 30.0
    """Seconds a session with no open cycle must be quiet before its span is sent (again, when it grew)."""
    stale_after: float = 3600.0
    """Seconds after which a quiet session is final even with cycles that never finished."""


@dataclass
class _Signal:
    """One signal's health across passes: its retry pause, and what the backend answered while failing."""

    name: str
    backoff: float = 0.0
    retry_at: float = 0.0
    """``time.monotonic()`` before which the signal is not tried again."""
    outcome: Outcome | None = None
    """How the last failed attempt went; None while the backend accepts."""
    answer: str = ""
    since: float | None = None
    reported: str | None = None
    """The answer last logged loudly: each new answer is logged once, not every retry."""


@dataclass
class _Behind:
    """How one session stands after a pass: sent, still behind, and the oldest event behind."""

    sent: int = 0
    healthy: bool = True
    lag: int = 0
    since: float | None = None


class OtelExporter:
    """Tail every session of the given roots and ship new events through a :class:`BatchSender`.

    Args:
        settings: roots, state directory, signals, pacing.
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
        unknown = set(settings.signals) - set(SIGNALS)
        if unknown or not settings.signals:
            raise ValueError(f"signals must be among {', '.join(SIGNALS)}")
        self.settings = settings
        self.sender = sender
        self.clock = clock
        self.metrics = _Metrics(registry)
        self._stores = {root: CursorStore(settings.state_dir, root) for root in settings.roots}
        self._positions: dict[tuple[Path, str], Position] = {}
        self._traces: dict[tuple[Path, str], TraceState] = {}
        self._holds: dict[Path, dict[str, int]] = {}
        self._hold_key = root_key(settings.state_dir)
        self._signals = {name: _Signal(name) for name in settings.signals}
        self._status = StatusFile(settings.state_dir)

    # --- one pass --------------------------------------------------------------------------------

    def run_once(self) -> tuple[int, bool]:
        """Export what is available now, batch by batch; return (events exported, every batch accepted).

        Each signal goes on by itself: one the backend refuses is skipped until its retry pause is
        over, and never stops the other.
        """
        exported = 0
        lag_events = 0
        oldest: float | None = None
        now = time.monotonic()
        allowed = {name: now >= signal.retry_at for name, signal in self._signals.items()}
        healthy = dict.fromkeys(self._signals, True)
        for root, store in self._stores.items():
            summaries = _summaries(root)
            parents = {sid: summary.parent_session_id for sid, summary in summaries.items()}
            for session_id in sorted(summaries):
                root_session = _root_of(session_id, parents)
                behind = _Behind()
                if "traces" in self._signals:
                    allow = allowed["traces"] and healthy["traces"]
                    traced = self._export_traces(root, store, session_id, root_session, summaries[session_id], allow)
                    healthy["traces"] = healthy["traces"] and traced.healthy
                    behind = traced
                if "logs" in self._signals:
                    allow = allowed["logs"] and healthy["logs"]
                    logged = self._export_logs(root, store, session_id, root_session, allow)
                    healthy["logs"] = healthy["logs"] and logged.healthy
                    if logged.lag > behind.lag:
                        behind.lag, behind.since = logged.lag, logged.since
                    behind.sent += logged.sent
                exported += behind.sent
                lag_events += behind.lag
                if behind.since is not None:
                    oldest = behind.since if oldest is None else min(oldest, behind.since)
            self._hold(root, summaries)
        self.metrics.lag_events.set(lag_events)
        self.metrics.lag_seconds.set(max(0.0, self.clock() - oldest) if oldest is not None else 0.0)
        for name, signal in self._signals.items():
            if allowed[name]:
                self._settle(signal, healthy=healthy[name])
        return exported, all(healthy.values())

    def _settle(self, signal: _Signal, *, healthy: bool) -> None:
        """After a pass that tried ``signal``: reset its pause, or lengthen it and report a new answer once."""
        refused = self.metrics.refused.labels(signal=signal.name)
        if healthy:
            if signal.outcome is not None:
                log.info("OTLP %s: the backend accepts them again; sending what waited", signal.name)
                signal.outcome, signal.answer, signal.since, signal.reported = None, "", None, None
                self._publish()
            signal.backoff = 0.0
            refused.set(0)
            return
        settings = self.settings
        signal.backoff = min(settings.retry_max, max(settings.retry_initial, signal.backoff * 2))
        signal.retry_at = time.monotonic() + signal.backoff
        refused.set(1)
        if signal.since is None:
            signal.since = self.clock()
        url, answer = self.sender.describe(signal.name)
        signal.answer = answer
        if answer != signal.reported:
            signal.reported = answer
            others = [name for name in self._signals if name != signal.name]
            verb = "did not answer" if signal.outcome is Outcome.NO_ANSWER else "REFUSED"
            hint = f"; if it has no {signal.name} endpoint, run with --signals {','.join(others)}" if others else ""
            log.error(
                "OTLP %s %s by %s: %s. Nothing is lost: they wait and are retried (every %.0f s at most)%s%s",
                signal.name,
                verb,
                url,
                answer or "no details",
                settings.retry_max,
                f"; {', '.join(others)} go on" if others else "",
                hint,
            )
            self._publish()

    def _publish(self) -> None:
        """Write the exporter's status file (what ``gz-ia status`` shows) with each signal's state."""
        reports = []
        for name, signal in self._signals.items():
            url, _ = self.sender.describe(name)
            state = "ok" if signal.outcome is None else signal.outcome.name.lower().replace("_", " ")
            reports.append(
                SignalReport(signal=name, endpoint=url, state=state, answer=signal.answer, since=signal.since)
            )
        self._status.write([str(root) for root in self.settings.roots], reports)

    def _hold(self, root: Path, sessions: Mapping[str, object]) -> None:
        """Tell retention, through the root's export holds, the first segment each session still needs."""
        needed: dict[str, int] = {}
        for session_id in sessions:
            states: list[Position | TraceState | None] = []
            if "logs" in self.settings.signals:
                states.append(self._positions.get((root, session_id)))
            if "traces" in self.settings.signals:
                states.append(self._traces.get((root, session_id)))
            needed[session_id] = min(
                _needed_segment(state.cursor if state is not None else None, session_id) for state in states
            )
        if needed == self._holds.get(root):
            return
        try:
            dirs = open_root(root, owner=None, create=False)
        except LayoutError:
            return
        try:
            write_hold(dirs, self._hold_key, needed)
        except OSError as exc:
            log.warning("cannot write the export hold under %s (%s): retention may delete unsent events", root, exc)
            return
        finally:
            dirs.close()
        self._holds[root] = needed

    def _failed(self, signal: str, outcome: Outcome) -> None:
        self._signals[signal].outcome = outcome
        self.metrics.failures.inc()
        if outcome is Outcome.NO_ANSWER:
            self.metrics.unanswered.inc()
        self.metrics.up.set(0)

    def _accepted(self) -> None:
        self.metrics.batches.inc()
        self.metrics.up.set(1)
        self.metrics.last_success.set(self.clock())

    def _fresh(self, root: Path, session_id: str, state: Position | TraceState) -> tuple[list[reading.Entry], bool]:
        """Return the entries after ``state.seq`` on the next page (moving the cursor past sent ones), and ``end``."""
        while True:
            try:
                page = reading.read_page(root, session_id, cursor=state.cursor, limit=self.settings.batch_size)
            except reading.SessionNotFound:
                return [], True
            except ValueError:
                # A cursor from another reader version: fall back to the seq watermark alone.
                log.info("export position of %s no longer matches the reader; resuming by seq", session_id)
                state.cursor = None
                continue
            if page.expired and state.cursor is not None:
                # Retention deleted what followed the cursor: start again from the oldest retained
                # event; the seq watermark skips what was sent, and a gap is counted as dropped.
                state.cursor = None
                continue
            fresh = [entry for entry in page.entries if entry.event.seq > state.seq]
            if fresh:
                return fresh, page.end
            if page.entries and page.next_cursor is not None:
                state.cursor = page.next_cursor  # only already-exported lines: skip them
                if not page.end:
                    continue
            return [], True

    def _note_gap(self, session_id: str, state: Position | TraceState, first_seq: int, signal: str) -> None:
        gap = first_seq - state.seq - 1
        if gap > 0:
            log.warning("session %s: %d events were deleted before export (%s)", session_id, gap, signal)
            if signal == ("logs" if "logs" in self.settings.signals else "traces"):
                self.metrics.dropped.inc(gap)  # each deleted event once, not once per signal

    def _export_logs(self, root: Path, store: CursorStore, session_id: str, root_session: str, allow: bool) -> _Behind:
        position = _loaded(self._positions, root, store, Position, session_id)
        result = _Behind()
        while True:
            fresh, end = self._fresh(root, session_id, position)
            if not fresh:
                return result
            if not allow:
                return self._behind(root, session_id, position.seq, fresh, result, healthy=True)
            outcome = self.sender.send_logs([(entry.event, root_session) for entry in fresh])
            if outcome is not Outcome.ACCEPTED:
                self._failed("logs", outcome)
                return self._behind(root, session_id, position.seq, fresh, result, healthy=False)
            self._note_gap(session_id, position, fresh[0].event.seq, "logs")
            position.seq = fresh[-1].event.seq
            position.cursor = fresh[-1].cursor
            store.save(position)
            result.sent += len(fresh)
            self.metrics.exported.inc(len(fresh))
            self._accepted()
            if end:
                return result

    def _export_traces(
        self,
        root: Path,
        store: CursorStore,
        session_id: str,
        root_session: str,
        summary: reading.SessionSummary,
        allow: bool,
    ) -> _Behind:
        state = _loaded(self._traces, root, store, TraceState, session_id)
        result = _Behind()
        while True:
            fresh, end = self._fresh(root, session_id, state)
            if not fresh:
                break
            if not allow:
                return self._behind(root, session_id, state.seq, fresh, result, healthy=True)
            # Fold into a copy: the position changes only once the backend took the finished spans.
            work = copy.deepcopy(state)
            spans = fold(work, [entry.event for entry in fresh], root_session, hooks_count=summary.hooks_usage_counts)
            if spans:
                outcome = self.sender.send_spans(spans)
                if outcome is not Outcome.ACCEPTED:
                    self._failed("traces", outcome)
                    return self._behind(root, session_id, state.seq, fresh, result, healthy=False)
                self.metrics.spans.inc(len(spans))
                self._accepted()
            self._note_gap(session_id, state, fresh[0].event.seq, "traces")
            work.cursor = fresh[-1].cursor
            store.save(work)
            state = self._traces[(root, session_id)] = work
            if end:
                break
        span = self._final_session_span(state, summary, root_session) if allow else None
        if span is not None and summary.events > state.session_span_events:
            outcome = self.sender.send_spans([span])
            if outcome is not Outcome.ACCEPTED:
                self._failed("traces", outcome)
                result.healthy = False
                return result
            self.metrics.spans.inc()
            self._accepted()
            state.session_span_events = summary.events
            store.save(state)
        return result

    def _final_session_span(
        self, state: TraceState, summary: reading.SessionSummary, root_session: str
    ) -> SpanData | None:
        """The session's span once the session is final (see the module docstring), else None."""
        if summary.first_time is None or summary.last_time is None or state.seq < summary.events:
            return None  # not all of it folded yet (a page limit, a refused batch)
        quiet = self.clock() - summary.last_time.timestamp()
        if quiet < (self.settings.stale_after if state.open else self.settings.session_idle):
            return None
        info = SessionInfo(
            session_id=summary.session_id,
            root_session_id=root_session,
            parent_session_id=summary.parent_session_id,
            agent=summary.agent,
            first_time=summary.first_time,
            last_time=summary.last_time,
            events=summary.events,
            failures=summary.failures,
            role=state.role,
        )
        return session_span(info)

    def resend(self, since: float | None = None) -> tuple[int, bool]:
        """Send again every span of each session with events at or after ``since`` (all: None), in one pass.

        For a backend that lost what it acknowledged (one that answers before it writes, then
        crashed): the spans carry the ids they had, so a backend that still holds some keeps one per
        id. Positions are neither read nor moved; cycles still open and sessions not yet final are
        left to the running exporter. Returns (spans the backend accepted, every batch accepted).
        """
        sent = 0
        for root in self._stores:
            summaries = _summaries(root)
            parents = {sid: summary.parent_session_id for sid, summary in summaries.items()}
            for session_id in sorted(summaries):
                summary = summaries[session_id]
                if since is not None and (summary.last_time is None or summary.last_time.timestamp() < since):
                    continue
                root_session = _root_of(session_id, parents)
                state = TraceState(session_id=session_id)
                while True:
                    fresh, end = self._fresh(root, session_id, state)
                    if not fresh:
                        break
                    events = [entry.event for entry in fresh]
                    spans = fold(state, events, root_session, hooks_count=summary.hooks_usage_counts)
                    state.cursor = fresh[-1].cursor
                    final = self._final_session_span(state, summary, root_session) if end else None
                    spans += [final] if final is not None else []
                    if spans:
                        outcome = self.sender.send_spans(spans)
                        if outcome is not Outcome.ACCEPTED:
                            self._failed("traces", outcome)
                            self._settle(self._signals["traces"], healthy=False)
                            return sent, False
                        sent += len(spans)
                        self.metrics.spans.inc(len(spans))
                        self._accepted()
                    if end:
                        break
        return sent, True

    def _behind(
        self,
        root: Path,
        session_id: str,
        seq: int,
        fresh: list[reading.Entry],
        result: _Behind,
        *,
        healthy: bool,
    ) -> _Behind:
        try:
            last = reading.read_page(root, session_id, limit=1, reverse=True).entries
        except (reading.SessionNotFound, ValueError):
            last = []
        result.lag = max(0, last[0].event.seq - seq) if last else 0
        result.since = fresh[0].event.timestamp.timestamp()
        result.healthy = healthy
        return result

    # --- the loop --------------------------------------------------------------------------------

    def run(self, stop: threading.Event, *, once: bool = False) -> int:
        """Export until ``stop`` is set (or, with ``once``, until caught up or the backend fails).

        Returns:
            0, or 1 when ``once`` ended with events the backend did not accept.
        """
        self._publish()
        try:
            while not stop.is_set():
                _, healthy = self.run_once()
                if once:
                    return 0 if healthy else 1
                now = time.monotonic()
                waits = [signal.retry_at - now for signal in self._signals.values()]
                # Poll while any signal may be tried; when every one is pausing, sleep to the first retry.
                pause = self.settings.poll_interval if min(waits) <= 0 else min(waits)
                stop.wait(max(0.01, min(pause, self.settings.retry_max)))
            return 0
        finally:
            self._status.remove()

    def close(self) -> None:
        """Close the sender."""
        with contextlib.suppress(Exception):
            self.sender.close()


def _loaded(
    cache: dict[tuple[Path, str], _State], root: Path, store: CursorStore, kind: type[_State], session_id: str
) -> _State:
    """Return the session's position of one signal: kept from the last pass, else read from its file."""
    key = (root, session_id)
    state = cache.get(key) or store.load(kind, session_id)
    state.session_id = session_id
    cache[key] = state
    return state


def _summaries(root: Path) -> dict[str, reading.SessionSummary]:
    """Every session's summary keyed by id; none when the root cannot be read (the next pass tries again)."""
    try:
        return {summary.session_id: summary for summary in reading.list_sessions(root)}
    except (LayoutError, LookupError, OSError):
        return {}


def _needed_segment(cursor: str | None, session_id: str) -> int:
    """The segment a position's cursor lies in: 1 (hold everything) without one, or for one of another reader."""
    if cursor is None:
        return 1
    try:
        return reading.cursor_segment(cursor, session_id)
    except (ValueError, LookupError):
        return 1


def _root_of(session_id: str, parents: Mapping[str, str | None]) -> str:
    """Follow each session's recorded parent (from its files, not from one event) up to the tree's root."""
    current = session_id
    seen = {current}
    for _ in range(_MAX_PARENT_HOPS):
        parent = parents.get(current)
        if parent is None or parent in seen or not is_safe_session_id(parent):
            return current
        if parent not in parents:
            return parent  # not written (yet) under this root: its id is still the tree's top
        seen.add(parent)
        current = parent
    return current
