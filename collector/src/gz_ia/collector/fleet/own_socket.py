"""The hub's client of its own collector's socket: one connection per producer, batches in, verdicts back.

The hub writes what it consumes exactly as an agent's events are written (validation, the stage
protocol, redaction, the group commit and its durability), so a hub's root is an ordinary root. Each
machine's root is written as its own producer (:func:`.naming.producer_of`) with the event's stored
``seq`` as the producer's number: the collector's watermark, kept in every line's ``delivery`` and
read back after any restart, drops a redelivery it already holds (verdict ``-1``).
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from pathlib import Path

import msgspec

from gz_ia.client.protocol import (
    PROTOCOL_VERSION,
    Batch,
    Error,
    FrameReader,
    Hello,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
)
from gz_ia.collector.errors import CollectorError

__all__ = ["OwnSocket", "SocketLost"]


class SocketLost(CollectorError):
    """The collector closed the connection or refused a frame; the batch is not known to be written."""


class OwnSocket:
    """One connection to the collector's socket as ``producer``, writing into ``root``."""

    def __init__(self, socket_path: str, root: Path, producer: str) -> None:
        self.socket_path = socket_path
        self.root = root
        self.producer = producer
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._frames = FrameReader()
        self._waiting: deque[asyncio.Future[Verdicts]] = deque()
        self._pump: asyncio.Task[None] | None = None
        self._opening = asyncio.Lock()

    async def _open(self) -> None:
        reader, writer = await asyncio.open_unix_connection(self.socket_path)
        hello = Hello(
            proto=PROTOCOL_VERSION,
            producer=self.producer,
            pid=os.getpid(),
            root=str(self.root),
            program="gz-ia-collector fleet hub",
        )
        writer.write(encode_frame(hello))
        await writer.drain()
        self._reader, self._writer, self._frames = reader, writer, FrameReader()
        answer = await self._next()
        if not isinstance(answer, Welcome):
            self.close()
            raise SocketLost(f"the collector refused the hub's connection: {answer}")
        self._pump = asyncio.get_running_loop().create_task(self._read_verdicts())

    async def _next(self) -> object:
        assert self._reader is not None
        while True:
            data = await self._reader.read(1 << 16)
            if not data:
                raise SocketLost("the collector closed the hub's connection")
            bodies = self._frames.feed(data)
            if bodies:
                if len(bodies) > 1:  # only the Welcome comes before a batch is sent
                    raise SocketLost("unexpected frames after the welcome")
                return collector_message_decoder.decode(bodies[0])

    async def _read_verdicts(self) -> None:
        assert self._reader is not None
        try:
            while True:
                data = await self._reader.read(1 << 16)
                if not data:
                    raise SocketLost("the collector closed the hub's connection")
                for body in self._frames.feed(data):
                    message = collector_message_decoder.decode(body)
                    if isinstance(message, Verdicts):
                        self._waiting.popleft().set_result(message)
                    elif isinstance(message, Error) and message.fatal:
                        raise SocketLost(f"the collector refused a batch: {message.reason}: {message.detail}")
        except (SocketLost, OSError, msgspec.DecodeError, IndexError) as exc:
            lost = exc if isinstance(exc, SocketLost) else SocketLost(str(exc))
            while self._waiting:
                future = self._waiting.popleft()
                if not future.done():
                    future.set_exception(lost)
            self.close()

    async def write(self, first: int, events: list[bytes]) -> Verdicts:
        """Send events numbered ``first``, ``first + 1``... (MessagePack bodies) and return their verdicts,
        which come once they are written (and synced, with ``durability = "fsync"``).

        Raises:
            SocketLost: the connection ended before the verdicts came.
        """
        async with self._opening:
            if self._writer is None or self._writer.is_closing():
                await self._open()
        assert self._writer is not None
        future: asyncio.Future[Verdicts] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        self._writer.write(encode_frame(Batch(first=first, events=[msgspec.Raw(e) for e in events], verdicts=True)))
        await self._writer.drain()
        return await future

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._pump is not None and self._pump is not asyncio.current_task():
            self._pump.cancel()
        self._pump = None
