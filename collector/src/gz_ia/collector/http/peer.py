"""Who is on the other end of a loopback TCP connection, and who holds a listening port: the kernel's
socket table says.

A Unix socket carries its peer's credentials (``SO_PEERCRED``); TCP does not, even on loopback.
The kernel still knows which uid owns each socket, and tells any process that asks through
``NETLINK_SOCK_DIAG`` (what ``ss -e`` reads). An answer names a real owner only while the socket is
held open by a process: once its owner closed it, what is left (``TIME_WAIT``, or an orphan still
sending its last bytes) reports uid 0 and inode 0, whoever it was. So a connection is judged only
while its peer's socket is alive (a non-zero inode), and when the kernel cannot say (another network
namespace, a peer already gone, a kernel without ``inet_diag``) the answer is :class:`PeerUnknown`
and the caller refuses: fail closed.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from typing import Final

from gz_ia.collector.errors import CollectorError

__all__ = ["PeerUnknown", "listener_uid", "tcp_peer_uid"]

_NETLINK_SOCK_DIAG: Final = 4
_SOCK_DIAG_BY_FAMILY: Final = 20
_NLM_F_REQUEST: Final = 0x1
_NLM_F_DUMP: Final = 0x300
_NLMSG_ERROR: Final = 0x2
_NLMSG_DONE: Final = 0x3
_NO_COOKIE: Final = 0xFFFFFFFF
_ALL_STATES: Final = 0xFFFFFFFF
_LISTEN: Final = 10
"""``TCP_LISTEN`` in the kernel's numbering of TCP states."""
_HEADER: Final = struct.Struct("=IHHII")  # struct nlmsghdr
_REQUEST: Final = struct.Struct("=BBBBI")  # struct inet_diag_req_v2 up to its sockid
_PORTS: Final = struct.Struct("!HH")  # inet_diag_sockid: sport, dport (network order)
_TAIL: Final = struct.Struct("=III")  # inet_diag_sockid: if, cookie[2]
_STATE_OFFSET: Final = 1
"""In struct inet_diag_msg: family, then state."""
_UID_OFFSET: Final = 4 + 48 + 12
"""In struct inet_diag_msg: family, state, timer, retrans; the 48-byte sockid; expires, rqueue,
wqueue; then uid, then inode."""
_MESSAGE_SIZE: Final = _UID_OFFSET + 8


class PeerUnknown(CollectorError, PermissionError):
    """The kernel could not say which uid holds the other end of a connection, or a port."""


def _address(family: int, host: str) -> bytes:
    """An address as ``inet_diag_sockid`` holds it: 16 bytes, an IPv4 address in the first four."""
    packed = ipaddress.ip_address(host.split("%", 1)[0]).packed
    return packed.ljust(16, b"\0") if family == socket.AF_INET else packed


def _ask(message: bytes) -> list[bytes]:
    """Send one request to the kernel's socket table; return the ``inet_diag_msg`` of each answer.

    Raises:
        PeerUnknown: the table could not be read, or it answered with an error.
    """
    answers: list[bytes] = []
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(1.0)
            diag.sendto(message, (0, 0))
            while True:
                reply = diag.recv(65536)
                offset = 0
                while offset + _HEADER.size <= len(reply):
                    length, kind, _flags, _seq, _pid = _HEADER.unpack_from(reply, offset)
                    if kind == _NLMSG_DONE:
                        return answers
                    if kind == _NLMSG_ERROR:
                        (error,) = struct.unpack_from("=i", reply, offset + _HEADER.size)
                        reason = os.strerror(-error) if error else "no such socket"
                        raise PeerUnknown(f"the socket is not in this host's table ({reason})")
                    body = reply[offset + _HEADER.size : offset + length]
                    if kind != _SOCK_DIAG_BY_FAMILY or len(body) < _MESSAGE_SIZE:
                        raise PeerUnknown(f"unexpected answer from the kernel's socket table (type {kind})")
                    answers.append(body)
                    offset += (length + 3) & ~3
                if not _is_dump(message):
                    return answers
    except OSError as exc:
        raise PeerUnknown(f"the kernel's socket table cannot be read: {exc}") from None


def _is_dump(message: bytes) -> bool:
    """Whether a request asks for every matching socket (answered in parts, ended by ``NLMSG_DONE``)."""
    return bool(_HEADER.unpack_from(message)[2] & _NLM_F_DUMP)


def _request(family: int, states: int, sockid: bytes, *, dump: bool) -> bytes:
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, states) + sockid
    flags = _NLM_F_REQUEST | (_NLM_F_DUMP if dump else 0)
    return _HEADER.pack(_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY, flags, 1, 0) + body


def _owner(answer: bytes) -> tuple[int, int, int]:
    """``(state, uid, inode)`` of one ``inet_diag_msg``."""
    uid, inode = struct.unpack_from("=II", answer, _UID_OFFSET)
    return answer[_STATE_OFFSET], int(uid), int(inode)


def tcp_peer_uid(sock: socket.socket) -> int:
    """The uid that owns the other end of the connected TCP socket ``sock``, on this host.

    Only a peer socket that a process still holds names its owner: one already closed (the request
    sent whole and the socket closed before this lookup) is refused, since what the kernel keeps
    of it reports uid 0 whoever its owner was.

    Raises:
        PeerUnknown: the peer's socket is not in this network namespace's table (the connection
            came from elsewhere), no process holds it any more, or the table could not be read.
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
    answers = _ask(_request(family, _ALL_STATES, sockid, dump=False))
    if not answers:
        raise PeerUnknown("empty answer from the kernel's socket table")
    _state, uid, inode = _owner(answers[0])
    if inode == 0:
        raise PeerUnknown("the peer's socket is already closed: no process holds it to be judged")
    return uid


def listener_uid(host: str, port: int) -> int:
    """The uid that owns the socket listening on ``host:port`` (or on the wildcard address at ``port``).

    Every gz-ia program asks this before it sends to the collector's HTTP port: a port is first come,
    first served among a machine's users.

    Raises:
        PeerUnknown: nothing listens there, or the table could not be read.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    wanted = _address(family, host)
    wildcard = bytes(16)
    sockid = _PORTS.pack(0, 0) + bytes(32) + _TAIL.pack(0, _NO_COOKIE, _NO_COOKIE)
    for answer in _ask(_request(family, 1 << _LISTEN, sockid, dump=True)):
        sport = struct.unpack_from("!H", answer, 4)[0]
        source = answer[8:24]
        if sport == port and source in (wanted, wildcard):
            return _owner(answer)[1]
    raise PeerUnknown(f"nothing listens on {host}:{port}")
