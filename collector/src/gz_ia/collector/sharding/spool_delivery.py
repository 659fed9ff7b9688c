"""Spool adoption at the front of a sharded collector: a dead client's events sent through the front.

The front holds no sessions, so it adopts a spool (see :mod:`..service.adoption`, which decides what it is
entitled to and what to quarantine) as a client of its own socket: it sends each dead producer's
events, under that producer's id and numbers, one connection per root, in the order of their
numbers, and deletes the spool only once every batch has its verdicts. It routes, as the thin
client does: the records are cut into runs of one share, each sent after a Route frame naming it.
The front's handshake takes the root's lock, as for any client.
"""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client import trust
from gz_ia.client.protocol import (
    HEADER_SIZE,
    PROTOCOL_VERSION,
    Error,
    FrameReader,
    FrameTooLarge,
    Hello,
    Owners,
    RejectReason,
    Report,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
)
from gz_ia.client.spool import SpoolRecord
from gz_ia.collector.service.adoption import Adoption, NotNow, Unadoptable, adopt_each, batch_bodies, entitled

from .wire import route_frame

__all__ = ["adopt_spools_through"]

_RETRIED: Final = frozenset(
    {RejectReason.ROOT_LOCKED, RejectReason.WRITE_FAILED, RejectReason.SHUTTING_DOWN, RejectReason.INTERNAL_ERROR}
)
"""Refusals of a spooled batch that may not happen next time; any other is for good."""


def adopt_spools_through(
    socket_path: Path, directory: Path, *, uid: int, sockets: list[str], shares: int, timeout: float = 60.0
) -> Adoption:
    """Deliver every orphaned spool under ``directory`` this collector is entitled to, as a client of
    the collector of ``shares`` shares on ``socket_path`` (one of ``sockets``, its own).

    Runs in a thread: the front's loop serves the connection.
    """
    owners = Owners(shares)

    def deliver(producer: str, root_path: str, records: list[SpoolRecord]) -> int:
        frames = [
            route_frame(share) + len(body).to_bytes(HEADER_SIZE, "big") + body
            for share, run in _cut_by_share(records, owners)
            for body in batch_bodies(run)
        ]
        try:
            return _send_spool(socket_path, producer, root_path, frames, timeout)
        except (OSError, FrameTooLarge, msgspec.DecodeError) as exc:
            raise NotNow(str(exc)) from exc

    return adopt_each(directory, uid, entitled(sockets), deliver)


def _cut_by_share(records: list[SpoolRecord], owners: Owners) -> list[tuple[int, list[SpoolRecord]]]:
    """``records``, in order, cut where the share of their session changes."""
    runs: list[tuple[int, list[SpoolRecord]]] = []
    for record in records:
        share = owners[record.session_id]
        if runs and runs[-1][0] == share:
            runs[-1][1].append(record)
        else:
            runs.append((share, [record]))
    return runs


def _send_spool(socket_path: Path, producer: str, root: str, frames: list[bytes], timeout: float) -> int:
    """Send one root's spooled batches, each after its Route frame; return how many events were
    answered (written, duplicate or rejected).

    The batches follow the collector's welcome: a refused handshake closes the connection, and a
    batch sent meanwhile would fail with EPIPE before the refusal that says why could be read.

    Raises:
        NotNow: the collector refused them for now (another collector serves the root, a failed write).
        Unadoptable: the collector refused them for a reason that will not change.
        OSError: the connection failed.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        trust.connect(sock, str(socket_path))
        replies = _Replies(sock)
        sock.sendall(encode_frame(Hello(proto=PROTOCOL_VERSION, producer=producer, pid=0, root=root, routes=True)))
        replies.next()  # the welcome
        answered = 0
        for frame in frames:
            try:
                sock.sendall(frame)
            except OSError:
                replies.refusal()  # the reason the collector closed the connection, if it gave one
                raise
        for _ in frames:
            message = replies.next()
            if isinstance(message, Verdicts):
                answered += message.count
    return answered


class _Replies:
    """The collector's replies on an adoption connection, one at a time; an Error raises."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = FrameReader()
        self.pending: list[bytes] = []

    def next(self) -> Welcome | Verdicts | Report:
        while not self.pending:
            data = self.sock.recv(1 << 16)
            if not data:
                raise NotNow("the collector closed the connection")
            self.pending += self.reader.feed(data)
        message = collector_message_decoder.decode(self.pending.pop(0))
        if isinstance(message, Error):
            refusal = f"{message.reason}: {message.detail}"
            raise NotNow(refusal) if message.reason in _RETRIED else Unadoptable(refusal)
        return message

    def refusal(self) -> None:
        """After a failed send: raise the collector's refusal if one came (replies before it are skipped)."""
        with contextlib.suppress(OSError, NotNow):
            while True:
                self.next()
