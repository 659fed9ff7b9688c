"""From the queue to the wire: producer numbers, the window of sent events, and batch frames.

Every sent event stays in the window until the collector's verdict for it arrives
(:meth:`Batcher.settle`); after a reconnect the window is resent with the same producer numbers, so
that the collector can drop what it had already written (exactly-once). When the Welcome names several
shares, each batch holds one share's sessions and follows a Route frame naming that share.
"""

from __future__ import annotations

import collections
import functools
from typing import TYPE_CHECKING, Final

import msgspec

from ._delivery import Verdict
from .errors import EventRejected
from .protocol import MAX_BATCH_EVENTS, MAX_EVENT_BYTES, MAX_FRAME, Batch, Owners, Route, encode_frame

if TYPE_CHECKING:
    import threading

    from ._delivery import Counters
    from ._losses import Losses
    from ._queue import EventQueue, Item
    from .protocol import Error, Verdicts

__all__ = ["BATCH_BYTES", "WINDOW_BYTES", "WINDOW_EVENTS", "Batcher"]

WINDOW_EVENTS: Final = 8192
WINDOW_BYTES: Final = 8 << 20
BATCH_BYTES: Final = MAX_FRAME // 2
"""The output buffer is filled up to this many bytes, and a batch holds at most this many."""


class Batcher:
    """The window of sent, unsettled events and the output buffer the batch frames are cut into.

    Args:
        events: the sender's queue, which new events are taken from.
        losses: the spool read back (sent first) and the loss notices (sent before new events).
        counters: where settled events are counted.
        lock: the sender's lock, taken here around every change to the window and the queue.
        changed: the condition over it, notified when events are settled.
    """

    def __init__(
        self,
        events: EventQueue,
        losses: Losses,
        counters: Counters,
        lock: threading.Lock,
        changed: threading.Condition,
    ) -> None:
        self._events = events
        self._losses = losses
        self._counters = counters
        self._lock = lock
        self._changed = changed
        self.window: collections.deque[Item] = collections.deque()
        """Sent events awaiting their verdicts, in producer order."""
        self.window_bytes = 0
        self.window_sent = 0
        """How many of the window's events went out on this connection (all of them, but after a reconnect)."""
        self.welcomed = False
        """The connection's Welcome came: batches wait for it, since it says whether to route them."""
        self.owners = Owners(1)
        """Which share owns each session, for the number of shares the last Welcome named."""
        self.out = bytearray()
        """Bytes for the socket; each connection starts it with its Hello."""

    def start_connection(self, hello: bytes) -> None:
        """A new connection: its Hello first, then the whole window again once it is welcomed
        (the caller resets ``window_sent`` under the lock)."""
        self.welcomed = False
        self.out = bytearray(hello)

    def welcome(self, shares: int) -> None:
        self.welcomed = True
        if shares != self.owners.shares:
            self.owners = Owners(max(1, shares))

    def fill_output(self, *, hold_queue: bool = False) -> None:
        """Move events into batch frames while the window and the output buffer have room.

        With ``hold_queue``, new events stay queued (the sender's linger); resent and spooled ones
        still go.

        Order: what the window holds unsent (after a reconnect), then the spool (older), then loss
        notices, then the queue. Producer numbers therefore reach the collector in increasing order.

        Nothing is sent before the Welcome. When it names several shares, each batch holds one
        share's events, after a Route frame: new events are grouped by share before they are
        numbered (a session's events keep their order), and a batch of numbered ones (resent, or
        from the spool) is cut where the share changes.
        """
        if not self.welcomed:
            return
        events = self._events
        losses = self._losses
        owners = self.owners
        routed = owners.shares > 1
        while len(self.out) < BATCH_BYTES:
            losses.load_spool()
            items: list[Item] = []
            runs: list[tuple[int, list[Item]]] | None = None  # each share's part, when grouped here
            size = 0
            with self._lock:
                if self._counters.permanent_error is not None:
                    return
                events.absorb_locked()
                while self.window_sent < len(self.window) and len(items) < MAX_BATCH_EVENTS:
                    item = self.window[self.window_sent]
                    # A batch numbers its events first, first + 1, ...: it never spans a gap.
                    if items and (size + len(item.body) > BATCH_BYTES or item.pseq != items[-1].pseq + 1):
                        break
                    items.append(item)
                    size += len(item.body)
                    self.window_sent += 1
                if not items:
                    spool_pending = losses.spool_pending()
                    if spool_pending:
                        source = losses.spool_buffer
                    elif hold_queue:
                        return
                    else:
                        if losses.unreported:
                            events.items.extendleft(reversed(losses.notices_locked()))
                            events.queued_bytes = sum(len(item.body) for item in events.items)
                        source = events.items
                    # Hot under load: counters kept in locals, written back once per batch.
                    room = min(MAX_BATCH_EVENTS, WINDOW_EVENTS - len(self.window))
                    byte_room = WINDOW_BYTES - self.window_bytes
                    first_pseq = next_pseq = events.next_pseq
                    last = 0
                    while source and len(items) < room and size < byte_room:
                        item = source[0]
                        length = len(item.body)
                        pseq = item.pseq
                        if items and (size + length > BATCH_BYTES or (pseq != 0 and pseq != last + 1)):
                            break
                        source.popleft()
                        if length > MAX_EVENT_BYTES:  # submit() lets none in: refused alone if one got here
                            if source is events.items:
                                events.queued_bytes -= length
                            if item.segment is not None:
                                losses.settle_spooled_locked(item.segment)
                            losses.refuse_locked(length, item.session_id, item.waiter)
                            continue
                        if pseq == 0:
                            pseq = item.pseq = next_pseq
                            next_pseq += 1
                        last = pseq
                        items.append(item)
                        size += length
                    events.next_pseq = next_pseq
                    if routed and next_pseq - first_pseq == len(items):  # all new: group them
                        runs = _grouped_by_share(items, owners, first_pseq)
                        items = [item for _, run in runs for item in run]
                    if source is events.items:
                        events.queued_bytes -= size
                    self.window.extend(items)
                    self.window_bytes += size
                    self.window_sent += len(items)
            if not items:
                return
            if not routed:
                self.out += _batch_frame(items)
                continue
            for share, run in runs if runs is not None else _cut_by_share(items, owners):
                self.out += _route_frame(share) + _batch_frame(run)

    def settle(self, verdicts: Verdicts) -> bool:
        """Settle the window's events up to the end of ``verdicts``; tell whether a waiter was woken."""
        rejected = {rejection.index: rejection for rejection in verdicts.rejected}
        last = verdicts.first + verdicts.count
        first = verdicts.first
        with self._lock:
            window = self.window
            settled = refused = freed = 0
            woke = False
            while window and window[0].pseq < last:
                item = window.popleft()
                settled += 1
                freed += len(item.body)
                if item.segment is not None:
                    self._losses.settle_spooled_locked(item.segment)
                if not rejected and item.waiter is None:
                    continue  # the common case: accepted, nobody waiting
                offset = item.pseq - first
                rejection = rejected.get(offset)
                if rejection is not None:
                    refused += 1
                    self._counters.last_error = f"event rejected: {rejection.reason}: {rejection.detail}"
                    if item.waiter is not None and not item.waiter.done():
                        item.waiter.set_exception(EventRejected(rejection.reason, rejection.detail))
                elif item.waiter is not None and not item.waiter.done():
                    seq = verdicts.seqs[offset] if 0 <= offset < len(verdicts.seqs) else 0
                    item.waiter.set_result(Verdict(seq=max(seq, 0), duplicate=seq < 0))
                    woke = True
            self._counters.accepted += settled - refused
            self._counters.rejected += refused
            self.window_bytes -= freed
            self.window_sent = max(0, self.window_sent - settled)
            self._changed.notify_all()
        return woke

    def refuse_everything(self, error: Error) -> None:
        # The collector will never take these events over this root: refuse them all, loudly.
        exc = EventRejected(error.reason, error.detail)
        events = self._events
        with self._lock:
            self._counters.permanent_error = error.detail
            events.absorb_locked()
            for item in (*self.window, *events.items):
                self._counters.rejected += 1
                if item.waiter is not None and not item.waiter.done():
                    item.waiter.set_exception(exc)
            self.window.clear()
            self.window_bytes = 0
            self.window_sent = 0
            events.clear_locked()
            self._changed.notify_all()


