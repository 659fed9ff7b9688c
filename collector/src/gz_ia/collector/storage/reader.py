"""Reading sessions back: paged, rotation-safe, followable. Standard library, msgspec and gz_ia.client only.

A session is one logical stream of events: its retained archives ``<id>.events.<n>.jsonl[.gz]`` in
segment order, then its active file ``<id>.events.jsonl``. This module reads that stream in pages,
oldest-first or newest-first, and follows it live.

Public API (kept stable for the MCP server, the OpenTelemetry exporter and the timeline):

* :func:`read_page` reads up to ``limit`` matching events after (or, with ``reverse``, before) a
  cursor and returns a :class:`Page` of :class:`Entry` (``line``, ``event``, ``cursor``).
* :func:`iter_events` iterates page by page; :func:`end_cursor` gives the cursor after the newest event.
* :func:`follow` yields new events of one session, of several, or of every session of a root (new
  sessions included) as they land, with ``tail -F`` semantics across rotation and collector restarts.
* :func:`list_sessions` summarises every session of a root; :func:`session_tree` builds the tree of
  subagent sessions below one session.

**Cursors** are opaque strings. Inside, a cursor is a *boundary between two events*: the session, the
``seq`` of the event just before the boundary, and a hint where it is (segment number and byte
offset in the segment's uncompressed content). Rotation renames a segment without changing its
number or content and compression keeps its content, so the hint stays right across any number of
rotations. Before it is used the hint is checked against ``seq`` (the line before the boundary must
carry it); if the check fails the boundary is found again by ``seq``, which the collector assigns per
session without gaps. So a cursor never skips and never repeats an event. When the events after a
cursor were deleted by retention, the page is empty and ``expired`` (and ``end``): the history ends
there instead of jumping to unrelated events. Cursors of :func:`combine_cursors` hold one boundary per
session and resume a multi-session :func:`follow`.

**Robustness.** A segment that cannot be read (a directory or a symlink in its place, corrupt gzip) or
an undecodable line is skipped and the page says ``incomplete``. A last line without its newline is
being written and is held back until it is complete. Every file is opened relative to the root's
directory descriptors with ``O_NOFOLLOW``: symlinks are refused, never followed, and names are only
built from validated session ids. A root of a newer storage layout raises :class:`LayoutTooNew`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import errno
import heapq
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Final

import msgspec

from gz_ia.client.schema import Stage, Status, StoredEvent, is_safe_session_id

from ._layout import (
    ACTIVE_SUFFIX,
    STATE_SUFFIX,
    Checkpoint,
    LayoutError,
    LayoutTooNew,
    RootDirs,
    Segment,
    SegmentUnreadable,
    SessionFold,
    active_name,
    locate_active,
    open_archive,
    open_root,
    parse_archive_name,
    read_checkpoint,
    replay_session,
    segment_exists,
    session_archive,
    session_id_of,
    session_id_of_state,
    state_name,
)

__all__ = [
    "MAX_TREE_DEPTH",
    "CursorExpired",
    "Entry",
    "Filters",
    "Gap",
    "InvalidCursor",
    "LayoutError",
    "LayoutTooNew",
    "Page",
    "RootNotFound",
    "SessionNotFound",
    "SessionSummary",
    "TreeNode",
    "check_cursor",
    "combine_cursors",
    "copy_lines",
    "cursor_segment",
    "cursor_seq",
    "cursor_sessions",
    "end_cursor",
    "follow",
    "iter_events",
    "list_sessions",
    "read_page",
    "read_session_lines",
    "require_root",
    "session_tree",
    "time_runs",
]

_decoder: Final = msgspec.json.Decoder(StoredEvent)
_CHUNK: Final = 1 << 16
_CURSOR_TAG: Final = "c1"
_MULTI_TAG: Final = "m1"
_EPOCH_CURSOR_TAG: Final = "c2"
_EPOCH_MULTI_TAG: Final = "m2"
"""Cursors of a root with an epoch carry it (``c1``/``m1``: of a root made before roots had one)."""
_RESCAN_EVERY: Final = 1.0
"""Seconds between full listings of a root while following it (directory mtimes are coarse)."""


class _Seq(msgspec.Struct, gc=False):
    seq: int = 0


_seq_decoder: Final = msgspec.json.Decoder(_Seq)


class SessionNotFound(LookupError):
    """No file exists for the session id under the root (or the id is not a valid one)."""


class InvalidCursor(ValueError):
    """The cursor was not made by this reader, belongs to another session, or to another root.

    A root rebuilt at the same path has a new epoch, so a cursor of the old one is refused here
    rather than silently read as a position in unrelated events.
    """


class RootNotFound(SessionNotFound):
    """No session root exists at the path (a mistyped ``GZ_IA_ROOT``, or no collector wrote there yet)."""


@dataclass(frozen=True, slots=True)
class Gap:
    """Events a read could not return, and why.

    Attributes:
        session_id: the session.
        first: the first missing ``seq`` (None when unknown: the damage came before any readable event).
        last: the last missing ``seq`` (None when unknown: nothing readable came after the damage).
        reason: what happened (``deleted by retention``, an unreadable segment, an undecodable line).
        lagged: the events were deleted by retention before this reader got to them.
    """

    session_id: str
    first: int | None
    last: int | None
    reason: str
    lagged: bool = False

    def describe(self) -> str:
        """Return one line for a human: which events are missing and why."""
        if self.first is None and self.last is None:
            which = "a stored line"
        elif self.first is None:
            which = f"events up to seq {self.last}"
        elif self.last is None:
            which = f"events from seq {self.first}"
        elif self.first == self.last:
            which = f"event seq {self.first}"
        else:
            which = f"events seq {self.first}-{self.last}"
        return f"session {self.session_id}: {which} not shown: {self.reason}"


class CursorExpired(LookupError):
    """The events after a follower's position were deleted by retention before it read them.

    Attributes:
        session_id: the session whose history ended.
    """

    def __init__(self, session_id: str) -> None:
        super().__init__(f"events of {session_id!r} after the cursor were deleted by retention")
        self.session_id = session_id


# --- public value types ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Filters:
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


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored event: the line exactly as stored (no newline), the decoded event, and the cursor
    of the boundary right after it (resume from it forward to get the next events)."""

    line: str
    event: StoredEvent
    cursor: str

    @property
    def session_id(self) -> str:
        """The event's session."""
        return self.event.session_id


