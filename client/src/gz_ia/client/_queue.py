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
    call: tuple[Any, ...] | None = None
    """The arguments of a ``log()`` call not encoded yet (``body`` is empty until it is)."""


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
    encode_call: Callable[[tuple[Any, ...]], bytes] | None
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
        self._inbox: collections.deque[Item] = collections.deque()
        self._inbox_bytes = 0
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

        Deferred ``log()`` calls are encoded here, in order, by whichever thread moves them (the
        sender thread, mostly, with its caches warm); one that cannot be built is counted in
        ``invalid`` and left out, as ``log()`` would have done.
        """
        inbox = self._inbox
        self._inbox_bytes = 0
        if not inbox:
            return 0
        items = [inbox.popleft() for _ in range(len(inbox))]
        encode = self.encode_call
        if encode is not None:
            failed = False
            for item in items:
                if item.call is None:
                    continue
                call, item.call = item.call, None
                try:
                    item.body = encode(call)
                except (ValueError, TypeError, OverflowError) as exc:
                    failed = True
                    self._invalid += 1
                    self._last_error = f"invalid event: {exc}"
            if failed:  # an encoded event is never empty
                items = [item for item in items if item.body]
        self._queue.extend(items)
        self._queued_bytes += sum(len(item.body) for item in items)
        return len(items)

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
