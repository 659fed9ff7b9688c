"""From a decoded batch to staged lines: redaction, idempotency, the stage protocol, ``seq``, encoding.

:meth:`Ingest.apply` runs on the event loop for every batch, whichever way it came (a client's
connection, an adopted spool, a one-shot command or hook, a share of a sharded collector): it is
the one place where events become stored lines, so it is where secrets are redacted
(:mod:`gz_ia.client.redaction`), before anything else looks at an event. It decides each event's fate (written,
duplicate, rejected), encodes accepted events straight into their session's pending buffer with the
collector's fields (``seq``, ``delivery``) spliced in, and appends rejected ones with their reason to
the root's rejects file. Nothing is written to disk here: the caller flushes, then answers.
"""

from __future__ import annotations

import base64
import collections
import operator
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

import msgspec

from gz_ia.client.protocol import Rejection as WireRejection
from gz_ia.client.protocol import RejectReason
from gz_ia.client.redaction import Redactor
from gz_ia.client.schema import FAILED, SCHEMA_VERSION, LogEvent, Stage, Status, is_safe_session_id, storable
from gz_ia.collector.storage.open_files import AppendFile
from gz_ia.collector.storage.sessions import RootStore, SessionState
from gz_ia.collector.storage.tally import note_delivery
from gz_ia.collector.storage.writer import Writer

from .rules import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_EVENT_NUMBER,
    Rejection,
    invalid_event_number,
    session_unavailable,
    timestamp_out_of_range,
    unsafe_id,
)
from .stages import DEFAULT_MAX_OPEN_ACTIONS, DEFAULT_MAX_OPEN_ACTIONS_TOTAL, NEXT_STAGE, REFUSED, CycleBudget
from .stages import apply as apply_stage
from .validation import DecodedBatch

__all__ = ["BatchOutcome", "Ingest", "RejectRecord"]

_VERSION: Final = b"%d" % SCHEMA_VERSION
"""Every stored line says the schema version it was written with (``gz_ia.client.schema.SCHEMA_VERSION``)."""
_SAFE_PARENTS_KEPT: Final = 65_536
LOSS_AGENT: Final = "gz-ia"
"""Agent name of the loss notices clients write into sessions (``gz-ia.dropped #n``)."""


_stage_of: Final = operator.attrgetter("stage")


class RejectRecord(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One line of ``<root>/rejects.jsonl``: what was refused, when, from whom, and why."""

    received: datetime
    reason: RejectReason
    detail: str
    producer: str
    delivery: str
    event: LogEvent | None = None
    raw: object = None


class BatchOutcome:
    """What one batch became; answered once the files it touched are written."""

    __slots__ = (
        "client_dropped",
        "count",
        "duplicates",
        "durations",
        "first",
        "received_at",
        "rejections",
        "rejects",
        "seqs",
        "touched",
        "usage",
        "written",
    )

    def __init__(self, first: int, count: int, *, want_seqs: bool, received_at: float) -> None:
        self.first = first
        self.count = count
        self.seqs: list[int] | None = [] if want_seqs else None
        self.rejections: list[WireRejection] = []
        self.touched: dict[AppendFile, int] = {}
        """Session files holding this batch's lines (or a duplicate's original), with their generation."""
        self.rejects: tuple[AppendFile, int] | None = None
        """The rejects file holding this batch's reject records, with its generation."""
        self.written: dict[tuple[Stage, Status], int] = {}
        """Events staged for writing, counted per (stage, status)."""
        self.durations: list[tuple[Status, int]] = []
        """``(status, duration_ms)`` of the staged FINISH events that carry a duration."""
        self.duplicates = 0
        self.client_dropped = 0
        self.usage: list[tuple[str, tuple[tuple[int, int, int, int], float, str]]] = []
        """``(agent, usage)`` of each staged usage record (:func:`gz_ia.client.usage.usage_of`)."""
        self.received_at = received_at

    def intact(self) -> bool:
        """Tell whether every session file this batch staged lines in still holds them (no failure since)."""
        return all(target.generation == generation for target, generation in self.touched.items())

    def recorded(self) -> bool:
        """Tell whether this batch's reject records are still staged or written (no failure since).

        The rejections are answered either way: a client never resends a refused event, so a record
        that could not be written is counted and logged as such, never retried.
        """
        return self.rejects is None or self.rejects[0].generation == self.rejects[1]


