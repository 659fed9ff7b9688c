"""A session's segments as bytes: the active file read with ``pread``, or an archive, plain or gzip.

The writer renames the active file to its archive name (never copies it), so a segment is found by
its number, under either name, and the active one is located by looking for archives past the
checkpoint's number (see :func:`locate_active`). Nothing here follows a symlink or reads anything
but a regular file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import zlib
from collections.abc import Callable
from typing import Final

from gz_ia.collector.errors import CollectorError

from .gzip_cache import Archive, decompressed
from .names import ACTIVE_SUFFIX, parse_archive_name, session_archive

__all__ = [
    "READ_FLAGS",
    "SCAN_CHUNK",
    "Segment",
    "SegmentUnreadable",
    "locate_active",
    "oldest_segment",
    "open_archive",
    "open_regular",
    "segment_exists",
]

_PROBED_BELOW_A_HOLE: Final = 64
"""Numbers below a missing archive looked up one by one; further down, one listing of the directory
is cheaper than so many lookups."""
SCAN_CHUNK: Final = 1 << 20
"""Bytes read at a time when a segment is scanned line by line."""
READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""How every stored file is opened for reading: never through a symlink, and never waiting on a FIFO
or a device put under a file's name (a regular file reads the same with or without O_NONBLOCK)."""


class SegmentUnreadable(CollectorError):
    """A segment exists but cannot be read (not a regular file, a symlink, corrupt compression...)."""


class Segment:
    """The bytes of one segment: a plain file read with ``pread``, or a decompressed gzip archive.

    ``size`` is fixed when the segment is opened: bytes appended later (to the active segment) are
    seen by the next opening, never half.
    """

    __slots__ = ("active", "data", "fd", "ino", "number", "size")

    def __init__(
        self, number: int, *, fd: int | None, data: bytes | Archive | None, size: int, ino: int, active: bool
    ) -> None:
        self.number = number
        self.fd = fd
        self.data = data
        self.size = size
        self.ino = ino
        self.active = active

    def read(self, offset: int, length: int) -> bytes:
        """Return up to ``length`` bytes at ``offset`` (never past ``size``)."""
        length = max(0, min(length, self.size - offset))
        if length == 0:
            return b""
        try:
            if self.data is not None:
                return self.data[offset : offset + length]
            assert self.fd is not None
            return os.pread(self.fd, length, offset)
        except OSError as exc:
            raise SegmentUnreadable(f"segment {self.number}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        """Release the file descriptor."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


def open_regular(dir_fd: int | None, name: str) -> tuple[int, os.stat_result]:
    """Open ``name`` read-only (:data:`READ_FLAGS`), relative to ``dir_fd``; refuse anything but a
    regular file.

    Raises:
        FileNotFoundError: there is no such file.
        SegmentUnreadable: a symlink, not a regular file, or another error opening it.
    """
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, "missing", name) from exc
        reason = "a symlink (refused)" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise SegmentUnreadable(f"{name}: {reason}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise SegmentUnreadable(f"{name}: not a regular file")
    return fd, info


def open_archive(dir_fd: int, name_of: Callable[[bool], str], number: int) -> Segment:
    """Open archived segment ``number``, plain or compressed, whichever exists.

    While an archive is being compressed both names exist for a moment, with the same content; the
    plain one is preferred and, if it disappears in between, the compressed one is used.

    Raises:
        FileNotFoundError: no such segment (never written, or removed by retention).
        SegmentUnreadable: it exists but cannot be read.
    """
    for compressed in (False, True, False):
        try:
            fd, info = open_regular(dir_fd, name_of(compressed))
        except FileNotFoundError:
            continue
        if not compressed:
            return Segment(number, fd=fd, data=None, size=info.st_size, ino=info.st_ino, active=False)
        try:
            data = decompressed(fd, info, name_of(True))
        except (OSError, EOFError, zlib.error) as exc:
            raise SegmentUnreadable(f"{name_of(True)}: {exc}") from exc
        finally:
            os.close(fd)
        return Segment(number, fd=None, data=data, size=len(data), ino=info.st_ino, active=False)
    raise FileNotFoundError(errno.ENOENT, "no such segment", name_of(False))


def segment_exists(dir_fd: int, name_of: Callable[[bool], str]) -> bool:
    """Tell whether an archive exists under either name (as anything: a directory in its place counts)."""
    for compressed in (False, True):
        try:
            os.stat(name_of(compressed), dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            return True
        return True
    return False


def oldest_segment(sessions_fd: int, session_id: str, active_number: int) -> int:
    """Return the number of a session's oldest retained segment (the active one's when no archive is left).

    Retention deletes a session's archives oldest first, so below the first number found missing
    there is usually nothing left. An archive removed by hand leaves a hole with older archives
    under it, which a reader must still read and name the hole: so below a missing number the
    archives are looked for too, one by one when few numbers remain, else in one listing.
    """
    number = active_number
    while number > 1 and segment_exists(sessions_fd, session_archive(session_id, number - 1)):
        number -= 1
    hole = number - 1
    if hole <= 1:
        return number
    if hole - 1 <= _PROBED_BELOW_A_HOLE:
        older = [below for below in range(1, hole) if segment_exists(sessions_fd, session_archive(session_id, below))]
    else:
        prefix = session_id + ".events."
        older = []
        with os.scandir(sessions_fd) as entries:
            for entry in entries:
                if entry.name.startswith(prefix):
                    parsed = parse_archive_name(entry.name)
                    if parsed is not None and parsed[0] == session_id and parsed[1] < hole:
                        older.append(parsed[1])
    return min(older, default=number)


def locate_active(sessions_fd: int, session_id: str, hint: int) -> tuple[int, Segment | None, bool]:
    """Return ``(number, segment, unreadable)`` of a session's active segment (``session_id`` validated).

    ``segment`` is the open active file (None when there is none, or it cannot be read, in which case
    ``unreadable`` is true). ``hint`` is the checkpoint's segment number (1 without one). The writer
    renames the active file to its archive name before it writes the checkpoint, so archives at or
    above the hint mean the checkpoint lags behind: the active number is one past the highest. Opening
    the active name races with a rotation, so the archive check is repeated after opening it.
    """
    number = max(1, hint)
    for _attempt in range(100):
        while segment_exists(sessions_fd, session_archive(session_id, number)):
            number += 1
        try:
            fd, info = open_regular(sessions_fd, session_id + ACTIVE_SUFFIX)
        except FileNotFoundError:
            if segment_exists(sessions_fd, session_archive(session_id, number)):
                continue  # rotated in between: look again
            return number, None, False
        except SegmentUnreadable:
            return number, None, True
        if not segment_exists(sessions_fd, session_archive(session_id, number)):
            return number, Segment(number, fd=fd, data=None, size=info.st_size, ino=info.st_ino, active=True), False
        os.close(fd)  # renamed to archive `number` while we opened it: look again
    raise SegmentUnreadable(f"{session_id}: the active segment keeps rotating; try again")
