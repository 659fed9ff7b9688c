"""One session's stored lines at one moment: the segments it is made of, and scanning them for lines.

A session is one logical stream of events: its retained archives ``<id>.events.<n>.jsonl[.gz]`` in
segment order, then its active file ``<id>.events.jsonl``. A :class:`SessionView` is a consistent
snapshot of those segments for one read; the line scanners yield complete lines from a byte offset,
forwards or backwards, and hold a last line without its newline back (it is being written).

**Robustness.** A segment that cannot be read (a directory or a symlink in its place, corrupt gzip)
is skipped and the view notes why. Every file is opened relative to the root's directory
descriptors with ``O_NOFOLLOW``: symlinks are refused, never followed, and names are only built from
validated session ids. A root of a newer storage layout raises :class:`LayoutTooNew`.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import is_safe_session_id
from gz_ia.collector.errors import CollectorError
from gz_ia.collector.storage.checkpoints import read_checkpoint
from gz_ia.collector.storage.names import STATE_SUFFIX, active_name, session_archive
from gz_ia.collector.storage.roots import LayoutError, LayoutTooNew, RootDirs, open_root
from gz_ia.collector.storage.segments import (
    Segment,
    SegmentUnreadable,
    locate_active,
    oldest_segment,
    open_archive,
)

__all__ = [
    "DELETED",
    "MISSING",
    "Line",
    "Missing",
    "RootNotFound",
    "SessionNotFound",
    "SessionView",
    "Unreadable",
    "complete_end",
    "first_seq",
    "lines_backward",
    "lines_forward",
    "open_dirs",
    "open_view",
    "require_root",
    "root_view",
    "seq_of",
]

_CHUNK: Final = 1 << 16
"""Bytes read from a segment at a time."""


class _Seq(msgspec.Struct, gc=False):
    seq: int = 0


_seq_decoder: Final = msgspec.json.Decoder(_Seq)


class SessionNotFound(CollectorError, LookupError):
    """No file exists for the session id under the root (or the id is not a valid one)."""


class RootNotFound(SessionNotFound):
    """No session root exists at the path (a mistyped ``GZ_IA_ROOT``, or no collector wrote there yet)."""


class Missing:
    """Sentinel: a segment that does not exist."""


class Unreadable:
    """A segment that exists but cannot be read, and why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


MISSING: Final = Missing()

DELETED: Final = "deleted by retention before they were read"
"""Why a segment went missing during a read; whether that hid events depends on where the read began."""

# A line found in a session: (segment, start offset, end offset after the newline, bytes without it).
Line = tuple[int, int, int, bytes]


