"""The OTLP/HTTP receiver: ``POST /v1/traces``, ``/v1/logs`` and ``/v1/metrics`` on the loopback side.

A request is read (:mod:`gz_ia.collector.otlp`), mapped to items, and each item staged through the
intake as a client's batch is (:class:`~gz_ia.collector.service.intake.Intake`), under a producer
id of its own drawn from the item's key (the span or the log record): a re-sent export finds its
events already written and is answered as a duplicate, across restarts too, since the watermarks
are recovered from the stored lines. The
answer is 200 only once every item is written with the collector's durability (the verdicts of a
client batch wait for the same write pass), 429 with ``Retry-After`` while the collector holds as
much as it takes (the staging bound; the HTTP side bounds the bodies held), 503 with
``Retry-After`` while writes fail, 400 for a body it cannot read (counted in
``gzia_otlp_rejected_total`` and logged), 413 beyond the body limit. ``/v1/metrics`` is read and
answered but its points are dropped: Claude Code's token and cost counters say again what its
``api_request`` events say.

With the agent's hooks and telemetry both on, a tool call is one cycle: the hooks' (they come
first: the agent waits for each hook, and exports its logs every few seconds). A tool result whose
call id the session already holds (an open cycle, or a line among the session's newest bytes) adds
nothing. One whose cycle is staged but not yet written (an earlier copy of the same export, still in
a write pass that has not ended) is answered 503 with ``Retry-After``: a 200 then would come before
the lines are on the disk.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from gz_ia.collector.errors import CollectorError
from gz_ia.collector.http import Request, Response, Route
from gz_ia.collector.http.messages import TooLarge, decoded_body
from gz_ia.collector.ingest.validation import DecodedBatch, checked_batches, refused_batch
from gz_ia.collector.otlp import OTLP_INSTALL_HINT, BodyUnreadable, Item, OtlpUnavailable, Signal, decode_request
from gz_ia.collector.otlp.mapping import map_logs, map_spans
from gz_ia.collector.reading.segments import SessionView
from gz_ia.collector.service.replies import FutureReply
from gz_ia.collector.service.request_roots import own_root, request_root
from gz_ia.collector.storage.names import active_name

from .held_calls import CallLookup, Held, RecentCycles

if TYPE_CHECKING:
    from gz_ia.collector.metrics import Metrics
    from gz_ia.collector.service.intake import Intake
    from gz_ia.collector.storage.sessions import RootStore
    from gz_ia.collector.storage.writer import Writer

__all__ = ["MAX_OTLP_BODY", "ROOT_HEADER", "OtlpReceiver", "otlp_routes"]

log = logging.getLogger("gz_ia.collector")

MAX_OTLP_BODY: Final = 32 << 20
"""Largest export body read, as sent and once decompressed (beyond: 413)."""
ROOT_HEADER: Final = "x-gz-ia-root"
"""The session root to write to (``OTEL_EXPORTER_OTLP_HEADERS=x-gz-ia-root=/path/.harness``), one
that exists (:mod:`.request_roots`); without it, the root the collector's own environment finds."""
_SPANS_REMEMBERED: Final = 100_000
_RETRY_AFTER_BUSY: Final = "1"
_RETRY_AFTER_FAILING: Final = "5"
_LOG_INTERVAL: Final = 60.0
_EMPTY_JSON: Final = b"{}"


