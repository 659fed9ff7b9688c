"""What becomes of events the sender cannot deliver now, or ever: spilled, read back, dropped, refused.

Past the queue's bound (``max_events`` events or ``max_bytes`` encoded bytes) the sender thread spills
the oldest queued events to a disk spool (:mod:`.spool`), delivered first once the collector is back
(:meth:`Losses.load_spool`). Past the spool's own bound, or four times the queue's bound before the
thread gets to it, the oldest events are dropped, counted in ``stats().dropped``, and reported into
each affected session as a READ + FINISH FAILED pair of the action ``gz-ia.dropped #<n>`` (agent
``gz-ia``), so that a loss is never silent. An event whose encoding is larger than a frame can carry
(:data:`~gz_ia.client.protocol.MAX_EVENT_BYTES`) is refused alone, counted in ``stats().rejected`` and
reported the same way.
"""

from __future__ import annotations

import collections
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgspec

from ._queue import Item
from .errors import CollectorUnavailable, EventRejected
from .protocol import MAX_EVENT_BYTES, RejectReason
from .schema import AttrValue, LogEvent, Stage, Status, is_safe_session_id
from .spool import Spool, SpoolRecord

if TYPE_CHECKING:
    import concurrent.futures
    import threading
    from pathlib import Path

    from ._delivery import Counters, Verdict
    from ._queue import EventQueue

__all__ = ["DROPPED_ACTION", "Losses"]

_HARD_FACTOR: Final = 4
"""With a spool, the queue may briefly hold this many times its bound before the sender thread
(which spills, off the agent's thread) catches up; past it the agent's call drops the oldest."""
DROPPED_ACTION: Final = "gz-ia.dropped"
_DROPPED: Final = "dropped"
"""The cause of a loss for want of room (queue and spool full), as opposed to a refused event."""
_notice_encoder: Final = msgspec.msgpack.Encoder()


