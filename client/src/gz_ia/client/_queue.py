"""Where agent threads leave encoded events for the sender thread: the inbox, the bounded queue, producer numbers.

An agent thread appends to the inbox without taking the lock (``deque.append`` is atomic); whoever next
holds the sender's lock moves the inbox into the bounded queue, in order (:meth:`EventQueue.absorb_locked`).
An event gets its producer number when it leaves the queue, sent or spilled, so numbers follow the
order of the queue. The sender (:mod:`._sender`) owns one of these beside its other parts, each of
which takes the same lock: :mod:`._losses` (spool, drops, loss notices) and :mod:`._batcher` (the
window and the frames).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ._delivery import Counters, Verdict

if TYPE_CHECKING:
    # Only the waiting calls make futures: an agent that only logs never imports the module (nor
    # the logging package it imports).
    import concurrent.futures
    from pathlib import Path

__all__ = ["CALL_BYTES", "EventQueue", "Item", "new_producer_id"]

CALL_BYTES: Final = 256
"""What an unencoded ``log()`` call is counted as in the inbox until it is encoded (a typical event)."""


class Item(msgspec.Struct, gc=False):
    """One encoded event on its way; ``waiter`` is set when a caller waits for the verdict.

    ``pseq`` is its producer number (0 until it is sent or spilled); ``segment`` names the spool
    segment it was read back from, to delete once all of that segment is acknowledged. A Struct,
    not a class: one is made per event, and its constructor runs in C.
    """

    body: bytes
    session_id: str
    waiter: concurrent.futures.Future[Verdict] | None = None
    pseq: int = 0
    segment: Path | None = None


def new_producer_id() -> str:
    """A random id for this client instance (a forked child takes a new one)."""
    return os.urandom(8).hex()  # what secrets.token_hex does, without importing hmac and hashlib


class EventQueue:
    """The inbox and the bounded queue of one sender; every method but the agents' ``inbox.append`` is
    called under the sender's lock (the ``_locked`` suffix).

    Args:
        max_events: the queue's bound in events (what ``over_bound_locked`` compares with).
        max_bytes: its bound in encoded bytes.
        encode_call: builds and encodes the event of a deferred ``log()`` call (:meth:`absorb_locked`).
        counters: where a call that cannot be built is counted (``invalid``).
        on_absorbed: called once the queue has grown, so that the sender says again whether agent
            threads may go on without the lock.
    """

    __slots__ = (
        "counters",
        "encode_call",
        "inbox",
        "inbox_bytes",
        "items",
        "max_bytes",
        "max_events",
        "next_pseq",
        "on_absorbed",
        "queued_bytes",
    )

    def __init__(
        self,
        *,
        max_events: int,
        max_bytes: int,
        encode_call: Callable[[tuple[Any, ...]], bytes],
        counters: Counters,
        on_absorbed: Callable[[], None],
    ) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.encode_call = encode_call
        self.counters = counters
        self.on_absorbed = on_absorbed
        self.items: collections.deque[Item] = collections.deque()
        """The bounded queue, oldest first."""
        self.queued_bytes = 0
        self.inbox: collections.deque[Item | tuple[Any, ...]] = collections.deque()
        """Encoded events (Items) and ``log()`` calls not encoded yet (tuples, see ``encode_call``),
        appended by agent threads without the lock."""
        self.inbox_bytes = 0
        """Only a hint, counted by agent threads without the lock; the lock holder recounts."""
        self.next_pseq = 1

    def absorb_locked(self) -> int:
        """Move what agent threads added without the lock into the queue, oldest first; return how many.

        Deferred ``log()`` calls (tuples whose second item is the session id) are encoded here, in
        order, by whichever thread moves them (the sender thread, mostly, with its caches warm); one
        that cannot be built is counted in ``invalid`` and left out, as ``log()`` would have done.
        """
        inbox = self.inbox
        self.inbox_bytes = 0
        if not inbox:
            return 0
        entries = [inbox.popleft() for _ in range(len(inbox))]
        items: list[Item] = []
        size = 0  # counted in the same pass: this runs once per wake-up of the sender, with cold caches
        encode = self.encode_call
        for entry in entries:
            if type(entry) is not tuple:
                items.append(entry)  # type: ignore[arg-type]  # an Item: not a tuple
                size += len(entry.body)  # type: ignore[union-attr]
                continue
            try:
                body = encode(entry)
            except Exception as exc:  # the agent's own values, judged here: this call's failure alone
                self.counters.invalid += 1
                self.counters.last_error = f"invalid event: {exc}"
                continue
            items.append(Item(body, entry[1]))
            size += len(body)
        self.items.extend(items)
        self.queued_bytes += size
        self.on_absorbed()
        return len(items)

    def over_bound_locked(self, factor: int) -> bool:
        return len(self.items) > factor * self.max_events or self.queued_bytes > factor * self.max_bytes

    def pop_oldest_locked(self) -> Item:
        item = self.items.popleft()
        self.queued_bytes -= len(item.body)
        return item

    def assign_pseqs_locked(self, items: list[Item]) -> None:
        """Number ``items`` that have no producer number yet, in order."""
        for item in items:
            if item.pseq == 0:
                item.pseq = self.next_pseq
                self.next_pseq += 1

    def clear_locked(self) -> None:
        self.items.clear()
        self.queued_bytes = 0
