"""A share's connection from its front: the Peer frame first, then Route + Batch pairs.

The front opens one connection to each share per client and says first who that client is (a
:class:`.wire.Peer` frame: the share's own peer credentials name the front). After the hello, which
every share answers, each batch comes after a Route frame naming this share: the batch is decoded
whole, as in a collector of one process, and an event of a session of another share is rejected
``misrouted`` (the process's :class:`~..service.duties.Role` says which sessions it serves).
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec

from gz_ia.client.protocol import PROTOCOL_VERSION, RejectReason, Route, Welcome
from gz_ia.collector.ingest.validation import decode_batch
from gz_ia.collector.service.connection import Connection, ConnectionHost

from .wire import peer_decoder

__all__ = ["ShareConnection"]


class ShareConnection(Connection):
    """One client's connection to share ``share`` of ``shares``, through the front."""

    def __init__(self, collector: ConnectionHost, *, share: int, shares: int) -> None:
        super().__init__(collector)
        self.share = share
        self.shares = shares
        self._peer_first = False
        """Only the front connects here: its first frame names the client (or is its own query)."""
        self._routed = False
        """A Route frame naming this share came: the next frame is a batch of its sessions."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._peer_first = self.uid == self.collector.uid

    def handle_frame(self, body: bytes) -> None:
        if self._peer_first:
            self._peer_first = False
            with contextlib.suppress(msgspec.DecodeError):  # else the front's own query
                peer = peer_decoder.decode(body)
                self.uid, self.pid = peer.uid, peer.pid
                return
        if self._routed:
            self._routed = False
            try:
                decoded = decode_batch(body)
            except msgspec.DecodeError as exc:
                # Fatal: the front passes this frame's reply on as the batch's verdicts.
                self.refuse(RejectReason.MALFORMED, f"a route frame must be followed by a batch: {exc}")
                return
            self.handle_batch(decoded, len(body))
            return
        super().handle_frame(body)

    def handle_route(self, route: Route) -> None:
        if self.root is None:
            self.refuse(RejectReason.HANDSHAKE_REQUIRED, "send a hello frame before any route")
        elif route.share != self.share:
            self.refuse(RejectReason.MISROUTED, f"a batch routed to share {route.share} reached share {self.share}")
        else:
            self._routed = True

    def welcome(self) -> Welcome:
        return Welcome(proto=PROTOCOL_VERSION, version=self.collector.version, shares=self.shares)
