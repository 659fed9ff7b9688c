"""Who is on the other end of a loopback TCP connection: the kernel's socket table says.

A Unix socket carries its peer's credentials (``SO_PEERCRED``); TCP does not, even on loopback.
The kernel still knows which uid owns the other end, and tells any process that asks through
``NETLINK_SOCK_DIAG`` (what ``ss -e`` reads): one exact lookup of the peer's socket by its four
addresses. When the kernel cannot say (another network namespace, a peer already gone, a kernel
without ``inet_diag``), the answer is :class:`PeerUnknown` and the caller refuses: fail closed.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from typing import Final

from gz_ia.collector.errors import CollectorError

__all__ = ["PeerUnknown", "tcp_peer_uid"]

_NETLINK_SOCK_DIAG: Final = 4
_SOCK_DIAG_BY_FAMILY: Final = 20
_NLM_F_REQUEST: Final = 0x1
_NLMSG_ERROR: Final = 0x2
_NO_COOKIE: Final = 0xFFFFFFFF
_ALL_STATES: Final = 0xFFFFFFFF
_HEADER: Final = struct.Struct("=IHHII")  # struct nlmsghdr
_REQUEST: Final = struct.Struct("=BBBBI")  # struct inet_diag_req_v2 up to its sockid
_PORTS: Final = struct.Struct("!HH")  # inet_diag_sockid: sport, dport (network order)
_TAIL: Final = struct.Struct("=III")  # inet_diag_sockid: if, cookie[2]
_UID_OFFSET: Final = 4 + 48 + 12
"""In struct inet_diag_msg: family, state, timer, retrans; the 48-byte sockid; expires, rqueue,
wqueue; then uid."""


class PeerUnknown(CollectorError, PermissionError):
    """The kernel could not say which uid holds the other end of a connection."""


def _address(family: int, host: str) -> bytes:
    """An address as ``inet_diag_sockid`` holds it: 16 bytes, an IPv4 address in the first four."""
    packed = ipaddress.ip_address(host.split("%", 1)[0]).packed
    return packed.ljust(16, b"\0") if family == socket.AF_INET else packed


def tcp_peer_uid(sock: socket.socket) -> int:
    """The uid that owns the other end of the connected TCP socket ``sock``, on this host.

    Raises:
        PeerUnknown: the peer's socket is not in this network namespace's table (the connection
            came from elsewhere, or is already gone), or the table could not be read.
    """
    family = sock.family
    if family not in (socket.AF_INET, socket.AF_INET6):
        raise PeerUnknown(f"not a TCP socket (family {family})")
    try:
        ours = sock.getsockname()
        theirs = sock.getpeername()
    except OSError as exc:
        raise PeerUnknown(f"the connection is gone: {exc}") from None
    # Look up the peer's own socket: its source is their address, its destination ours.
    sockid = (
        _PORTS.pack(theirs[1], ours[1])
        + _address(family, theirs[0])
        + _address(family, ours[0])
        + _TAIL.pack(0, _NO_COOKIE, _NO_COOKIE)
    )
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES) + sockid
    message = _HEADER.pack(_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0) + body
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(1.0)
            diag.sendto(message, (0, 0))
            reply = diag.recv(8192)
    except OSError as exc:
        raise PeerUnknown(f"the kernel's socket table cannot be read: {exc}") from None
    if len(reply) < _HEADER.size:
        raise PeerUnknown("empty answer from the kernel's socket table")
    _length, kind, _flags, _seq, _pid = _HEADER.unpack_from(reply)
    if kind == _NLMSG_ERROR:
        (error,) = struct.unpack_from("=i", reply, _HEADER.size)
        reason = os.strerror(-error) if error else "no such socket"
        raise PeerUnknown(f"the peer's socket is not in this host's table ({reason})")
    if kind != _SOCK_DIAG_BY_FAMILY or len(reply) < _HEADER.size + _UID_OFFSET + 4:
        raise PeerUnknown(f"unexpected answer from the kernel's socket table (type {kind})")
    (uid,) = struct.unpack_from("=I", reply, _HEADER.size + _UID_OFFSET)
    return int(uid)