class Losses:
    """The spool, events read back from it, and the losses counted until their notices are sent.

    Args:
        events: the sender's queue, whose oldest events this spills and drops.
        counters: where spills, drops and refusals are counted.
        lock: the sender's lock; the ``_locked`` methods are called holding it, the others take it.
        changed: the condition over it, notified when an event is settled (refused, dropped).
        spool: the disk spool, or None when the client has none (events past the bound are dropped).
        socket_path: the collector's socket, named in the errors of waiting callers.
    """

    def __init__(
        self,
        events: EventQueue,
        counters: Counters,
        lock: threading.Lock,
        changed: threading.Condition,
        *,
        spool: Spool | None,
        socket_path: str,
    ) -> None:
        self._events = events
        self._counters = counters
        self._lock = lock
        self._changed = changed
        self.spool = spool
        self._socket_path = socket_path
        self.spill_wanted = False
        """An agent thread has woken the sender thread to spill the queue's excess (once per spill)."""
        self.closed = False
        """The sender is closed: a refused event's loss is no longer reported (no notice could be sent)."""
        self._segment_pending: dict[Path, int] = {}
        self.spool_buffer: collections.deque[Item] = collections.deque()
        """Events read back from the spool, sent before anything newer."""
        self._losses: dict[tuple[str, str], int] = {}
        """Events lost since the last notices, by session and cause (``_DROPPED`` or a reject reason)."""
        self._notices = 0
        self.hard_factor = _HARD_FACTOR if spool is not None else 1
        self.hard_events = self.hard_factor * events.max_events
        self.hard_bytes = self.hard_factor * events.max_bytes

    @property
    def unreported(self) -> bool:
        """Losses are counted whose notices are not sent yet."""
        return bool(self._losses)

    def spool_pending(self) -> bool:
        """Events wait in the spool or were read back from it: they go before the queue."""
        return bool(self.spool_buffer) or (self.spool is not None and not self.spool.empty)

    def refuse_locked(self, size: int, session_id: str, waiter: concurrent.futures.Future[Verdict] | None) -> None:
        if not isinstance(session_id, str):
            reason, detail = RejectReason.INVALID_SESSION_ID, f"session id {session_id!r} is not a string"
        else:
            reason = RejectReason.FRAME_TOO_LARGE
            detail = f"the event takes {size} bytes encoded, more than the {MAX_EVENT_BYTES} a frame can carry"
        self._counters.rejected += 1
        self._counters.last_error = f"event refused: {reason}: {detail}"
        if reason is RejectReason.FRAME_TOO_LARGE and not self.closed:
            self._lose_locked(session_id, reason)
        if waiter is not None and not waiter.done():
            waiter.set_exception(EventRejected(reason, detail))
        self._changed.notify_all()

    def drop_oldest_locked(self, factor: int) -> None:
        events = self._events
        while events.items and events.over_bound_locked(factor):
            item = events.pop_oldest_locked()
            self._counters.dropped += 1
            self._lose_locked(item.session_id, _DROPPED)
            if item.waiter is not None and not item.waiter.done():
                item.waiter.set_exception(
                    CollectorUnavailable("dropped: the client buffer is full", socket_path=self._socket_path)
                )

    def spill(self) -> None:
        """Move the queue's oldest events beyond its bound to the disk spool (sender thread)."""
        spool = self.spool
        if spool is None:
            return
        events = self._events
        with self._lock:
            self.spill_wanted = False
            events.absorb_locked()
            if not events.over_bound_locked(1):
                return
            spilled: list[Item] = []
            while events.items and events.over_bound_locked(1):
                spilled.append(events.pop_oldest_locked())
            # Numbered now: everything still queued is newer and will get higher numbers.
            events.assign_pseqs_locked(spilled)
            self._counters.spooled += len(spilled)
        for item in spilled:
            if item.waiter is not None and not item.waiter.done():
                item.waiter.set_exception(
                    CollectorUnavailable("spooled to disk; it will be delivered later", socket_path=self._socket_path)
                )
        try:
            self._record_losses(spool.append([_record(item) for item in spilled]))
        except OSError as exc:
            with self._lock:
                self._counters.last_error = f"cannot spool to {spool.directory}: {exc}"
                self._counters.spooled -= len(spilled)
                self._counters.dropped += len(spilled)
                for item in spilled:
                    self._lose_locked(item.session_id, _DROPPED)

    def spool_leftovers(self, leftovers: list[Item]) -> None:
        """At close: spool what is still undelivered (numbered already), or count it dropped."""
        if not leftovers:
            return
        if self.spool is None:
            with self._lock:
                self._counters.dropped += len(leftovers)
            return
        with self._lock:
            self._counters.spooled += len(leftovers)
        try:
            self._record_losses(self.spool.append([_record(item) for item in leftovers]))
        except OSError:
            with self._lock:
                self._counters.spooled -= len(leftovers)
                self._counters.dropped += len(leftovers)

    def _record_losses(self, counts: dict[str, int]) -> None:
        if not counts:
            return
        with self._lock:
            for session_id, count in counts.items():
                self._lose_locked(session_id, _DROPPED, count)
                self._counters.dropped += count
                self._counters.spooled -= count

    def spool_loss_notices(self) -> None:
        """At close, spool the notices of losses not yet reported, so that the adopting collector
        writes them: a counted drop must leave its notice even when the collector never came back."""
        spool = self.spool
        if spool is None:
            return
        for _ in range(3):  # an append may drop older segments: their loss needs a notice too
            with self._lock:
                if not self._losses:
                    return
                notices = self.notices_locked()
                self._events.assign_pseqs_locked(notices)
            try:
                self._record_losses(spool.append([_record(item) for item in notices]))
            except OSError as exc:
                with self._lock:
                    self._counters.last_error = f"cannot spool loss notices to {spool.directory}: {exc}"
                return

    def load_spool(self) -> None:
        """Read the oldest spool segment back so that it is sent before anything newer."""
        spool = self.spool
        if spool is None or self.spool_buffer or spool.empty:
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
            item = Item(bytes(record.body), record.session_id)
            item.pseq = record.pseq
            item.segment = path
            items.append(item)
        with self._lock:
            self._segment_pending[path] = len(items)
            self.spool_buffer.extend(items)

    def settle_spooled_locked(self, segment: Path) -> None:
        """One event read back from ``segment`` has its verdict: release the segment after its last."""
        self._counters.spooled -= 1
        remaining = self._segment_pending.get(segment, 0) - 1
        if remaining > 0:
            self._segment_pending[segment] = remaining
            return
        self._segment_pending.pop(segment, None)
        if self.spool is not None:
            self.spool.release(segment)

    def _lose_locked(self, session_id: str, cause: str, count: int = 1) -> None:
        """Count a loss to report in its session; none for an id the collector would refuse anyway."""
        if isinstance(session_id, str) and is_safe_session_id(session_id):
            key = (session_id, cause)
            self._losses[key] = self._losses.get(key, 0) + count

    def notices_locked(self) -> list[Item]:
        """Turn counted losses into READ + FINISH FAILED pairs in each affected session."""
        notices: list[Item] = []
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
                notices.append(Item(_notice_encoder.encode(event), session_id))
        self._losses.clear()
        return notices


def _record(item: Item) -> SpoolRecord:
    return SpoolRecord(item.pseq, item.session_id, msgspec.Raw(item.body))
