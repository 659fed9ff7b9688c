"""The front's connection to one share on behalf of one client: bytes out, replies queued in order."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Final, Protocol

import msgspec

from gz_ia.client.protocol import (
    MAX_FRAME,
    Error,
    FrameReader,
    FrameTooLarge,
    Report,
    Verdicts,
    Welcome,
    collector_message_decoder,
)

__all__ = ["CollectorMessage", "LinkOwner", "ShareLink"]

log = logging.getLogger("gz_ia.collector")

_SHARE_BUFFER: Final = 4 << 20
"""Bytes buffered towards a share before the front stops reading the client (the share's own
backpressure shows here first)."""

CollectorMessage = Welcome | Verdicts | Error | Report


class LinkOwner(Protocol):
    """What a link tells the client connection it works for (:class:`.front_client.FrontClient` is one)."""

    def merge(self) -> None:
        """A reply came, or the link was lost: pass on what can be passed on."""
        ...

    def update_reading(self) -> None:
        """The link's write buffer filled or drained: pause or resume reading the client."""
        ...


class ShareLink(asyncio.Protocol):
    """The front's connection to one share on behalf of one client: bytes out, replies queued."""

    def __init__(self, client: LinkOwner, share: int) -> None:
        self.client = client
        self.share = share
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(MAX_FRAME)
        self.replies: deque[CollectorMessage] = deque()
        """Replies not yet merged, in the order the share sent them."""
        self.lost = False
        self.full = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        transport.set_write_buffer_limits(high=_SHARE_BUFFER)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        try:
            for body in self.reader.feed(data):
                self.replies.append(collector_message_decoder.decode(body))
        except (FrameTooLarge, msgspec.DecodeError) as exc:  # pragma: no cover - a bug in a share
            log.error("share %d sent a frame that cannot be read (%s); closing its connection", self.share, exc)
            assert self.transport is not None
            self.transport.close()
            return
        self.client.merge()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.client.merge()

    def pause_writing(self) -> None:
        self.full = True
        self.client.update_reading()

    def resume_writing(self) -> None:
        self.full = False
        self.client.update_reading()