class OtlpReceiver:
    """The receiver's state: spans seen (for their sessions), log pacing.

    Its memory is bounded by the HTTP side's bound on the bodies held at once (until each is
    answered) and by decoding one export at a time: nothing awaits between reading a body and
    staging what it holds.

    Args:
        intake: where each item is staged, and answered once written.
        writer: the sessions it holds, looked in for a tool call's cycle and a session's root.
        metrics: where exports and records are counted.
    """

    def __init__(self, intake: Intake, writer: Writer, metrics: Metrics) -> None:
        self.intake = intake
        self.writer = writer
        self.metrics = metrics
        self.sessions: collections.OrderedDict[str, tuple[str, str | None]] = collections.OrderedDict()
        self._logged_at: dict[str, float] = {}
        self._recent = RecentCycles()
        self._hooked: collections.OrderedDict[tuple[str, str], bool] = collections.OrderedDict()
        """(root, session) → whether agent hooks opened it, newest last: a session's first event never
        changes, so the answer is remembered once it has one (a session with none yet is looked up again)."""

    def routes(self) -> list[Route]:
        """The three OTLP routes; ``endpoints.otlp`` is the base URL an exporter takes."""
        return [
            Route(
                "POST", "/v1/traces", self._handler(Signal.TRACES), max_body=MAX_OTLP_BODY, endpoint="otlp", listed=""
            ),
            Route("POST", "/v1/logs", self._handler(Signal.LOGS), max_body=MAX_OTLP_BODY),
            Route("POST", "/v1/metrics", self._handler(Signal.METRICS), max_body=MAX_OTLP_BODY),
        ]

    def _handler(self, signal: Signal) -> Any:
        async def handle(request: Request) -> Response:
            return await self.receive(signal, request)

        return handle

    def _rejected(self, reason: str, status: int, detail: str) -> Response:
        self.metrics.otlp_rejected.labels(reason).inc()
        self._log_once(
            reason, "OTLP export refused (%d, %s): %s (gzia_otlp_rejected_total counts them)", status, reason, detail
        )
        return _error(status, detail)

    def _log_once(self, kind: str, message: str, *args: object) -> None:
        """Log a problem at most once a minute per kind: an exporter sends every few seconds."""
        now = time.monotonic()
        if now - self._logged_at.get(kind, -_LOG_INTERVAL) >= _LOG_INTERVAL:
            self._logged_at[kind] = now
            log.warning(message, *args)

    async def receive(self, signal: Signal, request: Request) -> Response:
        """Answer one export request (see the module docstring)."""
        intake = self.intake
        if intake.failing:
            return _error(503, "the collector cannot write now; retry later", retry_after=_RETRY_AFTER_FAILING)
        if intake.busy:
            self.metrics.otlp_busy.inc()
            return _error(429, "the collector holds as much as it takes; retry later", retry_after=_RETRY_AFTER_BUSY)
        try:
            body = decoded_body(request, MAX_OTLP_BODY)
        except TooLarge as exc:
            return self._rejected("too_large", 413, str(exc))
        except ValueError as exc:
            return self._rejected("encoding", 400, str(exc))
        try:
            content_type = request.headers.get("content-type", "")
            message = decode_request(signal, content_type, body)
        except OtlpUnavailable:
            return _error(501, OTLP_INSTALL_HINT)
        except BodyUnreadable as exc:
            return self._rejected(exc.reason, 400, str(exc))
        protobuf = not content_type.lower().startswith("application/json")
        if signal is Signal.METRICS:
            return _ok(protobuf)
        if signal is Signal.TRACES:
            items = map_spans(message, self.sessions, checked=True)
        else:
            items = map_logs(message, checked=True)
        self._bound_sessions()
        named = request.headers.get(ROOT_HEADER, "")
        where = request_root(named, None, request.peer_uid, own_root)
        if where.refused is not None:
            self._log_once("named root", "OTLP export written under %s: %s", where.path, where.refused)
        # Without a root named, each session goes where the collector already writes it (its
        # agent's hooks made it in the workspace's root), else to the collector's own root.
        by_root: dict[str, list[Item]] = {}
        holding: dict[str, str | None] = {}  # an export holds many records of each session
        for item in items:
            found = None
            if not named:
                if item.session_id in holding:
                    found = holding[item.session_id]
                else:
                    found = holding[item.session_id] = self._root_holding(item.session_id, request.peer_uid)
            by_root.setdefault(found or where.path, []).append(item)
        # What staging holds counts against the collector's bound as the body's share of each
        # event, as a client's batch counts its frame's size.
        per_event = len(body) // max(1, sum(len(item.events) for item in items))
        # What was decompressed and decoded is in the writer's hands once staged: not held while
        # the write pass runs, which many exports may wait on at once.
        del body, message, items
        staged: list[asyncio.Future[bool]] = []
        for path, grouped in by_root.items():
            try:
                root = intake.open_root(Path(path), request.peer_uid)
            except (CollectorError, OSError) as exc:  # locked by another collector, a disk fault, ...
                return self._rejected("root", 400, f"cannot use the session root: {exc}")
            done = self._stage(root, signal, grouped, per_event)
            if isinstance(done, str):
                return _error(503, f"{done}; retry later", retry_after="1")
            if done is not None:
                staged.append(done)
        if staged and not all(await asyncio.gather(*staged)):
            return _error(503, "the collector could not write this export; retry later", retry_after="1")
        return _ok(protobuf)

    def _root_holding(self, session_id: str, uid: int) -> str | None:
        """The root of ``uid``'s open ones that holds ``session_id`` (or, for a Claude Code subagent's
        ``<session>.<agent>``, its session), in memory or on disk; None when none does."""
        wanted = (session_id, session_id.partition(".")[0])
        roots = [root for root in self.writer.roots if root.dirs.uid == uid and not root.removed]
        for root in roots:
            if any(each in root.sessions for each in wanted):
                return str(root.path)
        for root in roots:
            for each in wanted:
                with contextlib.suppress(OSError, ValueError):
                    os.stat(active_name(each), dir_fd=root.dirs.sessions_fd, follow_symlinks=False)
                    return str(root.path)
        return None

    def _opened_by_hooks(self, root: RootStore, session_id: str) -> bool:
        """Whether the agent's hooks opened the session: their first event is its ``session`` cycle,
        which telemetry never writes. An agent's hooks run before its first request, and are
        answered once written, so they are there before any of its telemetry."""
        key = (str(root.path), session_id)
        known = self._hooked.get(key)
        if known is not None:
            self._hooked.move_to_end(key)
            return known
        first = _first_action(root, session_id)
        if first is None:
            return False
        self._hooked[key] = hooked = first == "session"
        while len(self._hooked) > _SPANS_REMEMBERED:
            self._hooked.popitem(last=False)
        return hooked

    def _bound_sessions(self) -> None:
        while len(self.sessions) > _SPANS_REMEMBERED:
            self.sessions.popitem(last=False)

    def _stage(
        self, root: RootStore, signal: Signal, items: list[Item], per_event: int
    ) -> asyncio.Future[bool] | str | None:
        """Stage every item (one producer each, so that a resent one is a duplicate) as one batch of
        the intake: the future of its verdict (True once written; None: every item was joined to a
        copy already held), or why the export cannot be answered 200 yet (nothing staged then)."""
        counted = self.metrics.otlp_records
        lookup = CallLookup(self.writer, root, self._recent)
        held: dict[int, Held] = {}
        for index, item in enumerate(items):
            if item.subagent is not None:
                _place_in_subagent(lookup, item)
            if item.join_cycle is not None:
                held[index] = lookup.held(item.session_id, item.join_cycle)
        if Held.BEING_WRITTEN in held.values():  # before anything is staged: the retry joins it written
            return "a tool call of this export is still being written from its first copy"
        kept = [
            item
            for index, item in enumerate(items)
            if held.get(index) is not Held.YES
            and not (item.hooks_record_it and self._opened_by_hooks(root, item.session_id))
        ]
        batches = [(_producer(item), batch) for item, batch in zip(kept, item_batches(kept), strict=True)]
        refused = sum(item.refused is not None for item in kept)
        joined = len(items) - len(kept)
        if joined:
            counted.labels(signal.value, "joined").inc(joined)
        if refused:
            counted.labels(signal.value, "refused").inc(refused)
        if not batches:
            return None
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        size = per_event * sum(len(batch.events) for _, batch in batches)
        if not self.intake.stage_keyed(root, batches, FutureReply(future), size):
            future.set_result(False)  # its root was removed meanwhile: the export is retried
        counted.labels(signal.value, "staged").inc(len(batches) - refused)
        return future


