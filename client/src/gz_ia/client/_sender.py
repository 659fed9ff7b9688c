"""The background sender: one thread per client that owns the socket.

Agent threads only encode an event and append it to a bounded queue (:meth:`Sender.submit`); they
never touch the socket, never wait for the collector and never raise because of it. The sender
thread connects with a timeout, sends queued events in batches (one share's sessions per batch
when the collector's Welcome names several shares: :meth:`Sender._fill_output`), keeps every sent
event in a window until the collector's verdict arrives, and after a reconnect resends the window
with the same producer numbers so that the collector can drop what it had already written
(exactly-once).

Bounds: the queue holds at most ``max_events`` events and ``max_bytes`` encoded bytes. Past that the
sender thread spills the oldest queued events to a disk spool (:mod:`._spool`), delivered first once
the collector is back; past the spool's own bound, or four times the queue's bound before the thread
gets to it, the oldest events are dropped, counted in ``stats().dropped``, and reported into each
affected session as a READ + FINISH FAILED pair of the action ``gz-ia.dropped #<n>`` (agent
``gz-ia``), so that a loss is never silent. An event whose encoding is larger than a frame can
carry (:data:`~gz_ia.client.protocol.MAX_EVENT_BYTES`) is never queued: it is refused alone, counted
in ``stats().rejected`` and reported the same way, so every batch fits in a frame. The window
holds at most :data:`WINDOW_EVENTS` events. At exit the client delivers for ``GZ_IA_EXIT_TIMEOUT``
seconds (2 by default), then spools the rest, and the notices of losses not yet reported, for the
collector to adopt.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import os
import random
import selectors
import socket
import sys
import threading
import time
import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from ._spool import Spool, SpoolRecord
from .errors import CollectorUnavailable, EventRejected, ProtocolError
from .protocol import (
    MAX_BATCH_EVENTS,
    MAX_EVENT_BYTES,
    MAX_FRAME,
    PROTOCOL_VERSION,
    Batch,
    Error,
    FrameReader,
    FrameTooLarge,
    Hello,
    Owners,
    RejectReason,
    Report,
    Route,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
)
from .schema import AttrValue, LogEvent, Stage, Status, is_safe_session_id

if TYPE_CHECKING:
    # Only the waiting calls make futures: an agent that only logs never imports the module (nor
    # the logging package it imports).
    import concurrent.futures

__all__ = ["Sender", "SenderStats", "Verdict"]

WINDOW_EVENTS: Final = 8192
WINDOW_BYTES: Final = 8 << 20
_BATCH_BYTES: Final = MAX_FRAME // 2
_HARD_FACTOR: Final = 4
"""With a spool, the queue may briefly hold this many times its bound before the sender thread
(which spills, off the agent's thread) catches up; past it the agent's call drops the oldest."""
_INBOX_EVENTS: Final = 256
"""Events an agent thread may add without taking the lock before it moves them into the queue itself."""
_LAGGING_EVENTS: Final = 4096
"""Queued events past which an agent thread that moves its inbox into the queue gives the sender
thread a turn (:func:`_give_way`): once per ``_INBOX_EVENTS`` events, while connected."""
_BACKOFF_MIN: Final = 0.05
_QUEUE_FULL_WAIT: Final = 0.01
"""Seconds between connects while the collector's accept queue is full (see ``Sender._connect``)."""
_BACKOFF_MAX: Final = 2.0
# Reasons after which retrying the same connection cannot succeed: the events are refused.
_PERMANENT: Final = frozenset(
    {RejectReason.ROOT_NOT_ALLOWED, RejectReason.PERMISSION_DENIED, RejectReason.UNSUPPORTED_VERSION}
)


class Verdict(msgspec.Struct, frozen=True):
    """The collector's answer for one accepted event: its ``seq`` in the session file.

    ``duplicate`` is true when the event had already been written by an earlier attempt.
    """

    seq: int
    duplicate: bool = False


class SenderStats(msgspec.Struct, frozen=True):
    """Counters of one client, readable at any time: what happened to the events it was given."""

    queued: int
    unacknowledged: int
    accepted: int
    rejected: int
    dropped: int
    invalid: int
    reconnects: int
    connected: bool
    last_error: str | None


class _Item(msgspec.Struct, gc=False):
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


DROPPED_ACTION: Final = "gz-ia.dropped"
_DROPPED: Final = "dropped"
"""The cause of a loss for want of room (queue and spool full), as opposed to a refused event."""
_notice_encoder: Final = msgspec.msgpack.Encoder()


_live_senders: weakref.WeakSet[Sender] = weakref.WeakSet()


def _give_way() -> None:
    """Release the GIL for a moment, so that the other side's thread, waiting for it, runs now.

    A busy thread holds the GIL but for the switch interval (5 ms). An agent thread logging in a busy
    loop gives the sender thread a turn every ``_INBOX_EVENTS`` events while the queue lags (with 8
    such agents, nearly all events were still queued when they finished logging, and delivery only
    began then); the sender thread gives a ``send()`` it has just woken its turn at once.
    """
    time.sleep(0)


def _new_producer_id() -> str:
    return os.urandom(8).hex()  # what secrets.token_hex does, without importing hmac and hashlib


class Sender:
    """Queue events and deliver them to the collector from a background thread.

    Args:
        socket_path: the collector's Unix socket.
        root: the session root (``.harness`` directory) named in the handshake.
        max_events: bound on queued (not yet sent) events.
        max_bytes: bound on the encoded size of queued events.
        connect_timeout: longest wait for one connection attempt.
        spool_dir: where to spill events past the memory bounds; None disables the spool.
        max_spool_bytes: bound on the spool's size.
    """

    def __init__(
        self,
        socket_path: Path,
        root: Path,
        *,
        max_events: int = 10_000,
        max_bytes: int = 8 << 20,
        connect_timeout: float = 1.0,
        spool_dir: Path | None = None,
        max_spool_bytes: int = 64 << 20,
    ) -> None:
        if max_events < 1 or max_bytes < 1:
            raise ValueError("buffer bounds must be positive")
        self.socket_path = socket_path
        self.root = root
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.connect_timeout = connect_timeout
        self.spool_dir = spool_dir
        self.max_spool_bytes = max_spool_bytes
        self._init_state()
        _live_senders.add(self)

    def _init_state(self) -> None:
        # Everything a forked child must not share with its parent is created here.
        self.producer = _new_producer_id()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: collections.deque[_Item] = collections.deque()
        self._queued_bytes = 0
        # Agent threads append here without the lock (deque.append is atomic); whoever next holds
        # the lock moves these into the queue, in order (_absorb_locked).
        self._inbox: collections.deque[_Item] = collections.deque()
        self._inbox_bytes = 0
        self._window: collections.deque[_Item] = collections.deque()
        self._window_bytes = 0
        self._window_sent = 0
        self._next_pseq = 1
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_armed = False
        self._wake_wanted = True
        self._spill_wanted = False
        """An agent thread has woken the sender thread to spill the queue's excess (once per spill)."""
        self._closing = False
        self._closed = False
        self._sock: socket.socket | None = None
        self._connected = False
        self._welcomed = False
        """The connection's Welcome came: batches wait for it, since it says whether to route them."""
        self._owners = Owners(1)
        """Which share owns each session, for the number of shares the last Welcome named."""
        self._accepted = 0
        self._rejected = 0
        self._dropped = 0
        self._invalid = 0
        self._reconnects = 0
        self._last_error: str | None = None
        self._permanent_error: str | None = None
        self._backoff = _BACKOFF_MIN
        self._retry_at = 0.0
        self._spool = (
            Spool(
                self.spool_dir,
                self.producer,
                str(self.root),
                max_bytes=self.max_spool_bytes,
                socket=str(self.socket_path),
            )
            if self.spool_dir is not None
            else None
        )
        self._spooled = 0
        self._segment_pending: dict[Path, int] = {}
        self._losses: dict[tuple[str, str], int] = {}
        """Events lost since the last notices, by session and cause (``_DROPPED`` or a reject reason)."""
        self._notices = 0
        self._spool_buffer: collections.deque[_Item] = collections.deque()
        self._unturned = 0
        """Events agent threads moved into the queue since one of them last gave the sender a turn."""
        self._hard_factor = _HARD_FACTOR if self._spool is not None else 1
        self._hard_events = self._hard_factor * self.max_events
        self._hard_bytes = self._hard_factor * self.max_bytes

    # --- called from agent threads ----------------------------------------------------------------

    def submit(self, body: bytes, session_id: str, waiter: concurrent.futures.Future[Verdict] | None = None) -> None:
        """Queue one encoded event; never blocks on the socket or the disk, never raises because of it.

        The common case takes no lock, so that agent threads and the sender thread do not contend
        for it: the event goes into the inbox, and nothing else is needed while the sender thread is
        sure to come round (``_wake_armed``, or backing off), the inbox is short and no bound is near.
        """
        if len(body) > MAX_EVENT_BYTES or not isinstance(session_id, str):
            self._refuse(len(body), session_id, waiter)
            return
        inbox = self._inbox
        inbox.append(_Item(body, session_id, waiter))
        # Only a hint for taking the slow path in time (unlocked, so racy); the lock holder recounts.
        self._inbox_bytes += len(body)
        if (
            waiter is None
            and len(inbox) < _INBOX_EVENTS
            and (self._wake_armed or not self._wake_wanted)
            and not self._closing
            and self._thread is not None
            and len(self._queue) + len(inbox) <= self.max_events
            and self._queued_bytes + self._inbox_bytes <= self.max_bytes
        ):
            return
        with self._lock:
            if self._closed:
                # close() has taken its leftovers: what arrives now can only be counted as lost.
                while inbox:
                    item = inbox.popleft()
                    self._dropped += 1
                    if item.waiter is not None and not item.waiter.done():
                        item.waiter.set_exception(
                            CollectorUnavailable("the client is closed", socket_path=str(self.socket_path))
                        )
                return
            if self._closing:
                self._absorb_locked()  # close() spools or counts what it finds queued
                return
            self._unturned += self._absorb_locked()
            queue = self._queue
            if len(queue) > self._hard_events or self._queued_bytes > self._hard_bytes:
                # The sender thread spills past 1x; dropping here is the last resort when it lags.
                self._drop_oldest_locked(self._hard_factor)
            if self._thread is None:
                self._start_locked()
            lagging = self._unturned >= _INBOX_EVENTS and len(queue) >= _LAGGING_EVENTS and self._connected
            if lagging:
                self._unturned = 0
            # While the thread waits out a reconnect backoff, new events need not wake it (each
            # wake-up costs the agent a GIL hand-over); a waiter or a spill still does. A spill
            # wakes it even when it is due to come round anyway: it may be waiting a second for a
            # collector that has stopped answering, and past 4x the bound this call would drop.
            spill = self._spool is not None and not self._spill_wanted and self._over_bound_locked(1)
            wake = spill or (
                not self._wake_armed and (self._wake_wanted or waiter is not None or len(queue) > self.max_events)
            )
            if wake:
                self._wake_armed = True
            if spill:
                self._spill_wanted = True
        if wake:
            self._wake()
        if lagging:
            _give_way()

    def _refuse(self, size: int, session_id: str, waiter: concurrent.futures.Future[Verdict] | None) -> None:
        """Refuse one event no frame can carry, alone: counted, reported in its session, the rest goes on.

        Nothing past this bound is ever queued, so every batch fits in a frame: one agent's oversized
        input can never stop the sender thread or the events after it.
        """
        with self._lock:
            self._refuse_locked(size, session_id, waiter)
            if self._thread is None and not self._closing and not self._closed:
                self._start_locked()  # to deliver the loss notice
        self._wake()

    def _refuse_locked(self, size: int, session_id: str, waiter: concurrent.futures.Future[Verdict] | None) -> None:
        if not isinstance(session_id, str):
            reason, detail = RejectReason.INVALID_SESSION_ID, f"session id {session_id!r} is not a string"
        else:
            reason = RejectReason.FRAME_TOO_LARGE
            detail = f"the event takes {size} bytes encoded, more than the {MAX_EVENT_BYTES} a frame can carry"
        self._rejected += 1
        self._last_error = f"event refused: {reason}: {detail}"
        if reason is RejectReason.FRAME_TOO_LARGE and not self._closed:
            self._lose_locked(session_id, reason)
        if waiter is not None and not waiter.done():
            waiter.set_exception(EventRejected(reason, detail))
        self._changed.notify_all()

    def count_invalid(self, error: Exception) -> None:
        """Record an event that could not even be built (a bad argument at the call site)."""
        with self._lock:
            self._invalid += 1
            self._last_error = f"invalid event: {error}"

    def flush(self, timeout: float | None) -> bool:
        """Wait until every queued event has its verdict; return False if ``timeout`` ran out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._absorb_locked()
            if self._queue and self._thread is None:
                self._start_locked()
            while self._inbox or self._queue or self._window or self._spooled or self._losses:
                if self._permanent_error is not None:
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def close(self, timeout: float | None) -> None:
        """Deliver for at most ``timeout`` seconds, spool what is left, then stop the thread."""
        self.flush(timeout)
        with self._lock:
            self._closing = True
            thread = self._thread
        self._wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        with self._lock:
            self._absorb_locked()
            self._closed = True
            leftovers = [*self._window, *self._queue]
            self._window.clear()
            self._queue.clear()
            self._window_bytes = self._queued_bytes = 0
            self._assign_pseqs_locked(leftovers)
        if leftovers and self._spool is not None:
            try:
                self._record_losses(self._spool.append([self._record(item) for item in leftovers]))
            except OSError:
                with self._lock:
                    self._dropped += len(leftovers)
        elif leftovers:
            with self._lock:
                self._dropped += len(leftovers)
        if self._spool is not None:
            self._spool_loss_notices(self._spool)
            self._spool.close()

    def _spool_loss_notices(self, spool: Spool) -> None:
        """At close, spool the notices of losses not yet reported, so that the adopting collector
        writes them: a counted drop must leave its notice even when the collector never came back."""
        for _ in range(3):  # an append may drop older segments: their loss needs a notice too
            with self._lock:
                if not self._losses:
                    return
                notices = self._loss_notices_locked()
                self._assign_pseqs_locked(notices)
            try:
                self._record_losses(spool.append([self._record(item) for item in notices]))
            except OSError as exc:
                self._note_error(f"cannot spool loss notices to {spool.directory}: {exc}")
                return

    def stats(self) -> SenderStats:
        """Return a consistent snapshot of the counters."""
        with self._lock:
            return SenderStats(
                queued=len(self._queue) + len(self._inbox),
                unacknowledged=len(self._window),
                accepted=self._accepted,
                rejected=self._rejected,
                dropped=self._dropped,
                invalid=self._invalid,
                reconnects=self._reconnects,
                connected=self._connected,
                last_error=self._last_error,
            )

    # --- internals shared by both sides -----------------------------------------------------------

    def _absorb_locked(self) -> int:
        """Move what agent threads added without the lock into the queue, oldest first; return how many."""
        inbox = self._inbox
        self._inbox_bytes = 0
        if not inbox:
            return 0
        items = [inbox.popleft() for _ in range(len(inbox))]
        self._queue.extend(items)
        self._queued_bytes += sum(len(item.body) for item in items)
        return len(items)

    def _over_bound_locked(self, factor: int) -> bool:
        return len(self._queue) > factor * self.max_events or self._queued_bytes > factor * self.max_bytes

    def _assign_pseqs_locked(self, items: list[_Item]) -> None:
        for item in items:
            if item.pseq == 0:
                item.pseq = self._next_pseq
                self._next_pseq += 1

    @staticmethod
    def _record(item: _Item) -> SpoolRecord:
        return SpoolRecord(item.pseq, item.session_id, msgspec.Raw(item.body))

    def _record_losses(self, counts: dict[str, int]) -> None:
        if not counts:
            return
        with self._lock:
            for session_id, count in counts.items():
                self._lose_locked(session_id, _DROPPED, count)
                self._dropped += count
                self._spooled -= count

    def _spill(self) -> None:
        """Move the queue's oldest events beyond its bound to the disk spool (sender thread)."""
        spool = self._spool
        if spool is None:
            return
        with self._lock:
            self._spill_wanted = False
            self._absorb_locked()
            if not self._over_bound_locked(1):
                return
            spilled: list[_Item] = []
            while self._queue and self._over_bound_locked(1):
                item = self._queue.popleft()
                self._queued_bytes -= len(item.body)
                spilled.append(item)
            # Numbered now: everything still queued is newer and will get higher numbers.
            self._assign_pseqs_locked(spilled)
            self._spooled += len(spilled)
        for item in spilled:
            if item.waiter is not None and not item.waiter.done():
                item.waiter.set_exception(
                    CollectorUnavailable(
                        "spooled to disk; it will be delivered later", socket_path=str(self.socket_path)
                    )
                )
        try:
            self._record_losses(spool.append([self._record(item) for item in spilled]))
        except OSError as exc:
            self._note_error(f"cannot spool to {spool.directory}: {exc}")
            with self._lock:
                self._spooled -= len(spilled)
                self._dropped += len(spilled)
                for item in spilled:
                    self._lose_locked(item.session_id, _DROPPED)

    def _load_spool(self) -> None:
        """Read the oldest spool segment back so that it is sent before anything newer."""
        spool = self._spool
        if spool is None or self._spool_buffer or spool.empty:
            return
        taken = spool.take_oldest()
        if taken is None:
            return
        path, records = taken
        if not records:
            spool.release(path)
            return
        items = []
        for record in records:
            item = _Item(bytes(record.body), record.session_id)
            item.pseq = record.pseq
            item.segment = path
            items.append(item)
        with self._lock:
            self._segment_pending[path] = len(items)
            self._spool_buffer.extend(items)

    def _lose_locked(self, session_id: str, cause: str, count: int = 1) -> None:
        """Count a loss to report in its session; none for an id the collector would refuse anyway."""
        if isinstance(session_id, str) and is_safe_session_id(session_id):
            key = (session_id, cause)
            self._losses[key] = self._losses.get(key, 0) + count

    def _loss_notices_locked(self) -> list[_Item]:
        """Turn counted losses into READ + FINISH FAILED pairs in each affected session."""
        notices: list[_Item] = []
        now = datetime.now(UTC)
        for (session_id, cause), count in self._losses.items():
            self._notices += 1
            action = f"{DROPPED_ACTION} #{self._notices}"
            if cause == _DROPPED:
                error = (
                    f"{count} event(s) of this session were dropped by the gz-ia client in pid {os.getpid()}: "
                    "its buffer and spool were full while the collector was unreachable"
                )
                attrs: dict[str, AttrValue] = {"dropped": count}
            else:
                error = (
                    f"{count} event(s) of this session were refused by the gz-ia client in pid {os.getpid()}: "
                    f"each took more than the {MAX_EVENT_BYTES} bytes a frame can carry once encoded"
                )
                attrs = {"dropped": count, "reason": cause}
            for stage, status in ((Stage.READ, Status.OK), (Stage.FINISH, Status.FAILED)):
                event = LogEvent(
                    timestamp=now,
                    session_id=session_id,
                    action=action,
                    stage=stage,
                    status=status,
                    agent="gz-ia",
                    error=error if status is Status.FAILED else None,
                    attrs=attrs if status is Status.FAILED else None,
                )
                notices.append(_Item(_notice_encoder.encode(event), session_id))
        self._losses.clear()
        return notices

    def _drop_oldest_locked(self, factor: int) -> None:
        while self._queue and self._over_bound_locked(factor):
            item = self._queue.popleft()
            self._queued_bytes -= len(item.body)
            self._dropped += 1
            self._lose_locked(item.session_id, _DROPPED)
            if item.waiter is not None and not item.waiter.done():
                item.waiter.set_exception(
                    CollectorUnavailable("dropped: the client buffer is full", socket_path=str(self.socket_path))
                )

    def _start_locked(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gz-ia-sender", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"\0")

    def _after_fork_in_child(self) -> None:
        # The parent's queue, window, socket and thread belong to the parent: start afresh.
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.detach()
        if self._spool is not None:
            self._spool.forget_after_fork()
        self._init_state()

    # --- the sender thread ------------------------------------------------------------------------

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ)
        try:
            while True:
                with self._lock:
                    if self._closing:
                        return
                self._spill()
                if self._sock is None:
                    delay = self._retry_at - time.monotonic()
                    if delay > 0:
                        with self._lock:
                            self._wake_wanted = False
                            self._wake_armed = False
                        self._wait_for_wake(selector, delay)
                        with self._lock:
                            self._wake_wanted = True
                        continue
                    if not self._connect(selector):
                        self._fail_waiters_on_unavailable()
                        self._schedule_retry()
                        continue
                self._pump(selector)
                if self._sock is None:
                    self._schedule_retry()
        except Exception as exc:  # pragma: no cover - last line of defence: never crash the agent
            with self._lock:
                self._last_error = f"sender thread failed: {exc!r}"
                self._thread = None
        finally:
            self._drop_connection(selector)
            selector.close()

    def _schedule_retry(self) -> None:
        # Jittered exponential backoff; only a Welcome from the collector resets it, so a collector
        # that accepts and then drops connections is not hammered.
        self._retry_at = time.monotonic() + self._backoff * (0.5 + random.random())  # noqa: S311
        self._backoff = min(self._backoff * 2, _BACKOFF_MAX)

    def _wait_for_wake(self, selector: selectors.BaseSelector, timeout: float) -> None:
        for key, _ in selector.select(timeout):
            if key.fd == self._wake_r:
                self._drain_wake()

    def _drain_wake(self) -> None:
        # Only empty the pipe: the flag is re-armed where the thread is about to block (see _pump).
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._wake_r, 4096):
                pass

    def _connect(self, selector: selectors.BaseSelector) -> bool:
        with contextlib.suppress(OSError):
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        deadline = time.monotonic() + self.connect_timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.connect_timeout)
            try:
                sock.connect(str(self.socket_path))
                sock.setblocking(False)
                break
            except OSError as exc:
                sock.close()
                # EAGAIN: the collector is there but its accept queue is full (a burst of clients).
                # A connect with a timeout fails at once then, on a Unix socket: wait for room,
                # within the same timeout, rather than fail a waiting send() and back off.
                if isinstance(exc, BlockingIOError) and time.monotonic() + _QUEUE_FULL_WAIT < deadline:
                    with self._lock:
                        closing = self._closing
                    if not closing:
                        time.sleep(_QUEUE_FULL_WAIT)
                        continue
                with self._lock:
                    self._last_error = f"cannot connect to {self.socket_path}: {exc.strerror or exc}"
                return False
        hello = Hello(
            proto=PROTOCOL_VERSION,
            producer=self.producer,
            pid=os.getpid(),
            root=str(self.root),
            program=Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "",
            routes=True,
        )
        self._welcomed = False
        self._sock = sock
        self._reader = FrameReader()
        self._out = bytearray(encode_frame(hello))
        selector.register(sock, selectors.EVENT_READ)
        with self._lock:
            if self._reconnects or self._window:
                self._reconnects += 1
            self._connected = True
            self._window_sent = 0  # everything in the window is resent on this connection
            self._permanent_error = None
        return True

    def _drop_connection(self, selector: selectors.BaseSelector) -> None:
        if self._sock is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(self._sock)
        self._sock.close()
        self._sock = None
        with self._lock:
            self._connected = False
            self._window_sent = 0
            self._changed.notify_all()

    def _fail_waiters_on_unavailable(self) -> None:
        error = CollectorUnavailable(
            f"no collector at {self.socket_path}: {self._last_error}", socket_path=str(self.socket_path)
        )
        with self._lock:
            self._absorb_locked()
            for item in (*self._window, *self._queue):
                if item.waiter is not None and not item.waiter.done():
                    item.waiter.set_exception(error)
            self._changed.notify_all()

    def _pump(self, selector: selectors.BaseSelector) -> None:
        """One round of the connected loop: fill the output, wait for I/O, handle it."""
        assert self._sock is not None
        sock = self._sock
        self._fill_output()
        # The socket nearly always takes a new batch at once: sending it now, not after one more
        # select round, is a good part of a lone send()'s round trip.
        if self._out and not self._send_out(sock, selector):
            return
        with self._lock:
            # More to send and room for it: go round again at once. Otherwise block; and only when
            # the queue is empty must the next submit() write to the wake-up pipe (under load the
            # thread never blocks on an empty queue, so agents never pay for a wake-up).
            # Disarmed before the inbox is looked at: a submit() racing with this sees either its
            # event taken here or the flag down (and then wakes the thread), never neither.
            self._wake_armed = False
            self._absorb_locked()
            runnable = (
                self._welcomed
                and bool(self._queue)
                and len(self._window) < WINDOW_EVENTS
                and len(self._out) < _BATCH_BYTES
            )
            self._wake_armed = runnable or bool(self._queue)
        wanted = selectors.EVENT_READ | (selectors.EVENT_WRITE if self._out else 0)
        selector.modify(sock, wanted)
        for key, mask in selector.select(0 if runnable else 1.0):
            if key.fd == self._wake_r:
                self._drain_wake()
                continue
            if mask & selectors.EVENT_WRITE and self._out and not self._send_out(sock, selector):
                return
            if mask & selectors.EVENT_READ:
                try:
                    data = sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    data = b""
                    self._note_error(f"receive failed: {exc}")
                if not data:
                    self._note_error("the collector closed the connection")
                    self._drop_connection(selector)
                    return
                try:
                    for body in self._reader.feed(data):
                        self._handle_reply(body, selector)
                except (FrameTooLarge, msgspec.DecodeError, ProtocolError) as exc:
                    self._note_error(f"bad reply from the collector: {exc}")
                    self._drop_connection(selector)
                    return
                if self._sock is None:
                    return

    def _send_out(self, sock: socket.socket, selector: selectors.BaseSelector) -> bool:
        """Send what the socket takes of the output now; False if the connection failed (dropped)."""
        try:
            sent = sock.send(self._out)
        except BlockingIOError:
            return True
        except OSError as exc:
            self._note_error(f"send failed: {exc}")
            self._drop_connection(selector)
            return False
        del self._out[:sent]
        return True

    def _note_error(self, message: str) -> None:
        with self._lock:
            self._last_error = message

    def _fill_output(self) -> None:
        """Move events into batch frames while the window and the output buffer have room.

        Order: what the window holds unsent (after a reconnect), then the spool (older), then loss
        notices, then the queue. Producer numbers therefore reach the collector in increasing order.

        Nothing is sent before the Welcome. When it names several shares, each batch holds one
        share's events, after a Route frame: new events are grouped by share before they are
        numbered (a session's events keep their order), and a batch of numbered ones (resent, or
        from the spool) is cut where the share changes.
        """
        if not self._welcomed:
            return
        owners = self._owners
        routed = owners.shares > 1
        while len(self._out) < _BATCH_BYTES:
            self._load_spool()
            items: list[_Item] = []
            runs: list[tuple[int, list[_Item]]] | None = None  # each share's part, when grouped here
            size = 0
            with self._lock:
                if self._permanent_error is not None:
                    return
                self._absorb_locked()
                while self._window_sent < len(self._window) and len(items) < MAX_BATCH_EVENTS:
                    item = self._window[self._window_sent]
                    # A batch numbers its events first, first + 1, ...: it never spans a gap.
                    if items and (size + len(item.body) > _BATCH_BYTES or item.pseq != items[-1].pseq + 1):
                        break
                    items.append(item)
                    size += len(item.body)
                    self._window_sent += 1
                if not items:
                    spool_pending = bool(self._spool_buffer) or (self._spool is not None and not self._spool.empty)
                    if spool_pending:
                        source = self._spool_buffer
                    else:
                        if self._losses:
                            self._queue.extendleft(reversed(self._loss_notices_locked()))
                            self._queued_bytes = sum(len(item.body) for item in self._queue)
                        source = self._queue
                    # Hot under load: counters kept in locals, written back once per batch.
                    room = min(MAX_BATCH_EVENTS, WINDOW_EVENTS - len(self._window))
                    byte_room = WINDOW_BYTES - self._window_bytes
                    first_pseq = next_pseq = self._next_pseq
                    last = 0
                    while source and len(items) < room and size < byte_room:
                        item = source[0]
                        length = len(item.body)
                        pseq = item.pseq
                        if items and (size + length > _BATCH_BYTES or (pseq != 0 and pseq != last + 1)):
                            break
                        source.popleft()
                        if length > MAX_EVENT_BYTES:  # submit() lets none in: refused alone if one got here
                            if source is self._queue:
                                self._queued_bytes -= length
                            if item.segment is not None:
                                self._settle_spooled_locked(item.segment)
                            self._refuse_locked(length, item.session_id, item.waiter)
                            continue
                        if pseq == 0:
                            pseq = item.pseq = next_pseq
                            next_pseq += 1
                        last = pseq
                        items.append(item)
                        size += length
                    self._next_pseq = next_pseq
                    if routed and next_pseq - first_pseq == len(items):  # all new: group them
                        runs = _grouped_by_share(items, owners, first_pseq)
                        items = [item for _, run in runs for item in run]
                    if source is self._queue:
                        self._queued_bytes -= size
                    self._window.extend(items)
                    self._window_bytes += size
                    self._window_sent += len(items)
            if not items:
                return
            if not routed:
                self._out += _batch_frame(items)
                continue
            for share, run in runs if runs is not None else _cut_by_share(items, owners):
                self._out += _route_frame(share) + _batch_frame(run)

    def _handle_reply(self, body: bytes, selector: selectors.BaseSelector) -> None:
        message = collector_message_decoder.decode(body)
        match message:
            case Welcome():
                self._backoff = _BACKOFF_MIN
                self._welcomed = True
                if message.shares != self._owners.shares:
                    self._owners = Owners(max(1, message.shares))
            case Verdicts():
                if self._settle(message):
                    _give_way()  # the woken send() returns now, not after this round
            case Report():
                pass
            case Error():
                self._note_error(f"collector error {message.reason}: {message.detail}")
                if message.reason in _PERMANENT:
                    self._refuse_everything(message)
                if message.fatal:
                    self._drop_connection(selector)

    def _refuse_everything(self, error: Error) -> None:
        # The collector will never take these events over this root: refuse them all, loudly.
        exc = EventRejected(error.reason, error.detail)
        with self._lock:
            self._permanent_error = error.detail
            self._absorb_locked()
            for item in (*self._window, *self._queue):
                self._rejected += 1
                if item.waiter is not None and not item.waiter.done():
                    item.waiter.set_exception(exc)
            self._window.clear()
            self._window_bytes = 0
            self._window_sent = 0
            self._queue.clear()
            self._queued_bytes = 0
            self._changed.notify_all()

    def _settle_spooled_locked(self, segment: Path) -> None:
        self._spooled -= 1
        remaining = self._segment_pending.get(segment, 0) - 1
        if remaining > 0:
            self._segment_pending[segment] = remaining
            return
        self._segment_pending.pop(segment, None)
        if self._spool is not None:
            self._spool.release(segment)

    def _settle(self, verdicts: Verdicts) -> bool:
        """Settle the window's events up to the end of ``verdicts``; tell whether a waiter was woken."""
        rejected = {rejection.index: rejection for rejection in verdicts.rejected}
        last = verdicts.first + verdicts.count
        first = verdicts.first
        with self._lock:
            window = self._window
            settled = refused = freed = 0
            woke = False
            while window and window[0].pseq < last:
                item = window.popleft()
                settled += 1
                freed += len(item.body)
                if item.segment is not None:
                    self._settle_spooled_locked(item.segment)
                if not rejected and item.waiter is None:
                    continue  # the common case: accepted, nobody waiting
                offset = item.pseq - first
                rejection = rejected.get(offset)
                if rejection is not None:
                    refused += 1
                    self._last_error = f"event rejected: {rejection.reason}: {rejection.detail}"
                    if item.waiter is not None and not item.waiter.done():
                        item.waiter.set_exception(EventRejected(rejection.reason, rejection.detail))
                elif item.waiter is not None and not item.waiter.done():
                    seq = verdicts.seqs[offset] if 0 <= offset < len(verdicts.seqs) else 0
                    item.waiter.set_result(Verdict(seq=max(seq, 0), duplicate=seq < 0))
                    woke = True
            self._accepted += settled - refused
            self._rejected += refused
            self._window_bytes -= freed
            self._window_sent = max(0, self._window_sent - settled)
            self._changed.notify_all()
        return woke