class _Staged:
    """What the batches of one outcome staged, counted once after them."""

    __slots__ = ("accepted", "failed_stages", "finished")

    def __init__(self) -> None:
        self.accepted: list[LogEvent] = []
        self.finished: list[LogEvent] = []
        self.failed_stages: list[Stage] = []


class Ingest:
    """Apply batches to the writer's session state.

    Args:
        writer: the single writer.
        max_open_actions: bound on open cycles per session (memory bound against a flood of actions
            that never FINISH).
        max_open_actions_total: bound on open cycles of all sessions in memory.
        clock: wall clock for reject records and latency.
        redactor: what masks secrets in every event, its rejection and its reject record before
            they are stored; None stores them as sent (``redaction.enabled = false``).
    """

    def __init__(
        self,
        writer: Writer,
        *,
        max_open_actions: int = DEFAULT_MAX_OPEN_ACTIONS,
        max_open_actions_total: int = DEFAULT_MAX_OPEN_ACTIONS_TOTAL,
        clock: Callable[[], float] = time.time,
        redactor: Redactor | None = None,
    ) -> None:
        self.writer = writer
        self.redactor = redactor
        self.cycles = CycleBudget(
            per_session=max_open_actions, total=max_open_actions_total, recount=self._open_cycles_in_memory
        )
        self.clock = clock
        self._encoder = msgspec.json.Encoder()
        self._safe_parents: set[str] = set()
        self._line = bytearray()

    def _open_cycles_in_memory(self) -> int:
        return sum(len(state.open_actions) for root in self.writer.roots for state in root.sessions.values())

    def apply(self, root: RootStore, producer: str, batch: DecodedBatch) -> BatchOutcome:
        """Stage every event of ``batch`` from ``producer`` and return the batch's outcome."""
        outcome = BatchOutcome(batch.first, len(batch.events), want_seqs=batch.verdicts, received_at=time.monotonic())
        staged = _Staged()
        # First: the stage protocol keys cycles by the redacted action, so an action's events
        # (redacted here, or already by a client's spool) stay one cycle.
        events = batch.events if self.redactor is None else self.redactor.events(batch.events)
        self._stage(root, [(producer, batch, events)], outcome, staged)
        self._settle(outcome, staged)
        return outcome

    def apply_keyed(self, root: RootStore, batches: list[tuple[str, DecodedBatch]]) -> BatchOutcome:
        """Stage batches of many producers as one outcome, answered together.

        For a source whose every record is its own producer (an OTLP export's spans and log
        records, each keyed so that a resent one is known as a duplicate): what a batch costs
        beside its events (an outcome, its answer, its counts) is paid once for the whole export.
        The outcome's seqs and rejection indexes are not kept per batch: such a source is answered
        as a whole.
        """
        outcome = BatchOutcome(
            1, sum(len(batch.events) for _, batch in batches), want_seqs=False, received_at=time.monotonic()
        )
        staged = _Staged()
        every = [event for _, batch in batches for event in batch.events]
        redacted = every if self.redactor is None else self.redactor.events(every)  # one call for the export
        start = 0
        each: list[tuple[str, DecodedBatch, list[LogEvent | None]]] = []
        for producer, batch in batches:
            end = start + len(batch.events)
            each.append((producer, batch, redacted[start:end]))
            start = end
        self._stage(root, each, outcome, staged)
        self._settle(outcome, staged)
        return outcome

    def _stage(
        self,
        root: RootStore,
        batches: list[tuple[str, DecodedBatch, list[LogEvent | None]]],
        outcome: BatchOutcome,
        staged: _Staged,
    ) -> None:
        """Stage each ``(producer, batch, events)`` (``events``: the batch's, redacted) into ``outcome``,
        in order; what the outcome counts once is noted in ``staged``.

        This loop runs for every event the collector receives, so it keeps per-event work to
        attribute reads, dictionary lookups and one JSON encoding; whatever can be done once per
        batch (delivery watermarks) or once per outcome (metric counts, loss notices, the sessions
        marked for the write pass) is done after it. An export of many one-record producers pays
        the setup once.
        """
        writer = self.writer
        sessions = root.sessions
        encode_into = self._encoder.encode_into
        seqs = outcome.seqs
        touched = outcome.touched
        accepted = staged.accepted
        finished = staged.finished
        failed_stages = staged.failed_stages
        line = self._line
        safe_parents = self._safe_parents
        cycles = self.cycles
        encode = self._encoder.encode
        dirty: dict[SessionState, int] = {}
        for producer, batch, events in batches:
            last_numbers: dict[SessionState, int] = {}
            # The producer as a JSON string without its closing quote (escaped, though hello admits
            # only hex ids: adopted spools take theirs from a file name), with "%" doubled for the format.
            quoted = encode(producer)[:-1].replace(b"%", b"%%")
            tail = b',"seq":%d,"schema_version":' + _VERSION + b',"delivery":' + quoted + b':%d"}\n'
            first = batch.first
            if not 1 <= first <= MAX_EVENT_NUMBER - len(batch.events) + 1:
                # Below 1 every number would pass for a duplicate of one already written.
                self._reject_all(root, outcome, producer, batch, invalid_event_number(first))
                continue
            rejections = batch.rejections
            for index, event in enumerate(events):
                number = first + index
                if event is None:
                    self._reject(root, outcome, producer, number, index, rejections[index], None, batch.raw.get(index))
                    continue
                timestamp = event.timestamp
                if not EARLIEST_TIMESTAMP <= timestamp < LATEST_TIMESTAMP:
                    self._reject(root, outcome, producer, number, index, timestamp_out_of_range(timestamp), event, None)
                    continue
                state = sessions.get(event.session_id)
                # Decoding only length-checked the ids (see validation): each new one is checked here.
                parent = event.parent_session_id
                if parent is not None and parent not in safe_parents:
                    refusal = self._admit_id("parent_session_id", parent)
                    if refusal is not None:
                        self._reject(root, outcome, producer, number, index, refusal, event, None)
                        continue
                top = event.root_session_id
                if top is not None and top not in safe_parents:
                    refusal = self._admit_id("root_session_id", top)
                    if refusal is not None:
                        self._reject(root, outcome, producer, number, index, refusal, event, None)
                        continue
                if state is None:
                    state = self._open_session(root, outcome, producer, number, index, event)
                    if state is None:
                        continue
                    cycles.adopt(state.open_actions)
                if number <= state.marks.get(producer, 0):
                    # Answered as delivered only if the original is still there when this batch is
                    # answered: it may be staged or in flight yet, and lost with a failed write.
                    if state not in touched:
                        touched[state] = state.generation
                    outcome.duplicates += 1
                    if seqs is not None:
                        seqs.append(-1)
                    continue
                # The stage protocol: the table holds every allowed move; anything else is refused.
                open_actions = state.open_actions
                cycle = event.cycle
                key = event.action if cycle is None else (event.action, cycle)
                stage = event.stage
                current = open_actions.get(key)
                following = NEXT_STAGE.get((current, stage), REFUSED)
                if following is REFUSED:
                    moved = apply_stage(current, stage, event.action, cycle)
                    assert isinstance(moved, Rejection)
                    self._reject(root, outcome, producer, number, index, moved, event, None)
                    continue
                if following is None:
                    del open_actions[key]
                    since = state.open_since.pop(key, None)
                    if since is not None and timestamp < since:
                        state.begun_earlier(key, timestamp)  # the fold's cycle begins at its earliest stage
                    if state.used_open:
                        state.used_open.discard(key)
                    cycles.count -= 1  # closing is never refused: bookkeeping only, kept out of a call
                    finished.append(event)
                elif current is None:
                    refusal = cycles.open(open_actions, key, following, state.session_id)
                    if refusal is not None:
                        self._reject(root, outcome, producer, number, index, refusal, event, None)
                        continue
                    state.open_since[key] = timestamp
                    if state.latest_begun is None or timestamp > state.latest_begun:
                        state.latest_begun = timestamp
                elif following is not current:
                    open_actions[key] = following
                    # Only a stage stamped before the newest can be before its cycle's first.
                    if timestamp < state.newest_stamp and timestamp < state.open_since.get(key, timestamp):
                        state.begun_earlier(key, timestamp)
                if timestamp.tzinfo is not UTC:
                    event = msgspec.structs.replace(event, timestamp=timestamp.astimezone(UTC))
                state.seq += 1
                # Encoded into a small reused buffer (msgspec sizes its buffer for each call), then
                # copied out as the session's next pending line.
                encode_into(event, line, 0)
                attrs = event.attrs
                if attrs is not None and b"null" in line:
                    # A NaN or an infinity from an older client, which JSON writes as null and no reader
                    # takes: stored as the client stores it now. (A "null" in a text only costs this.)
                    event = _storable_attrs(event)
                    attrs = event.attrs
                    encode_into(event, line, 0)
                del line[-1]  # the closing brace: the collector's fields go after the event's own
                line += tail % (state.seq, number)
                state.pending.append(line[:])
                # The session's summary, for its checkpoints (a failed write rebuilds it from the file).
                stamp = state.last_stamp = event.timestamp
                if stamp > state.newest_stamp:  # noqa: PLR1730 - max() would add a call per event
                    state.newest_stamp = stamp
                if not state.first_time:
                    state.note_first(event)
                elif not state.parent and event.parent_session_id is not None:
                    # A session's first events may not know its parent yet (an OTLP span exported
                    # before its agent's span): the first event that names one gives it.
                    state.parent = event.parent_session_id
                status = event.status
                if status is FAILED:
                    state.failures += 1
                    failed_stages.append(stage)
                    if following is None:
                        state.note_failed(stamp, event.action, event.error)
                if attrs is not None:
                    found = state.usage.add(attrs)
                    if found is not None:
                        if stamp < state.usage_low:  # noqa: PLR1730
                            state.usage_low = stamp
                        if following is not None:
                            state.used_open.add(key)
                        if not found[1]:  # the metrics count each model call once
                            outcome.usage.append((event.agent, found[0]))
                # For `gz-ia session why`: the cycles begun, and quiet points (SessionTally.quiet_due).
                if following is None:  # a FINISH: the cycle ended
                    state.ended_failed = status is FAILED
                    if (
                        state.seq >= state.quiet_next
                        and not state.used_open
                        and (state.newest_stamp >= state.quiet_after or state.seq >= state.quiet_force)
                    ):
                        state.note_quiet(state.newest_stamp)
                elif current is None:  # a cycle began
                    state.cycles += 1
                    if stamp < state.begun_low:  # noqa: PLR1730
                        state.begun_low = stamp
                last_numbers[state] = number
                accepted.append(event)
                if seqs is not None:
                    seqs.append(state.seq)
            # Once per session of the batch, not per event: with many sessions that is nearly per
            # event. Before the next batch, which may be the same producer's again (a duplicate).
            for state, number in last_numbers.items():
                marks = state.marks
                if len(marks) > 1:
                    note_delivery(marks, producer, number)
                else:  # one producer or none: already in last-write order, and far below the bound
                    marks[producer] = number
                touched[state] = state.generation
            dirty.update(last_numbers)
        writer.mark_dirty_all(dirty)

    def _admit_id(self, field: str, value: str) -> Rejection | None:
        """Check an id the ids already checked do not hold: remember it if safe, else say why not."""
        if not is_safe_session_id(value):
            return unsafe_id(field, value)
        safe_parents = self._safe_parents
        if len(safe_parents) >= _SAFE_PARENTS_KEPT:
            safe_parents.clear()
        safe_parents.add(value)
        return None

    @staticmethod
    def _settle(outcome: BatchOutcome, staged: _Staged) -> None:
        """Count what the outcome's batches staged: once, after their events."""
        finished = staged.finished
        outcome.written = _count_written(staged.accepted, staged.failed_stages)
        outcome.durations = [(event.status, event.duration_ms) for event in finished if event.duration_ms is not None]
        for event in finished:
            if event.agent == LOSS_AGENT and event.attrs:
                dropped = event.attrs.get("dropped")
                if isinstance(dropped, int):
                    outcome.client_dropped += dropped

    def _open_session(
        self, root: RootStore, outcome: BatchOutcome, producer: str, number: int, index: int, event: LogEvent
    ) -> SessionState | None:
        """Return the state of ``event``'s session, new or rebuilt from its files; None if refused."""
        if not is_safe_session_id(event.session_id):
            self._reject(root, outcome, producer, number, index, unsafe_id("session_id", event.session_id), event, None)
            return None
        try:
            return self.writer.session(root, event.session_id)
        except (OSError, ValueError) as exc:
            # A planted symlink (ELOOP), a directory in the file's place, an unreadable file:
            # this session cannot be written safely. Refuse the event, keep the connection.
            unavailable = session_unavailable(event.session_id, root.path, exc)
            self._reject(root, outcome, producer, number, index, unavailable, event, None)
            return None

    def _reject(
        self,
        root: RootStore,
        outcome: BatchOutcome,
        producer: str,
        number: int,
        index: int,
        rejection: Rejection,
        event: LogEvent | None,
        raw: bytes | None,
    ) -> None:
        detail = rejection.detail
        presentable = _presentable(raw) if raw is not None else None
        redactor = self.redactor
        if redactor is not None:
            # The detail may quote the action; an undecodable event is redacted as what it shows.
            detail = redactor.text(detail)
            presentable = _redacted_presentable(redactor, raw, presentable)
        outcome.rejections.append(WireRejection(index, rejection.reason, detail))
        if outcome.seqs is not None:
            outcome.seqs.append(0)
        record = RejectRecord(
            received=datetime.fromtimestamp(self.clock(), UTC),
            reason=rejection.reason,
            detail=detail,
            producer=producer,
            delivery=f"{producer}:{number}",
            event=event,
            raw=presentable,
        )
        target = root.rejects
        target.pending.append(self._encoder.encode(record) + b"\n")
        if outcome.rejects is None:
            outcome.rejects = (target, target.generation)
            self.writer.mark_dirty(target)

    def _reject_all(
        self, root: RootStore, outcome: BatchOutcome, producer: str, batch: DecodedBatch, rejection: Rejection
    ) -> None:
        """Refuse every event of ``batch`` with ``rejection``."""
        redact = None if self.redactor is None else self.redactor.event
        for index, event in enumerate(batch.events):
            shown = event if event is None or redact is None else redact(event)
            self._reject(root, outcome, producer, batch.first + index, index, rejection, shown, batch.raw.get(index))