@dataclass(frozen=True, slots=True)
class Page:
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

    entries: list[Entry] = field(default_factory=list)
    next_cursor: str | None = None
    incomplete: bool = False
    end: bool = False
    expired: bool = False
    gaps: tuple[Gap, ...] = ()


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One line of ``gz-ia sessions``."""

    session_id: str
    parent_session_id: str | None
    agent: str
    first_time: datetime | None
    last_time: datetime | None
    events: int
    open_actions: int
    failures: int
    segments: int
    """Segment number of the active file: how many segments the session has had."""
    incomplete: bool = False
    """Some retained data could not be read: the counts may be low."""


MAX_TREE_DEPTH: Final = 64
"""How many levels of subagents a tree holds below its top; deeper sessions are counted, not listed."""


@dataclass(slots=True)
class TreeNode:
    """A session and its subagent sessions (children ordered by first event)."""

    summary: SessionSummary
    children: list[TreeNode] = field(default_factory=list)
    hidden: int = 0
    """Descendants left out below :data:`MAX_TREE_DEPTH` (this node is at that depth)."""

    @property
    def session_id(self) -> str:
        """The node's session id."""
        return self.summary.session_id

    @property
    def status(self) -> str:
        """``running`` (open actions), ``failed`` (a FAILED event), or ``ok``."""
        if self.summary.open_actions:
            return "running"
        return "failed" if self.summary.failures else "ok"

    @property
    def duration_seconds(self) -> float | None:
        """Seconds from the first to the last event, when both are known."""
        first, last = self.summary.first_time, self.summary.last_time
        return None if first is None or last is None else max(0.0, (last - first).total_seconds())

    def walk(self, depth: int = 0) -> Iterator[tuple[int, TreeNode]]:
        """Yield ``(depth, node)`` for this node and every descendant, depth first."""
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)


# --- cursors -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Position:
    """A boundary: after event ``seq``, at ``offset`` bytes into segment ``segment``."""

    session_id: str
    segment: int
    offset: int
    seq: int

    def encode(self, epoch: str = "") -> str:
        """Return the cursor string; ``epoch`` is the root's (see :class:`RootDirs`)."""
        fields: list[object] = [self.session_id, self.segment, self.offset, self.seq]
        raw = msgspec.msgpack.encode([_EPOCH_CURSOR_TAG, *fields, epoch] if epoch else [_CURSOR_TAG, *fields])
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unpack(cursor: str) -> object:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return msgspec.msgpack.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise InvalidCursor(f"{cursor!r} is not a gz-ia cursor") from exc


def _position_of(session_id: object, segment: object, offset: object, seq: object) -> _Position:
    if not isinstance(session_id, str) or not is_safe_session_id(session_id):
        raise InvalidCursor("malformed cursor")
    numbers = [value for value in (segment, offset, seq) if isinstance(value, int) and not isinstance(value, bool)]
    if len(numbers) != 3 or numbers[0] < 1 or numbers[1] < 0 or numbers[2] < 0:
        raise InvalidCursor("malformed cursor")
    return _Position(session_id, numbers[0], numbers[1], numbers[2])


def _decode_cursor_epoch(cursor: str) -> tuple[dict[str, _Position], str]:
    """Return a cursor's boundaries and the epoch of the root it was made on ("" when it has none)."""
    value = _unpack(cursor)
    if not isinstance(value, list) or not value:
        raise InvalidCursor(f"{cursor!r} is not a gz-ia cursor")
    epoch = ""
    if value[0] in (_EPOCH_CURSOR_TAG, _EPOCH_MULTI_TAG):
        epoch = value.pop()
        if not isinstance(epoch, str) or not epoch:
            raise InvalidCursor("malformed cursor")
        value[0] = _CURSOR_TAG if value[0] == _EPOCH_CURSOR_TAG else _MULTI_TAG
    if len(value) == 5 and value[0] == _CURSOR_TAG:
        position = _position_of(*value[1:])
        return {position.session_id: position}, epoch
    if len(value) == 2 and value[0] == _MULTI_TAG and isinstance(value[1], dict):
        positions: dict[str, _Position] = {}
        for session_id, parts in value[1].items():
            if not isinstance(parts, list) or len(parts) != 3:
                raise InvalidCursor("malformed cursor")
            positions[session_id] = _position_of(session_id, *parts)
        return positions, epoch
    raise InvalidCursor(f"{cursor!r} is not a gz-ia cursor")


def _decode_cursor(cursor: str) -> dict[str, _Position]:
    return _decode_cursor_epoch(cursor)[0]


def _check_epoch(epoch: str, dirs: RootDirs) -> None:
    """Refuse a cursor made on another root (or on this path before the root was rebuilt)."""
    if epoch and epoch != dirs.epoch:
        raise InvalidCursor(
            f"the cursor was made on another session root (epoch {epoch}, this root at {dirs.path} has "
            f"{dirs.epoch or 'none'}): the root was rebuilt or replaced, so its positions mean nothing here"
        )


def _single_position(cursor: str, session_id: str, dirs: RootDirs | None = None) -> _Position:
    positions, epoch = _decode_cursor_epoch(cursor)
    if dirs is not None:
        _check_epoch(epoch, dirs)
    position = positions.get(session_id)
    if position is None:
        raise InvalidCursor(f"the cursor does not belong to session {session_id!r}")
    return position