class SessionView:
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
        self.segments: dict[int, Segment | Missing | Unreadable] = {}
        if self.active is not None:
            self.segments[self.active_number] = self.active
        elif self.active_unreadable:
            self.segments[self.active_number] = Unreadable(f"{active_name(session_id)}: cannot be read")
        else:
            self.segments[self.active_number] = MISSING
        self.incomplete = False
        self.problems: list[str] = []
        """Why lines were skipped, in reading order (the reader turns them into :class:`Gap`)."""

    def note(self, reason: str) -> None:
        """Record that something stored could not be read."""
        self.incomplete = True
        self.problems.append(reason)

    def note_deleted(self) -> None:
        """Record that retention deleted a segment during this read, before it was opened.

        Whether that hid events depends on where the read started: :class:`Holes` decides.
        """
        self.problems.append(DELETED)

    def exists(self) -> bool:
        """Whether anything of the session is stored."""
        return (
            self.active is not None
            or self.active_unreadable
            or self.checkpoint is not None
            or (self.active_number > 1 and self.get(self.active_number - 1) is not MISSING)
        )

    def get(self, number: int) -> Segment | Missing | Unreadable:
        """Return segment ``number``, opening it on first use."""
        found = self.segments.get(number)
        if found is not None:
            return found
        if number < 1 or number > self.active_number:
            return MISSING
        try:
            segment: Segment | Missing | Unreadable = open_archive(
                self.dirs.sessions_fd, session_archive(self.session_id, number), number
            )
        except FileNotFoundError:
            segment = MISSING
        except SegmentUnreadable as exc:
            segment = Unreadable(str(exc))
        self.segments[number] = segment
        return segment

    def oldest(self) -> int:
        """Return the oldest retained segment's number, below any archive removed by hand."""
        return oldest_segment(self.dirs.sessions_fd, self.session_id, self.active_number)

    def note_missing(self, number: int) -> None:
        """Record that archive ``number`` is gone while older ones are kept: retention deletes the
        oldest first, so it was removed by hand, and the events it held are named."""
        self.note(f"segment {number} ({session_archive(self.session_id, number)(False)}) is missing")

    def release(self, number: int) -> None:
        """Let go of archive ``number`` once the read is past it: a view that crosses many archives
        holds one at a time (opened again, from the process's small cache, if it is needed again)."""
        if number != self.active_number:
            segment = self.segments.pop(number, None)
            if isinstance(segment, Segment):
                segment.close()

    def close(self) -> None:
        """Close every opened segment."""
        for segment in self.segments.values():
            if isinstance(segment, Segment):
                segment.close()

    # --- lines ---------------------------------------------------------------------------------------

    def segment(self, number: int) -> Segment | None:
        """Return segment ``number`` when it can be read (an unreadable one is noted), else None."""
        segment = self.get(number)
        if isinstance(segment, Unreadable):
            self.note(segment.reason)
            return None
        return segment if isinstance(segment, Segment) else None

    def forward(self, number: int, offset: int, *, one_segment: bool = False) -> Iterator[Line]:
        """Yield complete lines from ``offset`` of segment ``number`` on, through the active segment."""
        while number <= self.active_number:
            segment = self.segment(number)
            if segment is not None:
                try:
                    yield from lines_forward(segment, offset)
                except SegmentUnreadable as exc:
                    self.note(str(exc))
            elif self.get(number) is MISSING and number < self.active_number:
                if number >= self.oldest():
                    self.note_missing(number)  # a hole in the middle of the retained history
                else:
                    self.note_deleted()  # behind the oldest retained segment now: retention went on meanwhile
            if one_segment:
                return
            self.release(number)
            number += 1
            offset = 0

    def backward(self, number: int, offset: int | None, *, floor: int = 1) -> Iterator[Line]:
        """Yield complete lines ending at or before ``offset`` of segment ``number`` (None: its end), newest
        first, down to segment ``floor``."""
        while number >= floor:
            found = self.get(number)
            if isinstance(found, Missing):
                if number != self.active_number:
                    if number < self.oldest():
                        return  # the oldest retained segment is behind us
                    self.note_missing(number)
            elif isinstance(found, Unreadable):
                self.note(found.reason)
            else:
                try:
                    yield from lines_backward(found, offset)
                except SegmentUnreadable as exc:
                    self.note(str(exc))
            self.release(number)
            number -= 1
            offset = None


def lines_forward(segment: Segment, offset: int) -> Iterator[Line]:
    """Yield the complete lines of ``segment`` from ``offset`` on, oldest first."""
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


def complete_end(segment: Segment) -> int:
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


def lines_backward(segment: Segment, offset: int | None) -> Iterator[Line]:
    """Yield the complete lines of ``segment`` ending at or before ``offset`` (None: its end), newest first."""
    number = segment.number
    top = complete_end(segment) if offset is None else min(offset, segment.size)
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


def seq_of(raw: bytes) -> int | None:
    """Return a stored line's ``seq`` without decoding the rest (None: not a decodable event)."""
    try:
        return _seq_decoder.decode(raw).seq
    except msgspec.DecodeError:
        return None


def first_seq(lines: Iterable[Line]) -> int | None:
    """Return the ``seq`` of the first line that has one."""
    return next((seq for line in lines if (seq := seq_of(line[3])) is not None), None)


def open_dirs(root: Path) -> RootDirs:
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


def require_root(root: Path) -> None:
    """Check that ``root`` is a readable session root.

    Raises:
        RootNotFound: nothing exists at ``root``.
        LayoutError: it exists but cannot be used (the message says why), or is of a newer layout.
    """
    try:
        open_dirs(root).close()
    except RootNotFound:
        raise
    except SessionNotFound:
        return  # a directory nothing was written to yet: an empty root


def open_view(dirs: RootDirs, session_id: str) -> SessionView:
    """Return a view of one session (close it after the read).

    Raises:
        SessionNotFound: an invalid id, or nothing stored for it.
    """
    if not is_safe_session_id(session_id):
        raise SessionNotFound(f"{session_id!r} is not a valid session id")
    view = SessionView(dirs, session_id)
    if not view.exists():
        view.close()
        raise SessionNotFound(f"no session {session_id!r} under {dirs.path}")
    return view


@contextlib.contextmanager
def root_view(root: Path, session_id: str) -> Iterator[SessionView]:
    """Open ``root`` and a view of one of its sessions for one read, and close both after it.

    Raises:
        SessionNotFound: nothing stored for the session.
    """
    dirs = open_dirs(root)
    try:
        view = open_view(dirs, session_id)
        try:
            yield view
        finally:
            view.close()
    finally:
        dirs.close()