_any_msgpack: Final = msgspec.msgpack.Decoder()


def _presentable(raw: bytes) -> object:
    """Return an undecodable event as JSON-able data, or its bytes in base64 when it is not even that."""
    try:
        value = _any_msgpack.decode(raw)
        msgspec.json.encode(value)
    except (msgspec.DecodeError, msgspec.EncodeError, TypeError, ValueError):
        return {"base64": base64.b64encode(raw).decode()}
    return value


def _redacted_presentable(redactor: Redactor, raw: bytes | None, presentable: object) -> object:
    """An undecodable event as the rejects file shows it, redacted: its decoded values, or the
    base64 of its bytes with the secrets readable in them (as Latin-1) masked first."""
    if not (isinstance(presentable, dict) and set(presentable) == {"base64"}) or raw is None:
        return redactor.value(presentable)
    text = raw.decode("latin-1")
    redacted = redactor.text(text)
    if redacted == text:
        return presentable
    return {"base64": base64.b64encode(redacted.encode("latin-1", errors="replace")).decode()}


def _storable_attrs(event: LogEvent) -> LogEvent:
    """``event`` with its attribute values as the client makes them storable (the same function)."""
    attrs = {key: storable(value) for key, value in (event.attrs or {}).items()}
    return msgspec.structs.replace(event, attrs=attrs)


def _count_written(accepted: list[LogEvent], failed_stages: list[Stage]) -> dict[tuple[Stage, Status], int]:
    """Count a batch's staged events per (stage, status): by stage alone, then move the few FAILED
    ones over (a (stage, status) key per event costs twice as much, a tuple built and hashed)."""
    written = {(stage, Status.OK): count for stage, count in collections.Counter(map(_stage_of, accepted)).items()}
    for stage, count in collections.Counter(failed_stages).items():
        written[stage, Status.OK] -= count
        written[stage, Status.FAILED] = count
    return written
