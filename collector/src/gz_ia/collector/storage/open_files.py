"""The files the writer appends to, and the bound on how many of them are open at once.

A collector may serve more sessions than it may hold descriptors, so open files are kept in least
recently written order and the oldest are closed when the bound is reached; a closed file is opened
again (``O_APPEND``) at its next write. A descriptor retired by a rotation stays open until the next
write pass has synced it, so that ``durability = "fsync"`` acknowledges only synced bytes.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import logging
import os
import stat

from .flags import FILE_FLAGS, REPAIR_FLAGS
from .names import session_id_of
from .torn import repair_torn_tail

__all__ = ["FILE_FLAGS", "AppendFile", "OpenFiles"]

log = logging.getLogger("gz_ia.collector")


class AppendFile:
    """An append-only file under a root, written through a pending buffer."""

    __slots__ = (
        "dir_fd",
        "fd",
        "generation",
        "inode",
        "last_write",
        "name",
        "pending",
        "segment",
        "size",
        "started",
    )

    def __init__(self, dir_fd: int, name: str) -> None:
        self.dir_fd = dir_fd
        self.name = name
        # Bumped whenever memory forgets this file after a failure: anything staged before the
        # bump was lost with the pending buffer and must not be acknowledged.
        self.generation = 0
        self.fd: int | None = None
        self.pending: list[bytes | bytearray] = []
        """Lines staged for the next write pass, joined once when it detaches them: appending to a
        growing buffer instead reallocates and copies it over and over (1 in 8 appends)."""
        self.size = 0
        self.inode: tuple[int, int] | None = None
        """``(device, inode)`` of the file last written (None: not known yet, as after a start), so
        that a file replaced while its descriptor was closed is told apart at the next open."""
        self.segment = 1
        """Number of the active segment (the archive number it gets when rotated)."""
        self.started = 0.0
        """When the active segment got its first bytes (writer clock), for daily rotation."""
        self.last_write = 0.0


class OpenFiles:
    """The open descriptors of :class:`AppendFile` s, least recently written first, at most ``limit``.

    Touched by the loop between write passes and by the pass's thread during one, never both at once.
    """

    __slots__ = ("_open", "limit", "retired")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("max_open_files must be at least 1")
        self.limit = limit
        self._open: collections.OrderedDict[AppendFile, None] = collections.OrderedDict()
        self.retired: list[int] = []
        """Descriptors of rotated-away segments, for the next write pass to sync and close."""

    def __len__(self) -> int:
        return len(self._open)

    def ensure_open(self, target: AppendFile) -> int:
        """Return ``target``'s descriptor, opening it (and closing the oldest past the bound) if needed."""
        fd = target.fd
        if fd is not None:
            self._open.move_to_end(target)
            return fd
        if len(self._open) >= self.limit:
            # Close the least recently written eighth at once: evicting one file per open makes a
            # round-robin over slightly more sessions than slots miss on every single write.
            for _ in range(len(self._open) - self.limit + max(1, self.limit // 8)):
                oldest, _ = self._open.popitem(last=False)
                self.close(oldest)
        removed = False
        try:  # a file written before must still be there: created afresh only when it is gone
            fd = os.open(
                target.name, FILE_FLAGS & ~os.O_CREAT if target.size else FILE_FLAGS, 0o600, dir_fd=target.dir_fd
            )
        except FileNotFoundError:
            removed = True
            fd = os.open(target.name, FILE_FLAGS, 0o600, dir_fd=target.dir_fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # a FIFO that has a reader, a device: not ours
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", target.name)
        inode = (info.st_dev, info.st_ino)
        if target.size and (removed or info.st_size < target.size or inode != (target.inode or inode)):
            # Touched while closed: the next append lands after what is there, not after what was
            # written, and the size (the checkpoint's offset) must follow the file found.
            os.close(fd)
            if removed:
                what = "removed"
            elif target.inode is None or inode == target.inode:  # None: the first open since a start
                what = "truncated"
            else:
                what = "replaced"
            self._touched(target, what)
            fd = os.open(target.name, FILE_FLAGS, 0o600, dir_fd=target.dir_fd)
            info = os.fstat(fd)
        target.inode = (info.st_dev, info.st_ino)
        target.fd = fd
        self._open[target] = None
        return fd

    def close(self, target: AppendFile) -> None:
        """Close ``target``'s descriptor, if open."""
        self._open.pop(target, None)
        if target.fd is not None:
            with contextlib.suppress(OSError):
                os.close(target.fd)
            target.fd = None

    def close_all(self) -> None:
        """Close every descriptor, retired ones included."""
        self.close_retired()
        for target in list(self._open):
            self.close(target)

    def retire(self, target: AppendFile) -> None:
        """Detach ``target``'s descriptor after a rotation; it is closed by the next write pass.

        Its last bytes may still need an ``fdatasync`` before their batch is acknowledged.
        """
        self._open.pop(target, None)
        if target.fd is not None:
            self.retired.append(target.fd)
            target.fd = None

    def take_retired(self) -> list[int]:
        """Hand the retired descriptors over to a write pass."""
        retired, self.retired = self.retired, []
        return retired

    def close_retired(self) -> None:
        """Close the retired descriptors without syncing them."""
        for fd in self.take_retired():
            with contextlib.suppress(OSError):
                os.close(fd)

    def check_unlinked(self, target: AppendFile) -> int | None:
        """Before writing to a file idle for a while: reopen it if ``gz-ia gc`` removed it.

        Returns the descriptor left under a shared ``flock``, which the caller releases after its
        write (None if the file was gone and closed). ``gz-ia gc`` removes a session only under an
        exclusive lock of its active file, so it cannot remove it between this check and the write.
        """
        assert target.fd is not None
        fd = target.fd
        fcntl.flock(fd, fcntl.LOCK_SH)
        if os.fstat(fd).st_nlink == 0:
            log.info("%s was removed while idle; starting it again", target.name)
            self.close(target)
            target.size = 0
            return None
        return fd

    def check_touched(self, target: AppendFile) -> None:
        """Before a write pass appends to ``target``: reopen it if someone touched it since the last pass.

        Editors and ``sed -i`` save by renaming a new file over the old one, and a person may
        truncate or remove a session file: appending to the descriptor held then would put every
        later event into a file no reader sees (an unlinked inode) or past its end. One ``fstat`` per
        file per write pass (not per event) tells: no link left (replaced or removed), or fewer
        bytes than written (truncated); only then is the path looked at. The file at the path is
        then used (created afresh when it is gone), a torn last line cut off, and ``size`` follows.
        """
        fd = target.fd
        assert fd is not None
        held = os.fstat(fd)
        # A file renamed over ours or ours removed both leave the held inode without a link.
        if held.st_nlink and held.st_size >= target.size:
            return
        try:
            named: os.stat_result | None = os.stat(target.name, dir_fd=target.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            named = None
        if named is None:
            what = "removed"
        elif named.st_ino != held.st_ino or named.st_dev != held.st_dev:
            what = "replaced"
        else:
            what = "truncated"
        self.close(target)
        self._touched(target, what)

    def _touched(self, target: AppendFile, what: str) -> None:
        """Take the file now at ``target``'s name as the one written on, saying what happened."""
        size = self._adopt(target)
        log.warning(
            "%s was %s behind the collector's back (%d bytes written, %d there now); writing on to the file"
            " at its name: readers name the events it no longer holds",
            target.name,
            what,
            target.size,
            size,
        )
        target.size = size

    def _adopt(self, target: AppendFile) -> int:
        """Open the file now at ``target``'s name (creating it) and return its good size: a last line
        without its newline (cut by a truncation) is moved aside, as recovery does after a crash."""
        fd = os.open(target.name, REPAIR_FLAGS | os.O_CREAT, 0o600, dir_fd=target.dir_fd)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", target.name)
            target.inode = (info.st_dev, info.st_ino)
            session_id = session_id_of(target.name)
            if session_id is None:
                return info.st_size
            return repair_torn_tail(target.dir_fd, session_id, fd, info.st_size, None)
        finally:
            os.close(fd)
