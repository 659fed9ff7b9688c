"""Whether a socket is the user's collector: its directory before connecting, its peer before sending.

Without ``XDG_RUNTIME_DIR`` the default socket is ``/tmp/gz-ia-<uid>/collector.sock``, and anyone may
create that directory first and listen in it. Every path that talks to a collector (the library's
sender, ``gz-ia session log`` and the hooks, ``gz-ia status`` and ``gc``) connects through
:func:`connect`, so none of them sends a byte, the Hello included, to a socket that is not the user's:

- the socket's directory must be a real directory of a trusted uid that nobody else may write in
  (sticky directories such as ``/tmp`` aside: there nobody removes another's socket). Read and
  search bits are allowed: a collector shared with other users (its ``allow_uids``) needs them;
- the peer (``SO_PEERCRED``) must be a trusted uid.

The trusted uids are the process's own, root's, and those listed in ``GZ_IA_TRUSTED_UIDS``. Root
is trusted because it can read every file and process of the user anyway: refusing it protects
nothing, and it keeps a collector run by root for several users (with ``allow_uids``) usable.

A refusal raises :class:`UntrustedSocket`, an ``OSError``: every caller already treats a failed
connect as "no collector answers" and keeps the event (in memory, then the spool).

Only :mod:`os`, :mod:`sys` and :mod:`_socket` are used: the one-shot commands import this module.
"""

from __future__ import annotations

import os
import sys

from .env import GZ_IA_SOCKET, GZ_IA_TRUSTED_UIDS, trusted_uids
from .errors import GzIaError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket
    from typing import Final

__all__ = ["WHAT_TO_DO", "UntrustedSocket", "check_directory", "check_peer", "connect", "trusted"]

WHAT_TO_DO: Final = (
    "set XDG_RUNTIME_DIR (a login session's private directory), or set "
    f"{GZ_IA_SOCKET} (or the collector's --socket) to a path in a directory of your own with mode 0700"
)
"""What a user does about a socket directory that is not theirs (the collector's refusal says it too)."""

_STICKY: Final = 0o1000
_DIRECTORY: Final = 0o040000
_FORMAT: Final = 0o170000


class UntrustedSocket(GzIaError, PermissionError):
    """The socket's directory or its peer is not the user's: nothing was sent to it."""


def trusted() -> frozenset[int]:
    """The uids a client talks to: its own (real and effective), root, and ``$GZ_IA_TRUSTED_UIDS``."""
    return frozenset({os.getuid(), os.geteuid(), 0}) | trusted_uids()


def check_directory(path: str) -> None:
    """Refuse the socket ``path`` when its directory is someone else's or writable by others.

    A directory that cannot be looked at (missing, not searchable) passes: the connect that follows
    fails with the error that says so.

    Raises:
        UntrustedSocket: why, and what to do.
    """
    directory = os.path.dirname(path) or "."
    try:
        info = os.lstat(directory)
    except OSError:
        return
    mode = info.st_mode & 0o7777
    if info.st_mode & _FORMAT != _DIRECTORY:
        raise UntrustedSocket(
            f"the socket's directory {directory} is a symlink or not a directory; not connecting: {WHAT_TO_DO}"
        )
    if info.st_uid not in trusted():
        raise UntrustedSocket(
            f"the socket's directory {directory} belongs to uid {info.st_uid} (mode {mode:o}), not to you "
            f"(uid {os.getuid()}): someone else may have made it to receive your events, so nothing was "
            f"sent; {WHAT_TO_DO}"
        )
    if mode & 0o022 and not mode & _STICKY:
        raise UntrustedSocket(
            f"the socket's directory {directory} is writable by others (mode {mode:o}), who could replace the "
            f"socket, so nothing was sent; make it 0700, or {WHAT_TO_DO}"
        )


def check_peer(sock: _socket.socket, path: str) -> None:
    """Refuse a connected socket whose peer (``SO_PEERCRED``) is not a trusted uid.

    Raises:
        UntrustedSocket: who the peer is, and what to do.
    """
    import _socket

    data = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
    pid = int.from_bytes(data[0:4], sys.byteorder, signed=True)
    uid = int.from_bytes(data[4:8], sys.byteorder)
    if uid not in trusted():
        raise UntrustedSocket(
            f"{path} is served by uid {uid} (pid {pid}), neither you (uid {os.getuid()}) nor a uid of "
            f"{GZ_IA_TRUSTED_UIDS}: nothing was sent to it. If it is a collector shared with you on purpose, "
            f"add {uid} to {GZ_IA_TRUSTED_UIDS}; otherwise {WHAT_TO_DO}"
        )


def connect(sock: _socket.socket, path: str) -> None:
    """``sock.connect(path)``, only to a socket in a trusted directory and served by a trusted uid.

    The directory check gives the clearer message; the peer check is the one no race gets around (a
    socket swapped between the two checks still has its listener's credentials).

    Raises:
        UntrustedSocket: the directory or the peer is not trusted (the socket is left connected:
            the caller closes it, as after any failed connect).
        OSError: the connect failed.
    """
    check_directory(path)
    sock.connect(path)
    check_peer(sock, path)
