"""The listening socket: a private directory, one collector per socket, stale files replaced.

The socket's directory is created 0700 and must belong to us; the socket itself is 0600. A lock
file beside the socket (``flock``) makes a second collector on the same path refuse to start with a
clear message, and lets the one that holds it replace a socket file left behind by a dead collector.
Under systemd socket activation the listening socket is inherited instead (see :mod:`.systemd`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import socket
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Final

from gz_ia.client.trust import WHAT_TO_DO
from gz_ia.collector.errors import CollectorError

__all__ = ["LISTEN_BACKLOG", "AlreadyRunning", "Listener", "ListenerError", "peer_credentials", "serve_sockets"]

_PEERCRED: Final = struct.Struct("3i")
LISTEN_BACKLOG: Final = 1024
"""Connections the kernel queues for a listening socket before ``connect`` fails with EAGAIN
(``Backlog=`` in the socket unit, and :class:`Listener`'s own)."""


async def serve_sockets(
    sockets: list[socket.socket], protocol: Callable[[], asyncio.Protocol]
) -> list[asyncio.AbstractServer]:
    """Serve each listening socket (ours or systemd's) on the running loop with ``protocol``.

    The loop calls ``listen`` again on a socket it starts serving, with a backlog of 100 unless
    told: this keeps :data:`LISTEN_BACKLOG`, so a burst of clients waits in the queue instead of
    being refused from the 101st.
    """
    loop = asyncio.get_running_loop()
    servers: list[asyncio.AbstractServer] = []
    for sock in sockets:
        sock.setblocking(False)
        servers.append(await loop.create_unix_server(protocol, sock=sock, backlog=LISTEN_BACKLOG))
    return servers


class ListenerError(CollectorError):
    """The socket cannot be set up; the message says why and what to do."""


class AlreadyRunning(ListenerError):
    """Another collector already serves this socket path."""


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """Return ``(pid, uid, gid)`` of the process at the other end of a Unix socket."""
    data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    pid, uid, gid = _PEERCRED.unpack(data)
    return pid, uid, gid


def prepare_private_dir(directory: Path) -> None:
    """Create ``directory`` 0700 if it is missing; check that an existing one is safe to bind in.

    An existing directory keeps its mode: the socket itself is 0600, so only its owner can
    connect, and the collector must not tighten a directory it was merely pointed at (``/tmp``,
    a home directory). It is safe when nobody else can remove or replace the collector's files in
    it: it is ours and writable by us alone, or it is a sticky directory of ours or root's, such as
    ``/tmp`` (the owner of a sticky directory may remove anything in it).

    Raises:
        ListenerError: it is a symlink or not a directory; someone else's (root's sticky ones
            aside); or writable by others without the sticky bit.
    """
    with contextlib.suppress(FileExistsError):
        directory.mkdir(mode=0o700, parents=True)
    info = directory.lstat()
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ListenerError(f"{directory} must be a real directory, not a symlink or a file")
    if info.st_mode & stat.S_ISVTX and info.st_uid in (0, os.getuid()):
        return  # like /tmp: others may add files, but only we (and the owner, root) remove ours
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.getuid():
        raise ListenerError(
            f"{directory} belongs to uid {info.st_uid} (mode {mode:o}), not to this collector's uid {os.getuid()}: "
            f"someone else may have made it to receive your events; refusing to put the socket there: {WHAT_TO_DO}"
        )
    if info.st_mode & 0o022:
        raise ListenerError(
            f"{directory} is writable by others (mode {mode:o}), who could replace the socket; make it 0700, "
            f"or {WHAT_TO_DO}"
        )


class Listener:
    """A bound, listening Unix socket that we own (and will unlink), guarded by a lock file."""

    def __init__(self, path: Path, *, backlog: int = LISTEN_BACKLOG) -> None:
        self.path = path
        self.backlog = backlog
        self.sock: socket.socket | None = None
        self._lock_fd: int | None = None

    def open(self) -> socket.socket:
        """Take the lock, replace a stale socket file, bind and listen.

        Raises:
            AlreadyRunning: another collector holds the lock or answers on the socket.
            ListenerError: the directory or the path cannot be used.
        """
        prepare_private_dir(self.path.parent)
        lock_path = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise AlreadyRunning(
                f"another gz-ia collector is already running on {self.path} (lock {lock_path} is held)"
            ) from exc
        self._lock_fd = fd
        try:
            self._replace_stale()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old_umask = os.umask(0o177)
            try:
                sock.bind(str(self.path))
            finally:
                os.umask(old_umask)
            os.chmod(self.path, 0o600)
            sock.listen(self.backlog)
        except BaseException:
            self.close()
            raise
        self.sock = sock
        return sock

    def _replace_stale(self) -> None:
        try:
            info = self.path.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(info.st_mode):
            raise ListenerError(f"{self.path} exists and is not a socket; remove it or choose another --socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(0.5)
        try:
            probe.connect(str(self.path))
        except OSError as exc:
            if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                raise ListenerError(f"cannot probe {self.path}: {exc.strerror}") from exc
            self.path.unlink(missing_ok=True)  # a dead collector's socket: ours to replace
            return
        finally:
            probe.close()
        raise AlreadyRunning(f"another gz-ia collector is already answering on {self.path}")

    def close(self) -> None:
        """Close and unlink the socket, then release the lock."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self.path.unlink(missing_ok=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
