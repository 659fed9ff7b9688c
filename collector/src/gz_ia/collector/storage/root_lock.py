"""One writer per session root: the lock a collector holds on each root it serves.

Two collectors writing one root would each count ``seq`` from what they last read, and both write
the same numbers. So a collector writes a root only while it holds its lock::

    <root>/state/collector.lock   flock LOCK_EX by the collector that serves the root (a single
                                  process, or the front of a sharded collector), naming it in JSON
    <root>/state/writers.lock     flock LOCK_SH by each share that writes the root for that front

A flock belongs to the open file, so the kernel drops it when its holder exits, SIGKILL included,
and a lock never outlives its collector. A front and its shares are one collector: the front takes
the root, and a share writes it only once it sees the front holding it (:meth:`RootLocks.take`).
The shares of a front that was killed drain what they had received before they exit; their shared
locks keep the next collector out of the root until they are gone. Reading never takes a lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Final

from gz_ia.collector.errors import CollectorError

from .names import STATE_DIR
from .roots import open_root

__all__ = ["COLLECTOR_LOCK", "WRITERS_LOCK", "RootLocked", "RootLocks"]

log = logging.getLogger("gz_ia.collector")

COLLECTOR_LOCK: Final = "collector.lock"
WRITERS_LOCK: Final = "writers.lock"
_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class RootLocked(CollectorError):
    """Another collector serves the root: this one must not write it while that one runs.

    Attributes:
        path: the root.
        holder: who holds it, as far as the lock file says (``pid 123, socket /run/…``).
    """

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"root {str(path)!r} is written by another collector ({holder}); not writing it meanwhile")
        self.path = path
        self.holder = holder


class _Held:
    """A lock this process holds: its file's descriptor and identity (a removed root's is stale)."""

    __slots__ = ("fd", "identity")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        info = os.fstat(fd)
        self.identity = (info.st_dev, info.st_ino)


class RootLocks:
    """The roots this process may write, each held until the process exits.

    Args:
        pid: this collector's pid, written into the locks it takes.
        sockets: the sockets this collector listens on, written into the locks it takes.
        front: in a share of a sharded collector, the front's pid: the share takes a root only
            when that front holds it. None in a single collector or a front.
    """

    def __init__(self, *, pid: int, sockets: list[str], front: int | None = None) -> None:
        self.pid = pid
        self.sockets = sockets
        self.front = front
        self._held: dict[Path, _Held] = {}
        self._refusals_logged: set[tuple[Path, str]] = set()

    def holds(self, path: Path) -> bool:
        """Whether this process holds ``path``'s lock, and that lock is still the root's (not removed)."""
        held = self._held.get(path)
        if held is None:
            return False
        name = COLLECTOR_LOCK if self.front is None else WRITERS_LOCK
        try:
            info = os.stat(path / STATE_DIR / name, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return True  # cannot tell now: letting go could hand the root to another collector
            info = None
        if info is not None and (info.st_dev, info.st_ino) == held.identity:
            return True
        # The root was removed (and maybe made again): the lock held is on a file that is gone.
        del self._held[path]
        os.close(held.fd)
        return False

    def take(self, path: Path, owner: int) -> None:
        """Make sure this process may write the root ``path`` (owned by ``owner``): held, or taken now.

        Raises:
            RootLocked: another collector serves it (or, in a share, the front does not).
            LayoutError: the root is unusable (as :func:`.roots.open_root` says).
            OSError: the lock file cannot be made or locked.
        """
        if self.holds(path):
            return
        with open_root(path, owner=owner) as dirs:
            assert dirs.state_fd is not None  # open_root creates state/ for a writer
            if self.front is None:
                fd = self._take_collector_lock(path, dirs.state_fd)
            else:
                fd = self._take_writers_lock(path, dirs.state_fd, self.front)
        self._held[path] = _Held(fd)

    def _take_collector_lock(self, path: Path, state_fd: int) -> int:
        fd = os.open(COLLECTOR_LOCK, _FLAGS, 0o600, dir_fd=state_fd)
        try:
            if not _try_flock(fd, fcntl.LOCK_EX):
                raise RootLocked(path, _holder(fd))
            writers = os.open(WRITERS_LOCK, _FLAGS, 0o600, dir_fd=state_fd)
            try:
                if not _try_flock(writers, fcntl.LOCK_EX):
                    raise RootLocked(path, "the shares of a collector that stopped, still writing what they had")
            finally:
                os.close(writers)  # its lock goes with it: only this process's shares take it from now on
            identity = json.dumps({"pid": self.pid, "sockets": self.sockets}).encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, identity + b"\n", 0)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _take_writers_lock(self, path: Path, state_fd: int, front: int) -> int:
        try:
            fd = os.open(COLLECTOR_LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=state_fd)
        except FileNotFoundError:
            raise RootLocked(path, "nobody: this share's front has not taken it") from None
        try:
            if _try_flock(fd, fcntl.LOCK_EX):
                raise RootLocked(path, "nobody: this share's front has not taken it")
            if _holder_pid(fd) != front:
                raise RootLocked(path, _holder(fd))
        finally:
            os.close(fd)
        writers = os.open(WRITERS_LOCK, _FLAGS, 0o600, dir_fd=state_fd)
        try:
            if not _try_flock(writers, fcntl.LOCK_SH):  # pragma: no cover - only its own front tests it
                raise RootLocked(path, "its front, which is checking it")
        except BaseException:
            os.close(writers)
            raise
        return writers

    def refused(self, exc: RootLocked) -> None:
        """Say loudly, once per root and holder, that a root is left to the collector holding it."""
        key = (exc.path, exc.holder)
        if key not in self._refusals_logged:
            self._refusals_logged.add(key)
            log.error("%s: its clients are refused with root_locked and keep their events", exc)

    def release(self) -> None:
        """Let go of every root (at exit; the kernel would anyway)."""
        for held in self._held.values():
            with contextlib.suppress(OSError):
                os.close(held.fd)
        self._held.clear()


def _try_flock(fd: int, operation: int) -> bool:
    """Take a flock without waiting; False when someone else holds a conflicting one."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def _identity(fd: int) -> dict[str, object]:
    try:
        data = json.loads(os.pread(fd, 4096, 0))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _holder_pid(fd: int) -> object:
    return _identity(fd).get("pid")


def _holder(fd: int) -> str:
    """Who holds a collector lock, from what it wrote into it."""
    identity = _identity(fd)
    pid = identity.get("pid")
    sockets = identity.get("sockets")
    if pid is None:
        return "a collector that did not say which"
    where = ", ".join(map(str, sockets)) if isinstance(sockets, list) and sockets else "no socket named"
    return f"pid {pid}, socket {where}"
