"""The background sender: one thread per client that owns the socket.

Agent threads only encode an event and append it to a bounded queue (:meth:`Sender.submit`); they
never touch the socket, never wait for the collector and never raise because of it. The sender
thread connects with a timeout, sends queued events in batches (:mod:`._batcher`), keeps every sent
event in a window until the collector's verdict arrives, and after a reconnect resends the window
with the same producer numbers so that the collector can drop what it had already written
(exactly-once).

The queue holds at most ``max_events`` events and ``max_bytes`` encoded bytes; what does not fit is
spilled to a disk spool or, past that, dropped and reported into its session (:mod:`._losses`). An
event whose encoding is larger than a frame can carry is never queued: it is refused alone, so every
batch fits in a frame. At exit the client delivers for ``GZ_IA_EXIT_TIMEOUT`` seconds (2 by default),
then spools the rest, and the notices of losses not yet reported, for the collector to adopt.
"""

from __future__ import annotations

import contextlib
import os
import random
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from . import trust
from ._batcher import BATCH_BYTES, WINDOW_EVENTS, Batcher
from ._delivery import Counters, SenderStats, Verdict
from ._lifecycle import live_senders
from ._losses import Losses
from ._queue import CALL_BYTES, EventQueue, Item, new_producer_id
from .errors import CollectorUnavailable, ProtocolError
from .protocol import (
    MAX_EVENT_BYTES,
    PROTOCOL_VERSION,
    Error,
    FrameReader,
    FrameTooLarge,
    Hello,
    RejectReason,
    Report,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
)
from .spool import Spool

if TYPE_CHECKING:
    import concurrent.futures

__all__ = ["Sender"]

INBOX_EVENTS: Final = 128
"""Events an agent thread may add without taking the lock before it moves them into the queue itself
(and, while the sender thread lingers, wakes it: see ``_LINGER_EVENTS``)."""
_LAGGING_EVENTS: Final = 4096
"""Queued events past which an agent thread that moves its inbox into the queue gives the sender
thread a turn (:func:`_give_way`): once per ``_TURN_EVENTS`` events, while connected."""
_TURN_EVENTS: Final = 256
_LINGER_EVENTS: Final = INBOX_EVENTS
"""Queued events that make a frame worth sending without waiting out the linger: few enough that at
a thousand events a second they go out well before the linger would send them, as the live view
needs (the agent thread that brings the inbox to this size wakes the lingering sender thread)."""
_BACKOFF_MIN: Final = 0.05
_QUEUE_FULL_WAIT: Final = 0.01
"""Seconds between connects while the collector's accept queue is full (see ``Sender._connect``)."""
_BACKOFF_MAX: Final = 2.0
_IDLE_WAIT: Final = 10.0
"""Longest the connected sender thread sleeps with nothing to do. Every event, waiter, spill and
close that needs it wakes it, and so does the collector's every answer: this bounds the sleep, it is
not a poll. Kept long: an agent that waits seconds for its model between bursts would pay a cold
pass through this thread each time it ran out."""
# Reasons after which retrying the same connection cannot succeed: the events are refused.
_PERMANENT: Final = frozenset(
    {RejectReason.ROOT_NOT_ALLOWED, RejectReason.PERMISSION_DENIED, RejectReason.UNSUPPORTED_VERSION}
)