def combine_cursors(cursors: Iterable[str]) -> str:
    """Return one cursor holding, per session, the last boundary among ``cursors`` (single or combined).

    Resume a multi-session :func:`follow` (``gz-ia logs -f --after-cursor``) from it.

    Raises:
        InvalidCursor: the cursors were made on different roots.
    """
    merged: dict[str, _Position] = {}
    epochs: set[str] = set()
    for cursor in cursors:
        positions, epoch = _decode_cursor_epoch(cursor)
        merged.update(positions)
        epochs.add(epoch)
    epochs.discard("")
    if len(epochs) > 1:
        raise InvalidCursor("the cursors were made on different session roots")
    table = {key: [value.segment, value.offset, value.seq] for key, value in sorted(merged.items())}
    epoch = next(iter(epochs), "")
    raw = msgspec.msgpack.encode([_EPOCH_MULTI_TAG, table, epoch] if epoch else [_MULTI_TAG, table])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_seq(cursor: str, session_id: str) -> int:
    """Return the ``seq`` of the event right before a cursor's boundary in ``session_id``.

    Raises:
        InvalidCursor: not a cursor of this reader, or none for that session.
    """
    return _single_position(cursor, session_id).seq


def cursor_segment(cursor: str, session_id: str) -> int:
    """Return the segment number a cursor's boundary in ``session_id`` lies in (what follows is there or later).

    Raises:
        InvalidCursor: not a cursor of this reader, or none for that session.
    """
    return _single_position(cursor, session_id).segment


def cursor_sessions(cursor: str) -> list[str]:
    """Return the session ids a cursor holds a boundary for.

    Raises:
        InvalidCursor: not a cursor of this reader.
    """
    return sorted(_decode_cursor(cursor))


# --- one session at one moment -------------------------------------------------------------------------


class _Missing:
    """Sentinel: a segment that does not exist."""


class _Unreadable:
    """A segment that exists but cannot be read, and why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


_MISSING: Final = _Missing()

_DELETED: Final = "deleted by retention before they were read"

# A line found in a session: (segment, start offset, end offset after the newline, bytes without it).
_Line = tuple[int, int, int, bytes]


class _View:
    """A consistent snapshot of one session's segments for one read.

    The active segment is opened once, so a rotation during the read changes nothing: archives never
    change content, and bytes appended later are left for the next read.
    """

    def __init__(self, dirs: RootDirs, session_id: str) -> None:
        self.dirs = dirs
        self.session_id = session_id
        self.checkpoint = read_checkpoint(dirs.state_fd, session_id + STATE_SUFFIX)
        hint = self.checkpoint.segment if self.checkpoint is not None else 1
        self.active_number, self.active, self.active_unreadable = locate_active(dirs.sessions_fd, session_id, hint)
        self.segments: dict[int, Segment | _Missing | _Unreadable] = {}
        if self.active is not None:
            self.segments[self.active_number] = self.active
        elif self.active_unreadable:
            self.segments[self.active_number] = _Unreadable(f"{active_name(session_id)}: cannot be read")
        else:
            self.segments[self.active_number] = _MISSING
        self.incomplete = False
        self.problems: list[str] = []
        """Why lines were skipped, in reading order (the reader turns them into :class:`Gap`)."""

    def note(self, reason: str) -> None:
        """Record that something stored could not be read."""
        self.incomplete = True
        self.problems.append(reason)

    def note_deleted(self) -> None:
        """Record that retention deleted a segment during this read, before it was opened.

        Whether that hid events depends on where the read started: :class:`_Holes` decides.
        """
        self.problems.append(_DELETED)

    def exists(self) -> bool:
        """Whether anything of the session is stored."""
        return (
            self.active is not None
            or self.active_unreadable
            or self.checkpoint is not None
            or (self.active_number > 1 and self.get(self.active_number - 1) is not _MISSING)
        )

    def get(self, number: int) -> Segment | _Missing | _Unreadable:
        """Return segment ``number``, opening it on first use."""
        found = self.segments.get(number)
        if found is not None:
            return found
        if number < 1 or number > self.active_number:
            return _MISSING
        try:
            segment: Segment | _Missing | _Unreadable = open_archive(
                self.dirs.sessions_fd, session_archive(self.session_id, number), number
            )
        except FileNotFoundError:
            segment = _MISSING
        except SegmentUnreadable as exc:
            segment = _Unreadable(str(exc))
        self.segments[number] = segment
        return segment

    def oldest(self) -> int:
        """Return the oldest retained segment's number (probing down from the active one)."""
        number = self.active_number
        while number > 1 and segment_exists(self.dirs.sessions_fd, session_archive(self.session_id, number - 1)):
            number -= 1
        return number

    def close(self) -> None:
        """Close every opened segment."""
        for segment in self.segments.values():
            if isinstance(segment, Segment):
                segment.close()

    # --- lines ---------------------------------------------------------------------------------------

    def _segment(self, number: int) -> Segment | None:
        segment = self.get(number)
        if isinstance(segment, _Unreadable):
            self.note(segment.reason)
            return None
        return segment if isinstance(segment, Segment) else None

    def forward(self, number: int, offset: int, *, one_segment: bool = False) -> Iterator[_Line]:
        """Yield complete lines from ``offset`` of segment ``number`` on, through the active segment."""
        while number <= self.active_number:
            segment = self._segment(number)
            if segment is not None:
                try:
                    yield from _lines_forward(segment, offset)
                except SegmentUnreadable as exc:
                    self.note(str(exc))
            elif self.get(number) is _MISSING and number < self.active_number:
                if number >= self.oldest():
                    self.note(f"segment {number} is missing")  # a hole in the middle of the retained history
                else:
                    self.note_deleted()  # behind the oldest retained segment now: retention went on meanwhile
            if one_segment:
                return
            number += 1
            offset = 0

    def backward(self, number: int, offset: int | None) -> Iterator[_Line]:
        """Yield complete lines ending at or before ``offset`` of segment ``number`` (None: its end), newest first."""
        while number >= 1:
            found = self.get(number)
            if isinstance(found, _Missing):
                if number != self.active_number:
                    return  # the oldest retained segment is behind us
            elif isinstance(found, _Unreadable):
                self.note(found.reason)
            else:
                try:
                    yield from _lines_backward(found, offset)
                except SegmentUnreadable as exc:
                    self.note(str(exc))
            number -= 1
            offset = None