def item_batches(items: list[Item]) -> list[DecodedBatch]:
    """Each item as the batch it is staged as: events made as LogEvents as they are, fields checked
    (every such item of the export in one conversion), a refused item as its refusal."""
    converted = iter(checked_batches([item.events for item in items if item.refused is None and not item.checked]))
    return [
        refused_batch(item.refused, item.shown or {})
        if item.refused is not None
        else DecodedBatch(1, True, item.events, {}, {})
        if item.checked
        else next(converted)
        for item in items
    ]


def _producer(item: Item) -> str:
    """The producer an item is staged as: its own, so that a resent one is a duplicate."""
    return hashlib.sha256(item.key.encode()).hexdigest()[:16]


def _first_action(root: RootStore, session_id: str) -> str | None:
    """The action of the session's first stored event (None when it has none yet)."""
    try:
        view = SessionView(root.dirs, session_id)
    except (OSError, CollectorError):
        return None
    try:
        for _number, _start, _end, raw in view.forward(view.oldest(), 0):
            with contextlib.suppress(msgspec.DecodeError):
                return msgspec.json.decode(raw, type=_FirstAction).action
            return None
    finally:
        view.close()
    return None


class _FirstAction(msgspec.Struct):
    action: str


_LATE: Final = timedelta(seconds=2)
"""How long after a finished subagent session's last event its model request may still be stamped
(the SubagentStop hook runs after the request's end, but clocks of two processes differ)."""


