"""Where agent threads leave encoded events for the sender thread, and the lock over the sender's state.

An agent thread appends to the inbox without taking the lock (``deque.append`` is atomic); whoever next
holds the lock moves the inbox into the bounded queue, in order (:meth:`EventQueue._absorb_locked`).
An event gets its producer number when it leaves the queue, sent or spilled, so numbers follow the
order of the queue. The sender is built in layers on this one, each adding its state in
``_init_state`` under the same lock: :mod:`._losses` (spool, drops, loss notices), :mod:`._batcher`
(the window and the frames), :mod:`._sender` (the thread and the connection).
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ._delivery import Verdict

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
    """The inbox, the bounded queue, the lock and condition over all of the sender's state, its counters.

    The configuration attributes are set by :class:`~._sender.Sender` before ``_init_state``.
    """

    socket_path: Path
    root: Path
    max_events: int
    max_bytes: int
    connect_timeout: float
    spool_dir: Path | None
    max_spool_bytes: int
    encode_call: Callable[[tuple[Any, ...]], bytes]
    """Builds and encodes the event of a deferred ``log()`` call (:meth:`_absorb_locked` calls it)."""

    def _init_state(self) -> None:
        # Everything a forked child must not share with its parent is created here (and in the
        # layers' own _init_state).
        self.producer = new_producer_id()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: collections.deque[Item] = collections.deque()
        self._queued_bytes = 0
        # Agent threads append here without the lock; _absorb_locked moves these into the queue.
        self.inbox: collections.deque[Item | tuple[Any, ...]] = collections.deque()
        """Encoded events (Items) and ``log()`` calls not encoded yet (tuples, see ``encode_call``),
        appended by agent threads without the lock."""
        self._inbox_bytes = 0
        self.ready = False
        """Whether an agent thread may leave a call in the inbox and return, taking no lock: the
        sender thread is sure to come round, nothing is closing, and the queue has room for a whole
        inbox (see :meth:`_update_ready_locked`)."""
        self._next_pseq = 1
        self._closing = False
        self._closed = False
        self._connected = False
        self._accepted = 0
        self._rejected = 0
        self._dropped = 0
        self._invalid = 0
        self._reconnects = 0
        self._last_error: str | None = None
        self._permanent_error: str | None = None

    def _absorb_locked(self) -> int:
        """Move what agent threads added without the lock into the queue, oldest first; return how many.

        Deferred ``log()`` calls (tuples whose second item is the session id) are encoded here, in
        order, by whichever thread moves them (the sender thread, mostly, with its caches warm); one
        that cannot be built is counted in ``invalid`` and left out, as ``log()`` would have done.
        """
        inbox = self.inbox
        self._inbox_bytes = 0
        if not inbox:
            return 0
        entries = [inbox.popleft() for _ in range(len(inbox))]
        items: list[Item] = []
        encode = self.encode_call
        for entry in entries:
            if type(entry) is not tuple:
                items.append(entry)  # type: ignore[arg-type]  # an Item: not a tuple
                continue
            try:
                body = encode(entry)
            except (ValueError, TypeError, OverflowError) as exc:
                self._invalid += 1
                self._last_error = f"invalid event: {exc}"
                continue
            items.append(Item(body, entry[1]))
        self._queue.extend(items)
        self._queued_bytes += sum(len(item.body) for item in items)
        self._update_ready_locked()
        return len(items)

    def _update_ready_locked(self) -> None:
        """Say again whether a call may be left in the inbox without the lock (``ready``).

        Called wherever what it depends on changes, under the lock. An agent thread reads it after
        appending its call: if the flag went down meanwhile, it takes the lock itself.
        """

    def _over_bound_locked(self, factor: int) -> bool:
        return len(self._queue) > factor * self.max_events or self._queued_bytes > factor * self.max_bytes

    def _assign_pseqs_locked(self, items: list[Item]) -> None:
        for item in items:
            if item.pseq == 0:
                item.pseq = self._next_pseq
                self._next_pseq += 1

    def _note_error(self, message: str) -> None:
        with self._lock:
            self._last_error = message