def _lines_forward(segment: Segment, offset: int) -> Iterator[_Line]:
    number = segment.number
    position = offset  # file offset of buffer[0]
    carry = b""
    read_at = offset
    while read_at < segment.size:
        chunk = segment.read(read_at, _CHUNK)
        if not chunk:
            break
        read_at += len(chunk)
        buffer = carry + chunk if carry else chunk
        start = 0
        while (newline := buffer.find(b"\n", start)) >= 0:
            yield number, position + start, position + newline + 1, buffer[start:newline]
            start = newline + 1
        carry = buffer[start:]
        position += start
    # Whatever is left in `carry` has no newline yet: a line being written, held back.


def _complete_end(segment: Segment) -> int:
    """Return the offset right after the last newline of ``segment`` (0 if it has none)."""
    end = segment.size
    while end > 0:
        start = max(0, end - _CHUNK)
        chunk = segment.read(start, end - start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _lines_backward(segment: Segment, offset: int | None) -> Iterator[_Line]:
    number = segment.number
    top = _complete_end(segment) if offset is None else min(offset, segment.size)
    low = top
    carry = b""
    while True:
        if low > 0:
            take = min(_CHUNK, low)
            low -= take
            buffer = segment.read(low, take) + carry
        else:
            buffer = carry
        end = len(buffer)  # buffer covers [low, low + len(buffer)) and ends at a line boundary
        while end > 0:
            newline = buffer.rfind(b"\n", 0, end - 1)
            if newline < 0 and low > 0:
                break
            start = newline + 1
            yield number, low + start, low + end, buffer[start : end - 1]
            end = start
        carry = buffer[:end]
        if low == 0:
            return


def _seq_of(raw: bytes) -> int | None:
    try:
        return _seq_decoder.decode(raw).seq
    except msgspec.DecodeError:
        return None


def _first_seq(lines: Iterable[_Line]) -> int | None:
    """Return the ``seq`` of the first line that has one."""
    return next((seq for line in lines if (seq := _seq_of(line[3])) is not None), None)


def _verify(view: _View, position: _Position) -> bool:
    """Tell whether the boundary hint still sits right after event ``position.seq``."""
    segment = view.get(position.segment)
    if not isinstance(segment, Segment) or position.offset > segment.size:
        return False
    if position.offset > 0:
        if segment.read(position.offset - 1, 1) != b"\n":
            return False
        before = next(_lines_backward(segment, position.offset), None)
        return before is not None and _seq_of(before[3]) == position.seq
    after = next(_lines_forward(segment, 0), None)
    return after is None or _seq_of(after[3]) == position.seq + 1


def _relocate(view: _View, seq: int) -> _Position | None:
    """Find the boundary right after event ``seq`` by its number; None when it is no longer retained."""
    number = view.active_number
    while number >= 1:
        found = view.get(number)
        if isinstance(found, _Missing) and number != view.active_number:
            break
        if isinstance(found, Segment):
            first = next((s for line in _lines_forward(found, 0) if (s := _seq_of(line[3])) is not None), None)
            if first is not None and first <= seq + 1:
                boundary = _Position(view.session_id, number, 0, first - 1)
                for _n, _start, end, raw in _lines_forward(found, 0):
                    line_seq = _seq_of(raw)
                    if line_seq is not None and line_seq > seq:
                        break
                    if line_seq is not None:
                        boundary = _Position(view.session_id, number, end, line_seq)
                return boundary if boundary.seq == seq else None
        number -= 1
    return None


def _open(root: Path) -> RootDirs:
    """Open a root for reading; a missing one becomes :class:`SessionNotFound`."""
    try:
        return open_root(Path(root).absolute(), owner=None, create=False)
    except LayoutTooNew:
        raise
    except LayoutError as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno == errno.ENOENT and not Path(root).is_symlink():
            if Path(root).is_dir():  # made, but no collector has written there yet
                raise SessionNotFound(f"nothing is stored under {root} yet") from exc
            raise RootNotFound(f"no session root at {root}") from exc
        raise


def check_cursor(root: Path, cursor: str) -> None:
    """Check that ``cursor`` was made by this reader on this root (not on a root since rebuilt).

    Raises:
        InvalidCursor: it was not.
        RootNotFound: nothing exists at ``root``.
    """
    _positions, epoch = _decode_cursor_epoch(cursor)
    try:
        dirs = _open(root)
    except RootNotFound:
        raise
    except SessionNotFound:
        if epoch:
            raise InvalidCursor("the cursor was made on another session root: nothing is stored here yet") from None
        return
    try:
        _check_epoch(epoch, dirs)
    finally:
        dirs.close()


def require_root(root: Path) -> None:
    """Check that ``root`` is a readable session root.

    Raises:
        RootNotFound: nothing exists at ``root``.
        LayoutError: it exists but cannot be used (the message says why), or is of a newer layout.
    """
    try:
        _open(root).close()
    except RootNotFound:
        raise
    except SessionNotFound:
        return  # a directory nothing was written to yet: an empty root


def _view(dirs: RootDirs, session_id: str) -> _View:
    if not is_safe_session_id(session_id):
        raise SessionNotFound(f"{session_id!r} is not a valid session id")
    view = _View(dirs, session_id)
    if not view.exists():
        view.close()
        raise SessionNotFound(f"no session {session_id!r} under {dirs.path}")
    return view


# --- pages -------------------------------------------------------------------------------------------


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
        _decode_cursor(cursor)  # a malformed cursor is refused before the root is looked at
    return _read(root, session_id, cursor, limit=limit, reverse=reverse, filters=filters)


def _read(
    root: Path, session_id: str, start: str | _Position | None, *, limit: int, reverse: bool, filters: Filters | None
) -> Page:
    """Read one page after ``start``: a cursor, or a position no cursor can name (see :func:`_after_gap`)."""
    dirs = _open(root)
    try:
        position = _single_position(start, session_id, dirs) if isinstance(start, str) else start
        view = _view(dirs, session_id)
        try:
            return _page(view, position, limit, reverse, filters)
        finally:
            view.close()
    finally:
        dirs.close()


class _Holes:
    """Turns what a view could not read, and jumps in ``seq``, into :class:`Gap` values during one read."""

    def __init__(self, view: _View) -> None:
        self.view = view
        self.seen = len(view.problems)
        self.gaps: list[Gap] = []

    def _take(self) -> list[str]:
        reasons = self.view.problems[self.seen :]
        self.seen = len(self.view.problems)
        return list(dict.fromkeys(reasons))

    def missing(self, first: int | None, last: int | None) -> None:
        """Events ``first..last`` lie between two events just read (None: unknown bound)."""
        if len(self.view.problems) == self.seen and (first is None or last is None or first > last):
            return  # the common case, once per event: nothing missing
        reasons = self._take()
        lagged = bool(reasons) and all(reason == _DELETED for reason in reasons)
        if lagged and (first is None or (last is not None and first > last)):
            return  # deleted before this read's first event, or held none of the events it expected
        if first is not None and last is not None and first > last:
            if not reasons:
                return
            first = last = None  # damage that held no event: a stray line
        elif not reasons:
            if first is None or last is None:
                return  # an open end without damage: before the oldest retained event, or the newest
            reasons = ["not in the stored lines"]
        if first is None and last is not None and last < 1:
            last = None
        self.view.incomplete |= lagged
        self.gaps.append(Gap(self.view.session_id, first, last, "; ".join(reasons), lagged=lagged))

    def trailing(self, first: int | None) -> None:
        """The read ended: report damage after the last event read (up to the checkpoint's ``seq``)."""
        if len(self.view.problems) == self.seen:
            return
        checkpoint = self.view.checkpoint
        known = checkpoint.seq if checkpoint is not None and checkpoint.seq >= (first or 1) else None
        reasons = self._take()
        lagged = all(reason == _DELETED for reason in reasons)
        if lagged and (first is None or known is None or first > known):
            return  # retention deleted segments that held nothing after the last event read
        self.view.incomplete |= lagged
        self.gaps.append(Gap(self.view.session_id, first, known, "; ".join(reasons), lagged=lagged))


def _expired_gap(view: _View, position: _Position) -> Gap:
    """Describe the events after ``position`` that are no longer stored."""
    oldest = _first_seq(view.forward(view.oldest(), 0))
    first = position.seq + 1
    if oldest is None or oldest > first:
        last = None if oldest is None else oldest - 1
        return Gap(view.session_id, first, last, _DELETED, lagged=True)
    return Gap(view.session_id, first, None, "no longer stored (the session was removed and started again)", True)


def _page(view: _View, position: _Position | None, limit: int, reverse: bool, filters: Filters | None) -> Page:
    session_id = view.session_id
    epoch = view.dirs.epoch
    if position is not None and not _verify(view, position):
        relocated = _relocate(view, position.seq)
        if relocated is None:
            gap = _expired_gap(view, position)
            return Page([], position.encode(epoch), incomplete=True, end=True, expired=True, gaps=(gap,))
        position = relocated
    check = None if filters is None or filters.empty else filters.match
    entries: list[Entry] = []
    holes = _Holes(view)
    if reverse:
        lines = (
            view.backward(view.active_number, None)
            if position is None
            else view.backward(position.segment, position.offset)
        )
        last = position
        seq = position.seq + 1 if position is not None else None
        for number, start, end, raw in lines:
            try:
                event = _decoder.decode(raw)
            except msgspec.DecodeError as exc:
                view.note(f"segment {number}: an undecodable line at byte {start} ({exc})")
                if seq is not None:
                    last = _Position(session_id, number, start, max(0, seq - 1))
                continue
            holes.missing(event.seq + 1, seq - 1 if seq is not None else None)
            seq = event.seq
            last = _Position(session_id, number, start, max(0, event.seq - 1))
            if check is None or check(event):
                after = _Position(session_id, number, end, event.seq).encode(epoch)
                entries.append(Entry(raw.decode(errors="replace"), event, after))
                if len(entries) >= limit:
                    break
        else:
            holes.missing(None, seq - 1 if seq is not None else None)
            next_cursor = last.encode(epoch) if last else None
            return Page(entries, next_cursor, view.incomplete, end=True, gaps=tuple(holes.gaps))
        return Page(entries, last.encode(epoch) if last else None, view.incomplete, end=False, gaps=tuple(holes.gaps))
    if position is None:
        oldest = view.oldest()
        lines = view.forward(oldest, 0)
        last = None
    else:
        lines = view.forward(position.segment, position.offset)
        last = position
    expected = position.seq + 1 if position is not None else None
    for number, start, end, raw in lines:
        try:
            event = _decoder.decode(raw)
        except msgspec.DecodeError as exc:
            view.note(f"segment {number}: an undecodable line at byte {start} ({exc})")
            last = _Position(session_id, number, end, last.seq if last else 0)
            continue
        holes.missing(expected, event.seq - 1)
        expected = event.seq + 1
        last = _Position(session_id, number, end, event.seq)
        if check is None or check(event):
            entries.append(Entry(raw.decode(errors="replace"), event, last.encode(epoch)))
            if len(entries) >= limit:
                break
    else:
        holes.trailing(expected)
        next_cursor = last.encode(epoch) if last else None
        return Page(entries, next_cursor, view.incomplete, end=True, gaps=tuple(holes.gaps))
    return Page(entries, last.encode(epoch), view.incomplete, end=False, gaps=tuple(holes.gaps))


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
    resume: _Position | None = None  # where a lagged read goes on: no cursor string can name it
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
                resume = _after_gap(session_id, page.gaps)
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
    page = _read(root, session_id, _Position(session_id, 0, 0, seq - 1), limit=1, reverse=False, filters=None)
    return next((entry for entry in page.entries if entry.event.seq == seq), None)


def end_cursor(root: Path, session_id: str) -> str:
    """Return the cursor right after the session's newest event (follow from it for new events only).

    Raises:
        SessionNotFound: nothing stored for the session.
    """
    dirs = _open(root)
    try:
        view = _view(dirs, session_id)
        try:
            return _end_position(view).encode(dirs.epoch)
        finally:
            view.close()
    finally:
        dirs.close()


def _end_position(view: _View) -> _Position:
    for number, _start, end, raw in view.backward(view.active_number, None):
        seq = _seq_of(raw)
        if seq is not None:
            return _Position(view.session_id, number, end, seq)
    return _Position(view.session_id, view.active_number, 0, 0)


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
    dirs = _open(root)
    try:
        view = _view(dirs, session_id)
        try:
            holes = _Holes(view)
            expected: int | None = None
            for number in range(view.oldest(), view.active_number + 1):
                segment = view._segment(number)
                if segment is None:
                    if view.get(number) is _MISSING and number < view.active_number:
                        view.note(f"segment {number} is missing")
                    continue
                try:
                    end = _complete_end(segment)
                    first = _first_seq(_lines_forward(segment, 0))
                    if first is not None:
                        holes.missing(expected, first - 1)
                    offset = 0
                    while offset < end:
                        chunk = segment.read(offset, min(chunk_size, end - offset))
                        if not chunk:
                            break
                        offset += len(chunk)
                        yield chunk
                    newest = _first_seq(_lines_backward(segment, end))
                    if newest is not None:
                        expected = newest + 1
                except SegmentUnreadable as exc:
                    view.note(str(exc))
                    continue
            holes.trailing(expected)
            if on_gap is not None:
                for gap in holes.gaps:
                    on_gap(gap)
        finally:
            view.close()
    finally:
        dirs.close()


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
    dirs = _open(root)
    try:
        position = _single_position(cursor, session_id, dirs) if cursor is not None else None
        view = _view(dirs, session_id)
        try:
            if position is not None and not _verify(view, position):
                position = _relocate(view, position.seq)
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
                    run_start = _Position(session_id, number, start, previous_seq).encode(dirs.epoch)
                previous, previous_seq = stamp.timestamp, stamp.seq
            runs.append((run_start, None))
            return runs
        finally:
            view.close()
    finally:
        dirs.close()


def read_session_lines(root: Path, session_id: str) -> Iterator[tuple[str, StoredEvent]]:
    """Yield ``(stored line, decoded event)`` for every retained event of a session, oldest first."""
    for entry in iter_events(root, session_id):
        yield entry.line, entry.event


# --- following ---------------------------------------------------------------------------------------


def _stat_key(dirs: RootDirs, session_id: str) -> tuple[int, ...]:
    """What tells a follower that a session changed: the active file's inode and size, and the
    checkpoint's inode, size and mtime (replaced at every rotation, so a write followed at once by a
    rotation, which leaves no active file before or after, is still noticed)."""
    try:
        info = os.stat(active_name(session_id), dir_fd=dirs.sessions_fd, follow_symlinks=False)
        active = (info.st_ino, info.st_size)
    except OSError:
        active = (0, -1)
    checkpoint = (0, 0, 0)
    if dirs.state_fd is not None:
        with contextlib.suppress(OSError):
            state = os.stat(state_name(session_id), dir_fd=dirs.state_fd, follow_symlinks=False)
            checkpoint = (state.st_ino, state.st_size, state.st_mtime_ns)
    return (*active, *checkpoint)


def _stored_session_ids(dirs: RootDirs) -> set[str]:
    found: set[str] = set()
    for name in os.listdir(dirs.sessions_fd):
        session_id = session_id_of(name)
        if session_id is None:
            archive = parse_archive_name(name)
            session_id = archive[0] if archive is not None else None
        if session_id is not None:
            found.add(session_id)
    return found


def follow(
    root: Path,
    session_ids: Sequence[str] | None = None,
    *,
    cursor: str | None = None,
    poll_interval: float = 0.02,
    stop: Callable[[], bool] | None = None,
    filters: Filters | None = None,
    on_gap: Callable[[Gap], None] | None = None,
) -> Iterator[Entry]:
    """Yield events as they land, like ``tail -F``: across rotations, collector restarts and missing files.

    Args:
        root: the session root.
        session_ids: the sessions to follow; None follows every session of the root, including
            sessions that appear later (read from their first event).
        cursor: resume from here (a cursor of one session, or of :func:`combine_cursors`); followed
            sessions it does not mention are read from their first event, since they appeared
            after it was made. Without a cursor, only events written after the call are yielded
            (sessions that appear later are still read from their first event).
        poll_interval: seconds between checks when nothing changed (the files are polled: a
            ``stat`` per followed session per poll).
        stop: called between polls; the iterator ends when it returns true.
        filters: only yield matching events.
        on_gap: called with each :class:`Gap` met (once per session and first ``seq``). With it, a
            follower that lagged behind retention reports the deleted range and goes on with the
            oldest event still stored, instead of raising :class:`CursorExpired`.

    Events of one session come in ``seq`` order; events of different sessions that land in the same
    poll are merged by timestamp. A session that does not exist yet is waited for.

    Raises:
        CursorExpired: retention deleted events a follower had not read yet (it lagged too far), and
            no ``on_gap`` was given.
        InvalidCursor: the cursor was not made by this reader, or on another root.
    """
    decoded, epoch = _decode_cursor_epoch(cursor) if cursor is not None else ({}, "")
    positions: dict[str, _Position | None] = dict(decoded)
    waited = False
    while True:
        try:
            dirs = _open(root)
            break
        except RootNotFound:
            raise
        except SessionNotFound:  # nothing written yet: wait for the collector's first write
            if stop is not None and stop():
                return
            waited = True
            time.sleep(poll_interval)
    reported: set[tuple[str, int | None, str]] = set()

    def report(gap: Gap) -> None:
        key = (gap.session_id, gap.first, gap.reason)
        if on_gap is not None and key not in reported:
            reported.add(key)
            on_gap(gap)

    try:
        _check_epoch(epoch, dirs)
        watch_all = session_ids is None
        initial = set(session_ids) if session_ids is not None else _stored_session_ids(dirs)
        for session_id in initial:
            if session_id not in positions:
                if not is_safe_session_id(session_id):
                    raise SessionNotFound(f"{session_id!r} is not a valid session id")
                # Resuming: a session the cursor does not know appeared after it was made (and when
                # the root itself had to be waited for, everything in it is new).
                positions[session_id] = None if cursor is not None or waited else _current_end(dirs, session_id)
        if session_ids is not None:
            positions = {key: value for key, value in positions.items() if key in initial}
        seen: dict[str, tuple[int, ...] | bool] = dict.fromkeys(positions, True)
        drained_at: dict[str, float] = {}
        listed_at = time.monotonic()
        directory_mtime = os.fstat(dirs.sessions_fd).st_mtime_ns
        while stop is None or not stop():
            if watch_all:
                mtime = os.fstat(dirs.sessions_fd).st_mtime_ns
                now = time.monotonic()
                if mtime != directory_mtime or now - listed_at >= _RESCAN_EVERY:
                    directory_mtime, listed_at = mtime, now
                    for session_id in _stored_session_ids(dirs) - positions.keys():
                        positions[session_id] = None  # a new session: from its first event
                        seen[session_id] = True
            batches: list[list[Entry]] = []
            now = time.monotonic()
            for session_id in list(positions):
                key = _stat_key(dirs, session_id)
                # Without an active file (just rotated) only the checkpoint tells a change, and a new
                # checkpoint can reuse the old one's inode within one mtime tick: drain such a session
                # anyway once a second, so that its last events never wait for its next write.
                if seen.get(session_id) == key and (key[0] != 0 or now - drained_at.get(session_id, 0.0) < 1.0):
                    continue
                seen[session_id] = key
                drained_at[session_id] = now
                entries, positions[session_id] = _drain(
                    dirs, session_id, positions[session_id], filters, report if on_gap is not None else None
                )
                if entries:
                    batches.append(entries)
            if not batches:
                time.sleep(poll_interval)
                continue
            if len(batches) == 1:
                yield from batches[0]
            else:
                yield from heapq.merge(*batches, key=lambda entry: entry.event.timestamp)
    finally:
        dirs.close()


def _current_end(dirs: RootDirs, session_id: str) -> _Position | None:
    try:
        view = _view(dirs, session_id)
    except SessionNotFound:
        return None
    try:
        return _end_position(view)
    finally:
        view.close()


def _after_gap(session_id: str, gaps: Iterable[Gap]) -> _Position | None:
    """Where a lagged reader goes on: right after the last ``seq`` its gap accounts for.

    Not "the oldest event still stored": retention may delete more before that is read, and a
    reader that did not know which ``seq`` it expected next would jump over those events without a
    word. The boundary is found again by its ``seq`` (segment 0 never exists, so the read relocates
    it), and whatever retention deleted meanwhile is the next gap. None when the gap has no end
    (nothing stored after it, or the session started again): then from the oldest event stored.
    """
    last = max((gap.last for gap in gaps if gap.lagged and gap.last is not None), default=None)
    return None if last is None else _Position(session_id, 0, 0, last)


def _drain(
    dirs: RootDirs,
    session_id: str,
    position: _Position | None,
    filters: Filters | None,
    on_gap: Callable[[Gap], None] | None,
) -> tuple[list[Entry], _Position | None]:
    """Read everything after ``position`` that is complete now; return it and the new position."""
    try:
        view = _view(dirs, session_id)
    except SessionNotFound:
        return [], position
    entries: list[Entry] = []
    try:
        while True:
            page = _page(view, position, 10_000, False, filters)
            if on_gap is not None:
                for gap in page.gaps:
                    on_gap(gap)
            if page.expired:
                if on_gap is None:
                    raise CursorExpired(session_id)
                position = _after_gap(session_id, page.gaps)
                continue
            entries.extend(page.entries)
            if page.next_cursor is not None:
                position = _single_position(page.next_cursor, session_id)
            if page.end:
                return entries, position
    finally:
        view.close()


# --- sessions and trees ------------------------------------------------------------------------------


def _time(text: str) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _quick_summary(dirs: RootDirs, session_id: str, listing: _Listing) -> SessionSummary | None:
    """Summarise from the checkpoint alone when it covers the whole active file (the common case).

    The directory listing already says which archives exist, so this costs one ``stat`` and one
    small read; anything that does not line up (no checkpoint, bytes written since, a rotation
    racing with us) goes the careful way through :func:`_summary`.
    """
    checkpoint = _covering_checkpoint(dirs, session_id, listing)
    return None if checkpoint is None else _summary_of(session_id, checkpoint, segments=checkpoint.segment)


def _covering_checkpoint(dirs: RootDirs, session_id: str, listing: _Listing) -> Checkpoint | None:
    """The session's checkpoint when it covers every stored line: no archive after it, and the active
    file (if any) exactly as long as it says. None otherwise: then only reading the lines is exact."""
    checkpoint = read_checkpoint(dirs.state_fd, session_id + STATE_SUFFIX)
    if checkpoint is None or listing.newest_archive.get(session_id, 0) >= checkpoint.segment:
        return None
    try:
        info = os.stat(session_id + ACTIVE_SUFFIX, dir_fd=dirs.sessions_fd, follow_symlinks=False)
    except FileNotFoundError:
        size = 0
    except OSError:
        return None
    else:
        if not stat.S_ISREG(info.st_mode):
            return None
        size = info.st_size
    return checkpoint if size == checkpoint.offset else None


def _summary_of(
    session_id: str, state: Checkpoint | SessionFold, *, segments: int, incomplete: bool = False
) -> SessionSummary:
    """A summary from what a checkpoint stored or what a replay rebuilt (the same fields)."""
    return SessionSummary(
        session_id=session_id,
        parent_session_id=state.parent or None,
        agent=state.agent,
        first_time=_time(state.first_time),
        last_time=_time(state.last_time),
        events=state.seq,
        open_actions=len(state.open_actions) + (len(state.open_cycles) if isinstance(state, Checkpoint) else 0),
        failures=state.failures,
        segments=segments,
        incomplete=incomplete,
    )


class _Listing:
    """What one listing of ``sessions/`` (and ``state/``) says: session ids and their newest archive."""

    def __init__(self, dirs: RootDirs) -> None:
        self.session_ids: set[str] = set()
        self.active: set[str] = set()
        """Sessions with an active file."""
        self.newest_archive: dict[str, int] = {}
        self.archives: dict[str, set[int]] = {}
        self.damaged: set[str] = set()
        """Sessions with something other than a regular file under an archive's name."""
        with os.scandir(dirs.sessions_fd) as entries:
            for item in entries:
                name = item.name
                session_id = session_id_of(name)
                if session_id is not None:
                    self.active.add(session_id)
                else:
                    archive = parse_archive_name(name)
                    if archive is None:
                        continue
                    session_id = archive[0]
                    self.archives.setdefault(session_id, set()).add(archive[1])
                    if archive[1] > self.newest_archive.get(session_id, 0):
                        self.newest_archive[session_id] = archive[1]
                    if not item.is_file(follow_symlinks=False):
                        self.damaged.add(session_id)
                self.session_ids.add(session_id)
        if dirs.state_fd is not None:
            with contextlib.suppress(OSError):
                for name in os.listdir(dirs.state_fd):
                    session_id = session_id_of_state(name)
                    if session_id is not None:
                        self.session_ids.add(session_id)

    def holed(self, session_id: str) -> bool:
        """Whether the listing already shows damage: a gap in the archive numbers, or a non-file."""
        numbers = self.archives.get(session_id)
        return session_id in self.damaged or (numbers is not None and len(numbers) != max(numbers) - min(numbers) + 1)


def _summary(dirs: RootDirs, session_id: str, *, verify: bool = False) -> SessionSummary | None:
    try:
        view = _View(dirs, session_id)
    except SegmentUnreadable:
        return None
    try:
        if not view.exists():
            return None
        # Verifying replays every retained segment (decompressing each archive) instead of
        # trusting the checkpoint, so that damage anywhere shows as `incomplete`.
        fold, _segment_seq, complete = replay_session(
            dirs.sessions_fd, session_id, None if verify else view.checkpoint, view.active_number, view.active
        )
    finally:
        view.close()
    return _summary_of(session_id, fold, segments=view.active_number, incomplete=not complete or view.active_unreadable)


def list_sessions(root: Path, *, verify: bool = False) -> list[SessionSummary]:
    """Summarise every session stored under ``root``, ordered by first event (then id).

    Each summary costs the session's checkpoint plus a scan of what was written after it (the
    collector refreshes checkpoints every few seconds), so this stays fast with many sessions.
    ``incomplete`` then says what the listing shows (a missing archive number, something other
    than a file under an archive's name); with ``verify`` every retained segment is read, so that
    any unreadable segment shows, at the cost of reading the whole root. A missing root has no
    sessions.

    Raises:
        LayoutTooNew: the root was written by a newer gz-ia.
    """
    try:
        dirs = _open(root)
    except SessionNotFound:
        return []
    try:
        listing = _Listing(dirs)
        summaries = []
        for session_id in listing.session_ids:
            if verify:
                summary = _summary(dirs, session_id, verify=True)
            else:
                summary = _quick_summary(dirs, session_id, listing) or _summary(dirs, session_id)
            if summary is not None and listing.holed(session_id) and not summary.incomplete:
                summary = dataclasses.replace(summary, incomplete=True)
            if summary is not None:
                summaries.append(summary)
    finally:
        dirs.close()
    summaries.sort(key=lambda item: (item.first_time is None, item.first_time or datetime.min, item.session_id))
    return summaries


def build_tree(summaries: Iterable[SessionSummary], session_id: str) -> TreeNode:
    """Return the tree of ``session_id`` and its descendants (through ``parent_session_id``).

    A session that logged nothing itself but is named as a parent is part of the tree: its node has
    an empty summary (no events, no times) and the sessions that named it as children.

    Raises:
        SessionNotFound: ``session_id`` is neither among the summaries nor anyone's parent.
    """
    by_id: dict[str, SessionSummary] = {}
    children: dict[str, list[SessionSummary]] = {}
    for summary in summaries:
        by_id[summary.session_id] = summary
        if summary.parent_session_id:
            children.setdefault(summary.parent_session_id, []).append(summary)
    top = by_id.get(session_id)
    if top is None and session_id in children:
        top = SessionSummary(session_id, None, "", None, None, 0, 0, 0, 0)
    if top is None:
        raise SessionNotFound(f"no session {session_id!r}")
    visited = {session_id}

    def unseen_children(parent: str) -> list[SessionSummary]:
        fresh = [child for child in children.get(parent, []) if child.session_id not in visited]
        visited.update(child.session_id for child in fresh)  # a parent cycle cannot loop forever
        return fresh

    # Iterative and bounded: a chain of subagents may be deeper than Python's recursion limit.
    top_node = TreeNode(top)
    pending = [(top_node, 0)]
    while pending:
        node, depth = pending.pop()
        if depth < MAX_TREE_DEPTH:
            for child in unseen_children(node.session_id):
                node.children.append(TreeNode(child))
                pending.append((node.children[-1], depth + 1))
            continue
        below = unseen_children(node.session_id)
        while below:
            node.hidden += len(below)
            below = [grandchild for child in below for grandchild in unseen_children(child.session_id)]
    return top_node


def session_tree(root: Path, session_id: str) -> TreeNode:
    """Return the subagent tree below ``session_id``: each node's summary gives status and duration.

    Raises:
        SessionNotFound: nothing stored for the session.
    """
    if not is_safe_session_id(session_id):
        raise SessionNotFound(f"{session_id!r} is not a valid session id")
    require_root(root)
    return build_tree(list_sessions(root), session_id)


def session_summaries(root: Path) -> Mapping[str, SessionSummary]:
    """Return :func:`list_sessions` keyed by session id."""
    return {summary.session_id: summary for summary in list_sessions(root)}
