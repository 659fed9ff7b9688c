"""Pages of one session: read up to N events after or before a cursor, forwards or mirrored backwards.

* :func:`read_page` reads up to ``limit`` matching events after (or, with ``reverse``, before) a
  cursor and returns a :class:`Page` of :class:`Entry` (``line``, ``event``, ``cursor``).
* :func:`iter_events` iterates page by page; :func:`event_at` finds one event by its ``seq``, and
  :func:`cursor_before` the cursor to read a range of them from.
* :func:`copy_lines` copies a whole session out as raw bytes; :func:`time_runs` says where its
  stored order restarts in time, so that sessions can be merged strictly by time.

A page never skips and never repeats an event (see :mod:`.cursor`); what it could not return is in
its :class:`~.gaps.Gap` values. A last line without its newline is being written and is held back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Final

import msgspec

from gz_ia.client.schema import Stage, Status, StoredEvent
from gz_ia.collector.storage.segments import SegmentUnreadable

from .cursor import Position, cursor_seq, decode_cursor, relocate, single_position, verify
from .gaps import Gap, Holes, after_gap, expired_gap
from .segments import (
    MISSING,
    Line,
    SessionView,
    complete_end,
    first_seq,
    lines_backward,
    lines_forward,
    open_dirs,
    open_view,
    root_view,
)

__all__ = [
    "Entry",
    "Filters",
    "Page",
    "copy_lines",
    "cursor_before",
    "event_at",
    "iter_events",
    "page_of",
    "read_page",
    "time_runs",
]

_decoder: Final = msgspec.json.Decoder(StoredEvent)


class Filters(msgspec.Struct, frozen=True):
    """Which events a read returns: values of one field are ORed, different fields are ANDed.

    An empty set means "any". ``since`` is inclusive and ``until`` exclusive; both must be aware
    datetimes.
    """

    agents: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    stages: frozenset[Stage] = frozenset()
    statuses: frozenset[Status] = frozenset()
    actions: frozenset[str] = frozenset()
    since: datetime | None = None
    until: datetime | None = None

    def match(self, event: StoredEvent) -> bool:
        """Tell whether ``event`` passes every filter."""
        return (
            (not self.agents or event.agent in self.agents)
            and (not self.roles or (event.role or "") in self.roles)
            and (not self.stages or event.stage in self.stages)
            and (not self.statuses or event.status in self.statuses)
            and (not self.actions or event.action in self.actions)
            and (self.since is None or event.timestamp >= self.since)
            and (self.until is None or event.timestamp < self.until)
        )

    @property
    def empty(self) -> bool:
        """Whether nothing is filtered."""
        return self == _NO_FILTERS


_NO_FILTERS: Final = Filters()


class Entry(msgspec.Struct, gc=False, eq=False):
    """One stored event: the line exactly as stored (no newline), the decoded event, and the cursor
    of the boundary right after it (resume from it forward to get the next events).

    An entry made without its event (``Entry(line, None, cursor)``) decodes the line the first time
    ``event`` is asked for: a search that only prints lines never decodes them twice. A struct, not
    a dataclass: a reader makes one per event, and a frozen dataclass takes several times as long to
    build.
    """

    line: str
    _event: StoredEvent | None
    cursor: str

    @property
    def event(self) -> StoredEvent:
        """The stored event."""
        event = self._event
        if event is None:
            event = self._event = _decoder.decode(self.line)
        return event

    @property
    def session_id(self) -> str:
        """The event's session."""
        return self.event.session_id

    def __eq__(self, other: object) -> bool:
        # The line and where it ends say everything: the event is the line decoded.
        return isinstance(other, Entry) and (self.line, self.cursor) == (other.line, other.cursor)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Entry(line={self.line!r}, cursor={self.cursor!r})"


class Page(msgspec.Struct, frozen=True):
    """One page of a session.

    Attributes:
        entries: oldest first, or newest first for a reverse read.
        next_cursor: continue in the same direction from here (after a forward page: after the last
            line scanned; after a reverse page: before the oldest line scanned).
        incomplete: a segment or a line could not be read and was skipped.
        end: nothing more in this direction for now (forward: caught up with the writer; reverse:
            reached the oldest retained event).
        expired: the cursor's events were deleted by retention; the history ends here.
        gaps: what ``incomplete`` skipped: which ``seq`` ranges, and why.
    """

    entries: list[Entry] = msgspec.field(default_factory=list)
    next_cursor: str | None = None
    incomplete: bool = False
    end: bool = False
    expired: bool = False
    gaps: tuple[Gap, ...] = ()


