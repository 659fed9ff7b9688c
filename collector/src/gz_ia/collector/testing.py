"""An in-process collector on the test's own event loop, for unit tests of ingest and connections.

A test that starts the daemon as a process sees only what comes out of its socket; one that needs
the collector's objects at hand (its ingest, its connections, its writer) runs it here instead::

    async with running_collector(tmp_path) as running:
        peer = await running.connect()                       # a raw protocol client, hello said
        await peer.send_batch(1, [event])
        assert isinstance(await peer.next(), Verdicts)
        assert running.collector.connections

The collector is the real :class:`~.service.server.Collector` serving a real Unix socket in
``directory``, with a session root (``.harness``), a spool directory and a state directory of its
own there: nothing of the user's defaults is touched, and no metrics port is opened. Leaving the
block stops it as SIGTERM would (drain, then close).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gz_ia.client.protocol import (
    PROTOCOL_VERSION,
    Batch,
    CollectorMessage,
    FrameReader,
    Hello,
    Welcome,
    collector_message_decoder,
    encode_frame,
)

from .config import CollectorConfig
from .metrics import Metrics
from .service.server import Collector

__all__ = ["ProtocolPeer", "RunningCollector", "running_collector"]

_REPLY_TIMEOUT = 10.0
"""Seconds a peer waits for a reply before the test fails (a stall, not a slow machine)."""


class ProtocolPeer:
    """One client connection speaking the raw protocol from the test's event loop.

    A plain socket: after the collector closes it, what the collector sent before is still read,
    as the real client reads it.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._frames = FrameReader()
        self._received: list[CollectorMessage] = []

    async def send(self, message: Any) -> None:
        """Send one message as a frame; a connection the collector has closed takes nothing."""
        await self.send_bytes(encode_frame(message))

    async def send_bytes(self, data: bytes) -> None:
        """Send ``data`` as it is: frames made by hand (a bad body, a header alone)."""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def send_batch(self, first: int, events: Sequence[bytes | msgspec.Raw], *, verdicts: bool = True) -> None:
        """Send one batch of encoded events, numbered from ``first``."""
        raw = [event if isinstance(event, msgspec.Raw) else msgspec.Raw(event) for event in events]
        await self.send(Batch(first=first, events=raw, verdicts=verdicts))

    async def next(self) -> CollectorMessage | None:
        """The next reply, or None once the collector has closed the connection."""
        loop = asyncio.get_running_loop()
        while not self._received:
            try:
                data = await asyncio.wait_for(loop.sock_recv(self.sock, 1 << 16), _REPLY_TIMEOUT)
            except ConnectionResetError:  # closed with our last frame unread
                data = b""
            if not data:
                return None
            self._received += [collector_message_decoder.decode(body) for body in self._frames.feed(data)]
        return self._received.pop(0)

    async def rest(self) -> list[CollectorMessage]:
        """Every reply until the collector closes the connection."""
        replies = []
        while (message := await self.next()) is not None:
            replies.append(message)
        return replies

    def close(self) -> None:
        self.sock.close()


@dataclasses.dataclass
class RunningCollector:
    """A collector serving in this process: its socket, its session root, the object itself."""

    collector: Collector
    socket_path: Path
    root: Path
    """The session root (``.harness``) its clients name in their hello."""
    peers: list[ProtocolPeer] = dataclasses.field(default_factory=list)

    async def open(self) -> ProtocolPeer:
        """A connection that has said nothing yet (to test the handshake itself)."""
        sock = socket.socket(socket.AF_UNIX)
        sock.setblocking(False)
        peer = ProtocolPeer(sock)
        self.peers.append(peer)
        await asyncio.get_running_loop().sock_connect(sock, str(self.socket_path))
        return peer

    async def connect(self, producer: str = "0123456789abcdef", *, root: Path | None = None) -> ProtocolPeer:
        """A connection that has said hello as ``producer`` into ``root`` (by default this root) and
        been welcomed."""
        peer = await self.open()
        await peer.send(Hello(proto=PROTOCOL_VERSION, producer=producer, pid=os.getpid(), root=str(root or self.root)))
        reply = await peer.next()
        if not isinstance(reply, Welcome):
            raise AssertionError(f"the collector did not welcome the peer: {reply!r}")
        return peer


@contextlib.asynccontextmanager
async def running_collector(directory: Path, **settings: Any) -> AsyncIterator[RunningCollector]:
    """Serve a collector on this event loop, in ``directory``, until the block ends.

    ``settings`` are :class:`~.config.CollectorConfig` fields (``durability="fsync"``,
    ``max_backlog_batches=2``, …); the socket, the spool directory and the metrics address are
    this function's. The collector's objects (``running.collector.ingest``, ``.writer``,
    ``.connections``) are the real ones: a test may wrap one of them before it connects.
    """
    from prometheus_client import CollectorRegistry  # the collector's own dependency, imported with it

    directory = Path(directory)
    root = directory / ".harness"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    socket_path = directory / "collector.sock"
    config = CollectorConfig(
        **{"metrics_address": "off", **settings, "socket": str(socket_path), "spool_dir": str(directory / "spool")}
    )
    collector = Collector(
        config,
        Metrics(CollectorRegistry(), version="test", process_metrics=False),
        version="test",
        state_dir=directory / "state",
    )
    running = RunningCollector(collector, socket_path, root)
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(socket_path))
    listening.listen()
    serving = asyncio.create_task(collector.serve([listening]), name="gz-ia-test-collector")
    try:
        await asyncio.sleep(0)  # let it start listening before the test connects
        yield running
    finally:
        for peer in running.peers:
            peer.close()
        collector.stop()
        await serving
        listening.close()