def _batch_frame(items: list[_Item]) -> bytes:
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


def _grouped_by_share(items: list[_Item], owners: Owners, first_pseq: int) -> list[tuple[int, list[_Item]]]:
    """Each share's part of ``items`` (just numbered ``first_pseq``, ``first_pseq + 1``, … in queue
    order), numbered again share after share, so that each part is a batch of consecutive numbers.
    Stable: a session's events keep their order."""
    groups: list[list[_Item]] = [[] for _ in range(owners.shares)]
    for item in items:
        groups[owners[item.session_id]].append(item)
    runs = [(share, group) for share, group in enumerate(groups) if group]
    pseq = first_pseq
    for _, run in runs:
        for item in run:
            item.pseq = pseq
            pseq += 1
    return runs


def _cut_by_share(items: list[_Item], owners: Owners) -> list[tuple[int, list[_Item]]]:
    """``items`` (numbered already: resent, or from the spool) cut where the share changes."""
    runs: list[tuple[int, list[_Item]]] = []
    start = 0
    share = owners[items[0].session_id]
    for index in range(1, len(items)):
        owner = owners[items[index].session_id]
        if owner != share:
            runs.append((share, items[start:index]))
            start, share = index, owner
    runs.append((share, items[start:]))
    return runs


def _drain_all_at_exit() -> None:
    timeout = float(os.environ.get("GZ_IA_EXIT_TIMEOUT", "2") or 2)
    deadline = time.monotonic() + timeout
    for sender in list(_live_senders):
        sender.close(max(0.0, deadline - time.monotonic()))


def _reset_all_after_fork() -> None:
    for sender in list(_live_senders):
        sender._after_fork_in_child()


atexit.register(_drain_all_at_exit)
os.register_at_fork(after_in_child=_reset_all_after_fork)