def read_page(
    root: Path,
    session_id: str,
    *,
    cursor: str | None = None,
    limit: int = 100,
    reverse: bool = False,
    filters: Filters | None = None,
) -> Page:
    """Read up to ``limit`` matching events of a session, oldest first (newest first with ``reverse``).

    Args:
        root: the session root (``.harness`` directory).
        session_id: the session.
        cursor: continue after (forward) or before (reverse) this boundary; None starts at the oldest
            retained event (forward) or the newest (reverse).
        limit: maximum number of entries.
        reverse: read towards older events.
        filters: only return matching events (non-matching lines still advance ``next_cursor``).

    Raises:
        SessionNotFound: invalid id, missing root, or nothing stored for the session.
        InvalidCursor: the cursor was not made by this reader or belongs to another session.
        LayoutTooNew: the root was written by a newer gz-ia.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if cursor is not None:
        decode_cursor(cursor)  # a malformed cursor is refused before the root is looked at
    return _read(root, session_id, cursor, limit=limit, reverse=reverse, filters=filters)


def _read(
    root: Path, session_id: str, start: str | Position | None, *, limit: int, reverse: bool, filters: Filters | None
) -> Page:
    """Read one page after ``start``: a cursor, or a position no cursor can name (see :func:`after_gap`)."""
    dirs = open_dirs(root)
    try:
        position = single_position(start, session_id, dirs) if isinstance(start, str) else start
        view = open_view(dirs, session_id)
        try:
            return page_of(view, position, limit, reverse, filters)
        finally:
            view.close()
    finally:
        dirs.close()


def page_of(view: SessionView, position: Position | None, limit: int, reverse: bool, filters: Filters | None) -> Page:
    """Read one page of an open view after (or, with ``reverse``, before) ``position`` (None: from its start or end)."""
    session_id = view.session_id
    epoch = view.dirs.epoch
    if position is not None and not verify(view, position):
        relocated = relocate(view, position.seq)
        if relocated is None:
            gap = expired_gap(view, position)
            return Page([], position.encode(epoch), incomplete=True, end=True, expired=True, gaps=(gap,))
        position = relocated
    check = None if filters is None or filters.empty else filters.match
    entries: list[Entry] = []
    holes = Holes(view)
    mark = _no_failure_before(view, position if not reverse else None, filters)
    if reverse:
        floor = 1 if mark is None else mark.segment
        lines = (
            view.backward(view.active_number, None, floor=floor)
            if position is None
            else view.backward(position.segment, position.offset, floor=floor)
        )
        if mark is not None:
            lines = _after(lines, mark)
        last = position
        seq = position.seq + 1 if position is not None else None
        for number, start, end, raw in lines:
            try:
                event = _decoder.decode(raw)
            except msgspec.DecodeError as exc:
                view.note(f"segment {number}: an undecodable line at byte {start} ({exc})")
                if seq is not None:
                    last = Position(session_id, number, start, max(0, seq - 1))
                continue
            holes.missing(event.seq + 1, seq - 1 if seq is not None else None)
            seq = event.seq
            last = Position(session_id, number, start, max(0, event.seq - 1))
            if check is None or check(event):
                after = Position(session_id, number, end, event.seq).encode(epoch)
                entries.append(Entry(raw.decode(errors="replace"), event, after))
                if len(entries) >= limit:
                    break
        else:
            holes.missing(None, seq - 1 if seq is not None else None)
            next_cursor = last.encode(epoch) if last else None
            return Page(entries, next_cursor, view.incomplete, end=True, gaps=tuple(holes.gaps))
        return Page(entries, last.encode(epoch) if last else None, view.incomplete, end=False, gaps=tuple(holes.gaps))
    if mark is not None:
        position = mark
    oldest = 0
    if position is None:
        oldest = view.oldest()
        lines = view.forward(oldest, 0)
        last = None
    else:
        lines = view.forward(position.segment, position.offset)
        last = position
    # From the first segment the first seq is 1: anything before it was lost, not retained away.
    expected = position.seq + 1 if position is not None else (1 if oldest == 1 else None)
    for number, start, end, raw in lines:
        try:
            event = _decoder.decode(raw)
        except msgspec.DecodeError as exc:
            view.note(f"segment {number}: an undecodable line at byte {start} ({exc})")
            last = Position(session_id, number, end, last.seq if last else 0)
            continue
        holes.missing(expected, event.seq - 1)
        expected = event.seq + 1
        last = Position(session_id, number, end, event.seq)
        if check is None or check(event):
            entries.append(Entry(raw.decode(errors="replace"), event, last.encode(epoch)))
            if len(entries) >= limit:
                break
    else:
        holes.trailing(expected if last is not None else None)
        next_cursor = last.encode(epoch) if last else None
        return Page(entries, next_cursor, view.incomplete, end=True, gaps=tuple(holes.gaps))
    return Page(entries, last.encode(epoch), view.incomplete, end=False, gaps=tuple(holes.gaps))


def _no_failure_before(view: SessionView, position: Position | None, filters: Filters | None) -> Position | None:
    """Where a read of FAILED events only may start (forward) or end (backward): the checkpoint's
    position, when it counts no failure up to there and lies after ``position`` (None: read as asked).

    The checkpoint only counts a session's failures, not where they are, so only its zero saves a
    read; the lines after it (written since, or by a collector that died before its next
    checkpoint) are read as usual, so the answer stays exact.
    """
    checkpoint = view.checkpoint
    if (
        filters is None
        or filters.statuses != _ONLY_FAILED
        or checkpoint is None
        or checkpoint.failures
        or checkpoint.seq <= (position.seq if position is not None else 0)
    ):
        return None
    mark = Position(view.session_id, checkpoint.segment, checkpoint.offset, checkpoint.seq)
    # Taken as the session rotated, it points at the start of an active file not written yet.
    unwritten = mark.segment == view.active_number and mark.offset == 0 and view.get(mark.segment) is MISSING
    return mark if unwritten or verify(view, mark) else None


_ONLY_FAILED: Final = frozenset({Status.FAILED})


def _after(lines: Iterator[Line], mark: Position) -> Iterator[Line]:
    """The lines of a backward read up to ``mark``: what lies before it is known not to match."""
    for line in lines:
        if (line[0], line[2]) <= (mark.segment, mark.offset):
            return
        yield line


def iter_events(
    root: Path,
    session_id: str,
    *,
    cursor: str | None = None,
    reverse: bool = False,
    filters: Filters | None = None,
    page_size: int = 1000,
    on_gap: Callable[[Gap], None] | None = None,
    until_seq: int | None = None,
) -> Iterator[Entry]:
    """Yield every matching event from ``cursor`` on (see :func:`read_page`), page by page.

    Without ``on_gap`` an expired cursor ends the history silently (the page says ``expired``).
    With it, every :class:`Gap` of every page is passed to it as it is met, and a forward read
    whose cursor's events were deleted by retention reports that gap and goes on with the oldest
    event still stored, so the caller can say what it did not show. A forward read with
    ``until_seq`` stops after that event (and says nothing of gaps beyond it).
    """
    resume: Position | None = None  # where a lagged read goes on: no cursor string can name it
    while True:
        if resume is not None:
            page = _read(root, session_id, resume, limit=page_size, reverse=False, filters=filters)
        else:
            page = read_page(root, session_id, cursor=cursor, limit=page_size, reverse=reverse, filters=filters)
        resume = None
        if on_gap is not None:
            for gap in page.gaps:
                if until_seq is None or reverse or gap.first is None or gap.first <= until_seq:
                    on_gap(gap)
            if page.expired and not reverse:
                resume = after_gap(session_id, page.gaps)
                cursor = None
                if until_seq is not None and resume is not None and resume.seq >= until_seq:
                    return
                continue
        for entry in page.entries:
            if until_seq is not None and not reverse and entry.event.seq > until_seq:
                return
            yield entry
        if page.end or page.next_cursor is None:
            return
        if until_seq is not None and not reverse and cursor_seq(page.next_cursor, session_id) >= until_seq:
            return
        cursor = page.next_cursor


def event_at(root: Path, session_id: str, seq: int) -> Entry | None:
    """Return the session's event number ``seq``, or None when it is not stored (not yet, or deleted).

    Found by its number as a cursor is relocated: from the first line of each segment, newest first,
    then within the one segment that holds it; older segments are not read.

    Raises:
        SessionNotFound: nothing stored for the session.
    """
    if seq < 1:
        return None
    # Segment 0 never exists, so the read finds the boundary before ``seq`` by its number.
    page = _read(root, session_id, Position(session_id, 0, 0, seq - 1), limit=1, reverse=False, filters=None)
    return next((entry for entry in page.entries if entry.event.seq == seq), None)


def cursor_before(root: Path, session_id: str, seq: int) -> str | None:
    """Return the cursor of the boundary right before event ``seq``, found by its number as
    :func:`event_at` finds it (older segments are not read); None when event ``seq - 1`` is not
    stored (``seq`` is 1, or older than every retained event): then read from the oldest.

    Raises:
        SessionNotFound: nothing stored for the session.
    """
    if seq <= 1:
        return None
    with root_view(root, session_id) as view:
        boundary = relocate(view, seq - 1)
        return boundary.encode(view.dirs.epoch) if boundary is not None else None


def copy_lines(
    root: Path, session_id: str, *, chunk_size: int = 1 << 20, on_gap: Callable[[Gap], None] | None = None
) -> Iterator[bytes]:
    """Yield a session's stored lines, oldest first, as raw chunks that together end on a line boundary.

    The fast way to copy a whole session out (``gz-ia session logs --json``): nothing is decoded but
    the first and last line of each segment, which tell a jump in ``seq`` across a segment that could
    not be read. Reads every retained segment up to the end of the active one as it was when the
    call started; a torn last line is held back; an unreadable segment is skipped and passed to
    ``on_gap`` with the ``seq`` range it held.

    Raises:
        SessionNotFound: nothing stored for the session.
    """
    with root_view(root, session_id) as view:
        holes = Holes(view)
        oldest = view.oldest()
        expected: int | None = 1 if oldest == 1 else None
        read_any = False
        for number in range(oldest, view.active_number + 1):
            segment = view.segment(number)
            if segment is None:
                if view.get(number) is MISSING and number < view.active_number:
                    view.note_missing(number)
                continue
            try:
                end = complete_end(segment)
                first = first_seq(lines_forward(segment, 0))
                if first is not None:
                    holes.missing(expected, first - 1)
                offset = 0
                while offset < end:
                    chunk = segment.read(offset, min(chunk_size, end - offset))
                    if not chunk:
                        break
                    offset += len(chunk)
                    yield chunk
                newest = first_seq(lines_backward(segment, end))
                if newest is not None:
                    expected = newest + 1
                    read_any = True
            except SegmentUnreadable as exc:
                view.note(str(exc))
                continue
            finally:
                view.release(number)
        holes.trailing(expected if read_any else None)
        if on_gap is not None:
            for gap in holes.gaps:
                on_gap(gap)


class _Stamp(msgspec.Struct, gc=False):
    seq: int = 0
    timestamp: Annotated[datetime, msgspec.Meta(tz=True)] | None = None


_stamp_decoder: Final = msgspec.json.Decoder(_Stamp)


def time_runs(
    root: Path, session_id: str, *, cursor: str | None = None, until_seq: int | None = None
) -> list[tuple[str | None, int | None]]:
    """Return where a session's stored order restarts in time: ``(cursor before, last seq)`` of each run.

    A run is a stretch of events (in ``seq`` order) whose timestamps never go backwards; a session
    whose clock never went back is one run, from ``cursor`` (None: its oldest event) with no last
    ``seq`` (None: up to ``until_seq``). Reading each run from its cursor up to its last ``seq`` and
    merging the runs by time gives the session in time order without holding it in memory. Only
    ``seq`` and ``timestamp`` are decoded.

    Raises:
        SessionNotFound: nothing stored for the session.
        InvalidCursor: the cursor was not made by this reader, or on another root.
    """
    dirs = open_dirs(root)
    try:
        position = single_position(cursor, session_id, dirs) if cursor is not None else None
        view = open_view(dirs, session_id)
        try:
            if position is not None and not verify(view, position):
                position = relocate(view, position.seq)
            if position is None:
                lines = view.forward(view.oldest(), 0)
            else:
                lines = view.forward(position.segment, position.offset)
            runs: list[tuple[str | None, int | None]] = []
            run_start: str | None = cursor
            previous: datetime | None = None
            previous_seq = position.seq if position is not None else 0
            for number, start, _end, raw in lines:
                try:
                    stamp = _stamp_decoder.decode(raw)
                except msgspec.DecodeError:
                    continue
                if until_seq is not None and stamp.seq > until_seq:
                    break
                if stamp.timestamp is None:
                    continue
                if previous is not None and stamp.timestamp < previous:
                    runs.append((run_start, previous_seq))
                    run_start = Position(session_id, number, start, previous_seq).encode(dirs.epoch)
                previous, previous_seq = stamp.timestamp, stamp.seq
            runs.append((run_start, None))
            return runs
        finally:
            view.close()
    finally:
        dirs.close()
