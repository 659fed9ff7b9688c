"""A connection's live subscriptions: one pump task each, paced by the subscriber's socket.

The hub (:mod:`gz_ia.collector.live`) never waits for a subscriber; a pump waits for frames and for
the socket to take more (the transport's write buffer below its high-water mark), then sends what
its cursor has, so a subscriber that does not read only falls behind in the ring, where a gap
becomes a ``lagged`` frame instead of memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from gz_ia.client.protocol import Cancel, Ended, Frames, RejectReason, Subscribe, Subscribed
from gz_ia.client.protocol import Error as WireError
from gz_ia.client.protocol import Lagged as WireLagged
from gz_ia.collector.live import Frame, FrameSelection, Hub, InvalidSince, Lagged, Subscription
from gz_ia.collector.live.feed import source_of

__all__ = ["ConnectionSubscriptions", "Send"]

log = logging.getLogger("gz_ia.collector")

_BATCH_FRAMES: Final = 256
_BATCH_BYTES: Final = 512 << 10
"""A frames message stays well under MAX_FRAME (a stored line is at most about 64 KiB)."""

Send = Callable[[Subscribed | Frames | WireLagged | Ended | WireError], None]


class ConnectionSubscriptions:
    """The subscriptions of one connection, ended with it (:meth:`close`)."""

    def __init__(self, hub: Hub, send: Send) -> None:
        self.hub = hub
        self.send = send
        self.writable = asyncio.Event()
        """Clear while the transport's write buffer is above its high-water mark."""
        self.writable.set()
        self._pumps: dict[int, tuple[Subscription, asyncio.Task[None]]] = {}

    def subscribe(self, request: Subscribe) -> None:
        """Start a subscription: answer ``subscribed`` (or a non-fatal error) and pump it."""
        try:
            selection = FrameSelection(request.sessions, subtree=request.subtree, matches=request.matches)
        except ValueError as exc:
            self.send(WireError(reason=RejectReason.INVALID_SUBSCRIPTION, detail=str(exc)))
            return
        source = source_of(request.root)
        try:
            subscription = self.hub.subscribe(
                source,
                since_seq=request.since_seq,
                epoch=request.epoch or None,
                accept=None if selection.everything else selection,
            )
        except InvalidSince as exc:
            self.send(WireError(reason=RejectReason.INVALID_SUBSCRIPTION, detail=str(exc)))
            return
        self.send(
            Subscribed(subscription=subscription.id, epoch=self.hub.epoch, newest_seq=subscription.ring.newest_seq)
        )
        task = asyncio.ensure_future(self._pump(subscription))
        self._pumps[subscription.id] = (subscription, task)

    def cancel(self, request: Cancel) -> None:
        """End one subscription of this connection; ``ended`` follows its last frame."""
        found = self._pumps.get(request.subscription)
        if found is None:
            self.send(
                WireError(reason=RejectReason.INVALID_SUBSCRIPTION, detail=f"no subscription {request.subscription}")
            )
            return
        found[0].cancel()

    def close(self) -> None:
        """The connection is gone: end every subscription."""
        for subscription, task in self._pumps.values():
            subscription.cancel()
            task.cancel()
        self._pumps.clear()

    async def _pump(self, subscription: Subscription) -> None:
        identifier = subscription.id
        try:
            while not subscription.closed:
                await subscription.ready.wait()
                await self.writable.wait()
                if subscription.closed:
                    break
                self._send_batch(identifier, subscription.take(_BATCH_FRAMES))
            self.send(Ended(subscription=identifier))
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug costs this subscription, never the connection's other ones
            log.exception("live subscription %d failed", identifier)
        finally:
            with contextlib.suppress(KeyError):
                del self._pumps[identifier]

    def _send_batch(self, identifier: int, items: list[Frame | Lagged]) -> None:
        seqs: list[int] = []
        lines: list[bytes] = []
        size = 0
        for item in items:
            if isinstance(item, Lagged):
                if seqs:
                    self.send(Frames(subscription=identifier, seqs=seqs, lines=lines))
                    seqs, lines, size = [], [], 0
                self.send(
                    WireLagged(
                        subscription=identifier,
                        from_seq=item.from_seq,
                        resume_seq=item.resume_seq,
                        epoch_changed=item.epoch_changed,
                    )
                )
                continue
            if size + len(item.line) > _BATCH_BYTES and seqs:
                self.send(Frames(subscription=identifier, seqs=seqs, lines=lines))
                seqs, lines, size = [], [], 0
            seqs.append(item.seq)
            lines.append(item.line)
            size += len(item.line)
        if seqs:
            self.send(Frames(subscription=identifier, seqs=seqs, lines=lines))