def _place_in_subagent(lookup: CallLookup, item: Item) -> None:
    """Move a subagent's model request into the subagent's session.

    Claude Code's ``api_request`` record of a subagent's request names the main session and the
    subagent's type only; its hooks log the subagent in ``<session>.<agent id>`` from SubagentStart
    to SubagentStop. The request goes to the subagent session of this collector running at the
    request's time (the one started last, when several are); with none, it stays in the main session.
    """
    at = item.events[-1]["timestamp"]
    found: tuple[datetime, str] | None = None
    for session_id in lookup.below(item.session_id):
        try:
            state = lookup.writer.session(lookup.root, session_id)
            started = datetime.fromisoformat(state.first_time) if state.first_time else None
        except (OSError, ValueError):
            continue
        if started is None or started > at or (found is not None and started <= found[0]):
            continue
        if "subagent" not in state.open_actions and state.newest_stamp + _LATE < at:
            continue  # finished before the request
        found = (started, session_id)
    if found is not None:
        for event in item.events:
            event["session_id"], event["parent_session_id"] = found[1], item.session_id
        item.session_id = found[1]


def _ok(protobuf: bool) -> Response:
    # An empty Export*ServiceResponse: no partial_success (a rejected event is in the rejects file).
    if protobuf:
        return Response(200, b"", content_type="application/x-protobuf")
    return Response(200, _EMPTY_JSON)


def _error(status: int, detail: str, *, retry_after: str | None = None) -> Response:
    headers = [("Retry-After", retry_after)] if retry_after else []
    body = json.dumps({"code": status, "message": detail}).encode()
    return Response(status, body, headers=headers)


def otlp_routes(intake: Intake, writer: Writer, metrics: Metrics) -> list[Route]:
    """The OTLP receiver's routes, staging through ``intake``."""
    try:
        import opentelemetry.proto  # noqa: F401  # only to tell now whether the extra is there
    except ImportError:
        log.warning("OTLP/HTTP answers 501: %s", OTLP_INSTALL_HINT)
    return OtlpReceiver(intake, writer, metrics).routes()