def _give_way() -> None:
    """Release the GIL for a moment, so that the other side's thread, waiting for it, runs now.

    A busy thread holds the GIL for a whole switch interval (``sys.getswitchinterval()``). An agent
    thread logging in a busy loop gives the sender thread a turn every ``_TURN_EVENTS`` events while
    the queue lags (else several such agents would finish logging before delivery began); the sender
    thread gives a ``send()`` it has just woken its turn at once.
    """
    time.sleep(0)


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
        linger: seconds a queued event may wait for others to share its frame (see :meth:`_holding`).
        encode_call: builds and encodes the event of a ``log()`` call left in the inbox as a tuple.

    Composed of parts with narrow faces, each given the one lock (and its condition) it takes: an
    :class:`~._queue.EventQueue` (inbox, bounded queue, producer numbers), :class:`~._losses.Losses`
    (spool, drops, refusals, loss notices), a :class:`~._batcher.Batcher` (the window and the frames),
    all counting into one :class:`~._delivery.Counters`. This class keeps the thread, the socket, the
    wake-up pipe and the linger, and decides when agent threads may go on without the lock (``ready``).

    A ``log()`` call reaches the sender without a method call: :class:`~gz_ia.client.Client` appends
    the call's tuple (its session id second) to ``inbox``, returns if ``ready`` is up and the inbox
    is short, and otherwise calls :meth:`take_inbox`.
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
        linger: float = 0.0,
        encode_call: Callable[[tuple[Any, ...]], bytes],
    ) -> None:
        if max_events < 1 or max_bytes < 1:
            raise ValueError("buffer bounds must be positive")
        if linger < 0:
            raise ValueError("linger must not be negative")
        self.socket_path = socket_path
        self.root = root
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.connect_timeout = connect_timeout
        self.spool_dir = spool_dir
        self.max_spool_bytes = max_spool_bytes
        self.linger = linger
        self.encode_call = encode_call
        self._init_state()
        live_senders.add(self)

    def _init_state(self) -> None:
        # Everything a forked child must not share with its parent is made here: the parts, the
        # lock they share, the wake-up pipe.
        self.producer = new_producer_id()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._counters = Counters()
        self._events = EventQueue(
            max_events=self.max_events,
            max_bytes=self.max_bytes,
            encode_call=self.encode_call,
            counters=self._counters,
            on_absorbed=self._update_ready_locked,
        )
        self.inbox = self._events.inbox
        """Where ``log()`` leaves its calls without the lock (the queue's inbox)."""
        spool = (
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
        self._losses = Losses(
            self._events, self._counters, self._lock, self._changed, spool=spool, socket_path=str(self.socket_path)
        )
        self._batcher = Batcher(self._events, self._losses, self._counters, self._lock, self._changed)
        self.ready = False
        """Whether an agent thread may leave a call in the inbox and return, taking no lock: the
        sender thread is sure to come round, nothing is closing, and the queue has room for a whole
        inbox (see :meth:`_update_ready_locked`)."""
        self._closing = False
        self._closed = False
        self._spooled_said = 0
        """Spooled events already named on stderr: a second close (the exit handler's) names only new ones."""
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_armed = False
        self._wake_wanted = True
        self._sock: socket.socket | None = None
        self._reader = FrameReader()
        self._backoff = _BACKOFF_MIN
        self._retry_at = 0.0
        self._unturned = 0
        """Events agent threads moved into the queue since one of them last gave the sender a turn."""
        self._hold_until = 0.0
        """While events are held back (the linger), when they go out at the latest; 0 when none are."""
        self._send_now = False
        """A caller waits for a verdict: the queue goes out at once, linger or not."""
        self._flushing = 0
        """Callers in :meth:`flush`: while there are any, nothing is held back."""

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
        inbox = self.inbox
        inbox.append(Item(body, session_id, waiter))
        # Only a hint for taking the slow path in time (unlocked, so racy); the lock holder recounts.
        self._events.inbox_bytes += len(body)
        if (
            waiter is None
            and len(inbox) < INBOX_EVENTS
            and self.ready
            and self._events.queued_bytes + self._events.inbox_bytes + INBOX_EVENTS * CALL_BYTES <= self.max_bytes
        ):
            return
        self.take_inbox(waiter)

    def take_inbox(self, waiter: concurrent.futures.Future[Verdict] | None = None) -> None:
        """Move the inbox into the queue under the lock, and see that the sender thread comes round:
        start it, wake it, let it spill or give it a turn, as the queue's state asks."""
        inbox = self.inbox
        with self._lock:
            if self._closed:
                # close() has taken its leftovers: what arrives now can only be counted as lost.
                while inbox:
                    item = inbox.popleft()
                    self._counters.dropped += 1
                    if isinstance(item, Item) and item.waiter is not None and not item.waiter.done():
                        item.waiter.set_exception(
                            CollectorUnavailable("the client is closed", socket_path=str(self.socket_path))
                        )
                return
            if self._closing:
                self._events.absorb_locked()  # close() spools or counts what it finds queued
                return
            events = self._events
            losses = self._losses
            self._unturned += events.absorb_locked()
            queue = events.items
            if len(queue) > losses.hard_events or events.queued_bytes > losses.hard_bytes:
                # The sender thread spills past 1x; dropping here is the last resort when it lags.
                losses.drop_oldest_locked(losses.hard_factor)
            if self._thread is None:
                self._start_locked()
            lagging = self._unturned >= _TURN_EVENTS and len(queue) >= _LAGGING_EVENTS and self._counters.connected
            if lagging:
                self._unturned = 0
            # While the thread waits out a reconnect backoff, new events need not wake it (each
            # wake-up costs the agent a GIL hand-over); a waiter or a spill still does. A spill
            # wakes it even when it is due to come round anyway: it may be waiting a second for a
            # collector that has stopped answering, and past 4x the bound this call would drop.
            spill = losses.spool is not None and not losses.spill_wanted and events.over_bound_locked(1)
            # A waiter, or a frame's worth of events, ends a linger: the thread may be sleeping it out.
            urgent = waiter is not None or (self._hold_until != 0.0 and len(queue) >= _LINGER_EVENTS)
            if waiter is not None:
                self._send_now = True
            wake = spill or urgent or (not self._wake_armed and (self._wake_wanted or len(queue) > self.max_events))
            if wake:
                self._wake_armed = True
            if spill:
                losses.spill_wanted = True
            self._update_ready_locked()
        if wake:
            self._wake()
        if lagging:
            _give_way()

    def _update_ready_locked(self) -> None:
        events = self._events
        self.ready = (
            (self._wake_armed or not self._wake_wanted)
            and not self._closing
            and self._thread is not None
            and len(events.items) + INBOX_EVENTS <= self.max_events
            and events.queued_bytes + events.inbox_bytes + INBOX_EVENTS * CALL_BYTES <= self.max_bytes
        )

    def _refuse(self, size: int, session_id: str, waiter: concurrent.futures.Future[Verdict] | None) -> None:
        """Refuse one event no frame can carry, alone: counted, reported in its session, the rest goes on.

        Nothing past this bound is ever queued, so every batch fits in a frame: one agent's oversized
        input can never stop the sender thread or the events after it.
        """
        with self._lock:
            self._losses.refuse_locked(size, session_id, waiter)
            if self._thread is None and not self._closing and not self._closed:
                self._start_locked()  # to deliver the loss notice
        self._wake()

    def count_invalid(self, error: Exception) -> None:
        """Record an event that could not even be built (a bad argument at the call site)."""
        with self._lock:
            self._counters.invalid += 1
            self._counters.last_error = f"invalid event: {error}"

    def flush(self, timeout: float | None) -> bool:
        """Wait until every queued event has its verdict; return False if ``timeout`` ran out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._events.absorb_locked()
            if self._events.items and self._thread is None:
                self._start_locked()
            self._flushing += 1
            try:
                if self._hold_until != 0.0:
                    self._wake()  # the thread may be sleeping out a linger
                while (
                    self.inbox
                    or self._events.items
                    or self._batcher.window
                    or self._counters.spooled
                    or self._losses.unreported
                ):
                    if self._counters.permanent_error is not None:
                        return False
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._changed.wait(remaining)
                return True
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None) -> None:
        """Deliver for at most ``timeout`` seconds, spool what is left, then stop the thread."""
        self.flush(timeout)
        with self._lock:
            self._closing = True
            self.ready = False
            thread = self._thread
        self._wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        with self._lock:
            self._events.absorb_locked()
            self._closed = self._losses.closed = True
            leftovers = [*self._batcher.window, *self._events.items]
            self._batcher.window.clear()
            self._batcher.window_bytes = 0
            self._events.clear_locked()
            self._events.assign_pseqs_locked(leftovers)
        self._losses.spool_leftovers(leftovers)
        if self._losses.spool is not None:
            self._losses.spool_loss_notices()
            self._losses.spool.close()
            self._say_spooled(timeout)

    def _say_spooled(self, timeout: float | None) -> None:
        """Say on stderr how many events this client leaves in its spool, if any.

        They are safe, but late: a collector delivers them when it next adopts the spool, which may be
        much later than the agent's user expects (a collector that is down, or too slow to take a
        burst within the exit timeout). A line at exit explains events that appear only then.
        """
        with self._lock:
            spooled = self._counters.spooled - self._spooled_said
            self._spooled_said = self._counters.spooled
            if spooled:
                self._counters.last_error = f"{self._counters.spooled} event(s) left in the spool at close"
        if spooled <= 0 or self._losses.spool is None:
            return  # none, or named by an earlier close (``close()`` and then the exit handler)
        within = "" if timeout is None else f" within {round(timeout, 1):g} s"
        with contextlib.suppress(Exception):  # a closed or broken stderr must not fail the agent's exit
            sys.stderr.write(
                f"gz-ia: {spooled} event(s) not delivered{within} were spooled to {self._losses.spool.directory}; "
                f"the collector at {self.socket_path} delivers them when it takes the spool "
                "(at its start, or within seconds while it runs)\n"
            )
            sys.stderr.flush()

    def stats(self) -> SenderStats:
        """Return a consistent snapshot of the counters."""
        with self._lock:
            self._events.absorb_locked()  # so that a call that cannot be built is counted by now
            return self._counters.snapshot(
                queued=len(self._events.items) + len(self.inbox), unacknowledged=len(self._batcher.window)
            )

    # --- internals shared by both sides -----------------------------------------------------------

    def _start_locked(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gz-ia-sender", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"\0")

    def after_fork_in_child(self) -> None:
        """Start afresh in a forked child (called by :mod:`._lifecycle`)."""
        # The parent's queue, window, socket and thread belong to the parent: start afresh.
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.detach()
        if self._losses.spool is not None:
            self._losses.spool.forget_after_fork()
        self._init_state()

    # --- the sender thread ------------------------------------------------------------------------

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ)
        # Only the wake-up pipe: what this thread waits on while it holds events back (see _pump).
        lingering = selectors.DefaultSelector()
        lingering.register(self._wake_r, selectors.EVENT_READ)
        try:
            while True:
                with self._lock:
                    if self._closing:
                        return
                self._losses.spill()
                if self._sock is None:
                    delay = self._retry_at - time.monotonic()
                    if delay > 0:
                        with self._lock:
                            self._wake_wanted = False
                            self._wake_armed = False
                            self._update_ready_locked()
                        self._wait_for_wake(selector, delay)
                        with self._lock:
                            self._wake_wanted = True
                            self._update_ready_locked()
                        continue
                    if not self._connect(selector):
                        self._fail_waiters_on_unavailable()
                        self._schedule_retry()
                        continue
                self._pump(selector, lingering)
                if self._sock is None:
                    self._schedule_retry()
        except Exception as exc:  # pragma: no cover - last line of defence: never crash the agent
            with self._lock:
                self._counters.last_error = f"sender thread failed: {exc!r}"
                self._thread = None
                self.ready = False
        finally:
            self._drop_connection(selector)
            selector.close()
            lingering.close()

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
                trust.connect(sock, str(self.socket_path))  # refuses another user's socket, sends nothing
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
                    self._counters.last_error = f"cannot connect to {self.socket_path}: {exc.strerror or exc}"
                return False
        hello = Hello(
            proto=PROTOCOL_VERSION,
            producer=self.producer,
            pid=os.getpid(),
            root=str(self.root),
            program=Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "",
            routes=True,
        )
        self._batcher.start_connection(encode_frame(hello))
        self._sock = sock
        self._reader = FrameReader()
        selector.register(sock, selectors.EVENT_READ)
        with self._lock:
            if self._counters.reconnects or self._batcher.window:
                self._counters.reconnects += 1
            self._counters.connected = True
            self._batcher.window_sent = 0  # everything in the window is resent on this connection
            self._counters.permanent_error = None
        return True

    def _drop_connection(self, selector: selectors.BaseSelector) -> None:
        if self._sock is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(self._sock)
        self._sock.close()
        self._sock = None
        with self._lock:
            self._counters.connected = False
            self._batcher.window_sent = 0
            self._changed.notify_all()

    def _fail_waiters_on_unavailable(self) -> None:
        error = CollectorUnavailable(
            f"no collector at {self.socket_path}: {self._counters.last_error}", socket_path=str(self.socket_path)
        )
        with self._lock:
            self._events.absorb_locked()
            for item in (*self._batcher.window, *self._events.items):
                if item.waiter is not None and not item.waiter.done():
                    item.waiter.set_exception(error)
            self._changed.notify_all()

    def _pump(self, selector: selectors.BaseSelector, lingering: selectors.BaseSelector) -> None:
        """One round of the connected loop: fill the output, wait for I/O, handle it.

        While a linger period runs and nothing waits to be written, the thread sleeps on the wake-up
        pipe alone (``lingering``) until the period ends: the verdict of the batch it has just sent
        is read at the period's end, in the same wake-up as the next batch, rather than waking it
        once more.
        """
        assert self._sock is not None
        sock = self._sock
        now = time.monotonic()
        holding = self._holding(now)
        self._batcher.fill_output(hold_queue=holding)
        # The socket nearly always takes a new batch at once: sending it now, not after one more
        # select round, is a good part of a lone send()'s round trip.
        if self._batcher.out and not self._send_out(sock, selector):
            return
        with self._lock:
            # More to send and room for it: go round again at once. Otherwise block; and only when
            # the queue is empty must the next submit() write to the wake-up pipe (under load the
            # thread never blocks on an empty queue, so agents never pay for a wake-up).
            # Disarmed before the inbox is looked at: a submit() racing with this sees either its
            # event taken here or the flag down (and then wakes the thread), never neither.
            self._wake_armed = False
            self.ready = False
            self._events.absorb_locked()
            runnable = (
                not holding
                and self._batcher.welcomed
                and bool(self._events.items)
                and len(self._batcher.window) < WINDOW_EVENTS
                and len(self._batcher.out) < BATCH_BYTES
            )
            # While a linger period runs (held events, or a new period started by the batch just
            # sent), this thread comes round at its end: no event needs to wake it.
            lingers = not runnable and self._hold_until > now
            self._wake_armed = runnable or lingers or bool(self._events.items)
            self._update_ready_locked()
        if lingers and not self._batcher.out:
            # What the collector has answered meanwhile (the last batch's verdicts) is read now,
            # without waiting: the wait below does not watch the socket.
            if self._receive(sock, selector):
                self._wait_for_wake(lingering, self._hold_until - now)
            return
        wanted = selectors.EVENT_READ | (selectors.EVENT_WRITE if self._batcher.out else 0)
        selector.modify(sock, wanted)
        for key, mask in selector.select(0.0 if runnable else _IDLE_WAIT):
            if key.fd == self._wake_r:
                self._drain_wake()
                continue
            if mask & selectors.EVENT_WRITE and self._batcher.out and not self._send_out(sock, selector):
                return
            if mask & selectors.EVENT_READ and not self._receive(sock, selector):
                return

    def _receive(self, sock: socket.socket, selector: selectors.BaseSelector) -> bool:
        """Read and handle what the collector has sent, without waiting; False if the connection
        ended (dropped)."""
        try:
            data = sock.recv(1 << 16)
        except BlockingIOError:
            return True
        except OSError as exc:
            data = b""
            self._note_error(f"receive failed: {exc}")
        if not data:
            self._note_error("the collector closed the connection")
            self._drop_connection(selector)
            return False
        try:
            for body in self._reader.feed(data):
                self._handle_reply(body, selector)
        except (FrameTooLarge, msgspec.DecodeError, ProtocolError) as exc:
            self._note_error(f"bad reply from the collector: {exc}")
            self._drop_connection(selector)
            return False
        return self._sock is not None

    def _holding(self, now: float) -> bool:
        """Tell whether new events wait a little longer for others to share their frame (the linger).

        An event logged alone would go out in a frame of its own: a wake-up of this thread, a
        ``send``, a verdict to read, each paid again for the next event a few milliseconds later.
        Held back for at most ``linger`` seconds, it goes out with those logged meanwhile (Kafka's
        ``linger.ms``, Fluent Bit's flush interval). A linger period starts when this thread finds
        events queued; when it ends with events queued they go out and the next period starts at
        once, so that a steady trickle costs one wake-up of this thread per period and none of the
        agent's threads has to wake it; a period that ends with nothing queued ends the lingering.
        Nothing is held once a frame's worth is queued, nor while a caller waits for a verdict,
        flushes or closes. Held events are in memory only, as every queued event is.
        """
        with self._lock:
            self._events.absorb_locked()
            queued = bool(self._events.items)
            if not queued:
                self._send_now = False  # what the waiter came with is on its way
            if (
                self.linger <= 0
                or self._send_now
                or self._flushing
                or self._closing
                or len(self._events.items) >= _LINGER_EVENTS
                or self._events.queued_bytes >= BATCH_BYTES
            ):
                self._hold_until = 0.0
                return False
            if self._hold_until == 0.0:
                if not queued:
                    return False
                self._hold_until = now + self.linger
            if now < self._hold_until:
                return True
            self._hold_until = now + self.linger if queued else 0.0
            return False

    def _send_out(self, sock: socket.socket, selector: selectors.BaseSelector) -> bool:
        """Send what the socket takes of the output now; False if the connection failed (dropped)."""
        try:
            sent = sock.send(self._batcher.out)
        except BlockingIOError:
            return True
        except OSError as exc:
            self._note_error(f"send failed: {exc}")
            self._drop_connection(selector)
            return False
        del self._batcher.out[:sent]
        return True

    def _handle_reply(self, body: bytes, selector: selectors.BaseSelector) -> None:
        message = collector_message_decoder.decode(body)
        match message:
            case Welcome():
                self._backoff = _BACKOFF_MIN
                self._batcher.welcome(message.shares)
            case Verdicts():
                if self._batcher.settle(message):
                    _give_way()  # the woken send() returns now, not after this round
            case Report():
                pass
            case Error():
                self._note_error(f"collector error {message.reason}: {message.detail}")
                if message.reason in _PERMANENT:
                    self._batcher.refuse_everything(message)
                if message.fatal:
                    self._drop_connection(selector)

    def _note_error(self, message: str) -> None:
        with self._lock:
            self._counters.last_error = message
