"""Rebuilding a session's tally from its files: the checkpoint, then every line after its position.

Recovery (the writer's first touch of a session after a start) and the readers' summaries both fold
lines the same way, through :class:`SessionFold`. Only the few fields a tally needs are decoded
from each line (:class:`Trace`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, Final

import msgspec

from gz_ia.client.schema import Stage

from .checkpoints import Checkpoint
from .names import session_archive
from .segments import SCAN_CHUNK, Segment, SegmentUnreadable, oldest_segment, open_archive
from .tally import LATEST, QUIET_GAP, TALLY_FIELDS, SessionTally, note_delivery

__all__ = ["SessionFold", "Trace", "replay_session"]


class Trace(msgspec.Struct, gc=False):
    """The part of a stored line that recovery and session summaries need."""

    action: str
    stage: Stage
    cycle: str | None = None
    seq: int = 0
    delivery: str | None = None
    status: str = "OK"
    timestamp: str = ""
    error: str | None = None
    parent_session_id: str | None = None
    agent: str = ""
    root_session_id: str | None = None
    attrs: dict[str, Any] | None = None


_trace_decoder: Final = msgspec.json.Decoder(Trace)


class SessionFold(SessionTally):
    """A tally rebuilt from a checkpoint (or from nothing) and the lines after it."""

    __slots__ = (*TALLY_FIELDS, "newest_moment")

    def __init__(self, checkpoint: Checkpoint | None = None) -> None:
        if checkpoint is None:
            self.clear_tally()
        else:
            self.load_tally(checkpoint)
        newest = self.newest_time
        self.newest_moment = (_time(newest) or LATEST) if newest else None
        """``newest_time`` as a time, parsed once (:data:`LATEST` when it does not parse: then no
        line is later, as before)."""

    def apply(self, trace: Trace) -> None:
        """Fold one line into the tally."""
        self.seq = max(self.seq, trace.seq)
        key = trace.action if trace.cycle is None else (trace.action, trace.cycle)
        stage = trace.stage
        parsed = _time(trace.timestamp)
        # What `why` keeps needs times it can compare (the collector stores them all in UTC).
        moment = parsed if parsed is not None and parsed.tzinfo is not None else None
        current = self.open_actions.get(key)
        if current is None and stage is not Stage.FINISH and parsed is not None:  # a cycle begins
            self.open_since[key] = parsed
            if self.latest_begun is None or parsed > self.latest_begun:
                self.latest_begun = parsed
        if moment is None:
            self.forget_history()  # a time no reader can place: the history is the files' to tell
        elif current is None:  # a cycle begins (a lone FINISH is one, as the fold counts it)
            self.cycles += 1
            if moment < self.begun_low:  # noqa: PLR1730 - a call per line costs
                self.begun_low = moment
            if stage is Stage.FINISH:
                self.forget_history()  # a move the collector refuses: only the fold can say
        elif stage is not current:
            # Its first PENDING or its FINISH: the fold's cycle begins at the earliest of them.
            since = self.open_since.get(key)
            if since is not None and moment < since:
                self.begun_earlier(key, moment)
            if current is Stage.PENDING and stage is Stage.READ:
                self.forget_history()  # a move the collector refuses: only the fold can say
        if stage is Stage.FINISH:
            self.open_actions.pop(key, None)
            self.open_since.pop(key, None)
            if self.used_open:
                self.used_open.discard(key)
            self.ended_failed = trace.status == "FAILED"
            if self.ended_failed and moment is not None:
                self.note_failed(moment, trace.action, trace.error)
        else:
            self.open_actions[key] = stage
        if trace.delivery:
            producer, _, number = trace.delivery.rpartition(":")
            if number.isdigit():
                note_delivery(self.marks, producer, int(number))
        if trace.status == "FAILED":
            self.failures += 1
        if not self.first_time:
            self.first_time = trace.timestamp
            if moment is not None:
                self.quiet_after = moment + QUIET_GAP  # as the writer's tally: none in the first second
            self.parent = trace.parent_session_id or ""
            self.tree_root = trace.root_session_id or ""
            self.agent = trace.agent
        elif not self.parent and trace.parent_session_id:
            self.parent = trace.parent_session_id  # as staging does: the first event naming one
        self.last_time = trace.timestamp or self.last_time
        if trace.attrs is not None and self.usage.add(trace.attrs) is not None and moment is not None:
            if moment < self.usage_low:  # noqa: PLR1730
                self.usage_low = moment
            if stage is not Stage.FINISH:
                self.used_open.add(key)
        if self.newest_time is not None and parsed is not None:
            newest = self.newest_moment
            if newest is None or parsed > newest:
                self.newest_time = trace.timestamp
                self.newest_moment = parsed
        if stage is Stage.FINISH and self.seq >= self.quiet_next and not self.used_open:
            newest = self.newest_moment
            if newest is None or newest.tzinfo is None or newest is LATEST:
                self.forget_history()
            elif self.quiet_due(newest):
                self.note_quiet(newest)


def _time(stamp: str) -> datetime | None:
    """RFC 3339 text as a time (None: text that does not parse)."""
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return None


def _scan_traces(segment: Segment, start: int = 0) -> Iterator[Trace]:
    """Yield the trace of every complete, decodable line of ``segment`` from byte ``start``."""
    offset = start
    end = segment.size
    carry = b""
    while offset < end:
        chunk = carry + segment.read(offset, min(SCAN_CHUNK, end - offset))
        if len(chunk) == len(carry):
            break
        offset += len(chunk) - len(carry)
        cut = chunk.rfind(b"\n") + 1
        carry = chunk[cut:]
        lines = chunk[:cut]
        if not lines:
            continue
        try:
            yield from _trace_decoder.decode_lines(lines)
        except msgspec.DecodeError:
            for line in lines.splitlines():
                with contextlib.suppress(msgspec.DecodeError):
                    yield _trace_decoder.decode(line)


def replay_session(
    sessions_fd: int,
    session_id: str,
    checkpoint: Checkpoint | None,
    number: int,
    active: Segment | None,
    *,
    unreadable: list[int] | None = None,
    observe: Callable[[int, int], None] | None = None,
) -> tuple[SessionFold, int, bool]:
    """Rebuild a session's tally: the checkpoint plus every line after its position.

    Args:
        sessions_fd: the ``sessions`` directory.
        session_id: the session.
        checkpoint: its checkpoint, or None.
        number: the active segment's number.
        active: the open active segment (None when there is none).
        unreadable: given, it gets the number of each segment that could not be read.
        observe: given, called with ``(seq, segment number)`` of every line folded, in file order
            (``gz-ia sessions --verify`` checks the sequence with it).

    Returns:
        ``(fold, segment_seq, complete)``: the tally, the ``seq`` before the active segment, and
        whether every segment needed could be read. Without a usable checkpoint (missing, damaged,
        or ahead of the files after a crash) every retained segment is replayed; ``seq`` then
        never falls below the one a checkpoint ahead of the files records.
    """
    active_size = active.size if active is not None else 0
    usable = checkpoint is not None and (
        checkpoint.segment < number or (checkpoint.segment == number and checkpoint.offset <= active_size)
    )
    complete = True
    if checkpoint is not None and usable:
        first, offset = checkpoint.segment, checkpoint.offset
        fold = SessionFold(checkpoint)
    else:
        complete = checkpoint is None
        first, offset = oldest_segment(sessions_fd, session_id, number), 0
        fold = SessionFold()
    for segment_number in range(first, number):
        try:
            segment = open_archive(sessions_fd, session_archive(session_id, segment_number), segment_number)
        except (FileNotFoundError, SegmentUnreadable):
            complete = False
            if unreadable is not None:
                unreadable.append(segment_number)
            continue
        try:
            for trace in _scan_traces(segment, offset if segment_number == first else 0):
                fold.apply(trace)
                if observe is not None:
                    observe(trace.seq, segment_number)
        except SegmentUnreadable:
            complete = False
            if unreadable is not None:
                unreadable.append(segment_number)
        finally:
            segment.close()
    if checkpoint is not None and not usable:
        # The files hold less than the checkpoint says was written (touched behind the writer's
        # back): ``seq`` goes on from its high-water mark, never handing a number out twice.
        fold.seq = max(fold.seq, checkpoint.seq)
    segment_seq = fold.seq
    if active is not None:
        try:
            for trace in _scan_traces(active, offset if first == number else 0):
                fold.apply(trace)
                if observe is not None:
                    observe(trace.seq, number)
        except SegmentUnreadable:
            complete = False
            if unreadable is not None:
                unreadable.append(number)
    return fold, segment_seq, complete