def _batch_frame(items: list[Item]) -> bytes:
    """The Batch frame of ``items``, numbered consecutively from the first."""
    return encode_frame(
        Batch(
            first=items[0].pseq,
            events=[msgspec.Raw(item.body) for item in items],
            verdicts=any(item.waiter is not None for item in items),
        )
    )


@functools.cache
def _route_frame(share: int) -> bytes:
    return encode_frame(Route(share=share))


def _grouped_by_share(items: list[Item], owners: Owners, first_pseq: int) -> list[tuple[int, list[Item]]]:
    """Each share's part of ``items`` (just numbered ``first_pseq``, ``first_pseq + 1``, … in queue
    order), numbered again share after share, so that each part is a batch of consecutive numbers.
    Stable: a session's events keep their order."""
    groups: list[list[Item]] = [[] for _ in range(owners.shares)]
    for item in items:
        groups[owners[item.session_id]].append(item)
    runs = [(share, group) for share, group in enumerate(groups) if group]
    pseq = first_pseq
    for _, run in runs:
        for item in run:
            item.pseq = pseq
            pseq += 1
    return runs


def _cut_by_share(items: list[Item], owners: Owners) -> list[tuple[int, list[Item]]]:
    """``items`` (numbered already: resent, or from the spool) cut where the share changes."""
    runs: list[tuple[int, list[Item]]] = []
    start = 0
    share = owners[items[0].session_id]
    for index in range(1, len(items)):
        owner = owners[items[index].session_id]
        if owner != share:
            runs.append((share, items[start:index]))
            start, share = index, owner
    runs.append((share, items[start:]))
    return runs
