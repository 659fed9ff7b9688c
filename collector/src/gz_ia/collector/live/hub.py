"""Replayable live subscriptions: bounded rings of written events, and cursors into them.

Every event the collector writes is copied, once written, into the ring of its *source* (the session
root it was written to). A subscriber is only a cursor in one ring: the producer appends and wakes
the subscribers, and never waits for one; a slow subscriber only falls behind.

The rules (docs/protocol.md, "Live subscriptions"):

- Sequence numbers start at 1 per source, and a hub (one per collector start) draws a random
  ``epoch``: a ``seq`` means nothing outside its epoch.
- Frames are kept from the first subscription of the hub on (before it nobody can hold a cursor
  of this epoch, so a replay from before it is a ``lagged`` gap). Each ring keeps at most
  :data:`RING_FRAMES` frames and :data:`RING_BYTES` bytes, and all rings share
  :data:`TOTAL_BYTES`; past a bound the oldest frame (of its ring, or of all rings for the shared
  budget) is evicted.
- ``since_seq`` with the hub's epoch replays the frames after it that are still buffered, then goes
  on live; a ``since_seq`` past the newest frame is refused (:class:`InvalidSince`). With another
  epoch, or none, the subscriber gets a :class:`Lagged` with ``epoch_changed`` and then every frame
  still buffered.
- A gap is reported, never skipped: a cursor on frames that no longer exist gets
  ``Lagged(from_seq, resume_seq)`` and goes on at ``resume_seq``; a replay batch stops at a gap.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import secrets
from collections.abc import Callable
from typing import Final

from gz_ia.collector.errors import CollectorError

__all__ = [
    "FRAME_OVERHEAD",
    "RING_BYTES",
    "RING_FRAMES",
    "TOTAL_BYTES",
    "Frame",
    "Hub",
    "InvalidSince",
    "Lagged",
    "Ring",
    "Subscription",
]

RING_FRAMES: Final = 2048
RING_BYTES: Final = 4 << 20
TOTAL_BYTES: Final = 16 << 20
FRAME_OVERHEAD: Final = 96
"""Bytes a frame is counted for beyond its line (the object and its slots), so that many tiny
events cannot hold much more memory than the budget says."""


class Frame:
    """One written event as a subscriber takes it: its ``seq`` in the source, its session and its
    stored line. Made only when taken: the ring itself keeps plain lines (see :class:`Ring`)."""

    __slots__ = ("event", "line", "seq", "session_id")

    def __init__(self, seq: int, session_id: str, line: bytes) -> None:
        self.seq = seq
        self.session_id = session_id
        self.line = line
        """The stored JSON line, without its newline."""
        self.event: object = None
        """The line decoded, kept by the filter that needed it (see :mod:`.selection`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Lagged:
    """A notice in place of frames a subscriber will not get.

    ``epoch_changed``: the subscriber's ``since_seq`` belongs to another epoch (the collector
    restarted), or it named none, so its numbers mean nothing here; delivery restarts at
    ``resume_seq``, the oldest frame still buffered (``from_seq`` is 1: this epoch's first).
    Otherwise frames ``from_seq`` to ``resume_seq - 1`` were evicted before the subscriber read
    them (``from_seq <= resume_seq``).
    """

    from_seq: int
    resume_seq: int
    epoch_changed: bool = False


class InvalidSince(CollectorError, ValueError):
    """A subscriber's fault: its ``since_seq`` (of this epoch) is past the newest frame of the source.

    Attributes:
        since_seq: what it asked for.
        newest_seq: the newest frame of the source.
    """

    def __init__(self, since_seq: int, newest_seq: int) -> None:
        super().__init__(f"since_seq {since_seq} is past the newest frame ({newest_seq}) of this epoch")
        self.since_seq = since_seq
        self.newest_seq = newest_seq


class Ring:
    """The buffered frames of one source, oldest first, with the subscribers reading it.

    Kept as parallel deques of lines and session ids (frame ``oldest_seq + i`` is item ``i``), and
    the publications' hub-wide order as ``(order, first seq)`` marks, one per publish: the write
    path pays a few C-level deque extends per pass, not an object per event.
    """

    __slots__ = ("bytes", "lines", "marks", "newest_seq", "sessions", "source", "subscribers")

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: collections.deque[bytes] = collections.deque()
        self.sessions: collections.deque[str] = collections.deque()
        self.marks: collections.deque[tuple[int, int]] = collections.deque()
        """``(hub-wide order, first seq)`` of each publication still (partly) buffered."""
        self.bytes = 0
        self.newest_seq = 0
        self.subscribers: set[Subscription] = set()

    def __len__(self) -> int:
        return len(self.lines)

    @property
    def oldest_seq(self) -> int:
        """The seq of the oldest frame still buffered (``newest_seq + 1`` when none is)."""
        return self.newest_seq + 1 - len(self.lines)

    @property
    def oldest_order(self) -> int:
        """The hub-wide order of the publication the oldest frame came with."""
        return self.marks[0][0]

    @property
    def frames(self) -> list[Frame]:
        """Every buffered frame, oldest first (for inspection: subscribers take them one batch at a time)."""
        first = self.oldest_seq
        return [
            Frame(first + i, session, line)
            for i, (session, line) in enumerate(zip(self.sessions, self.lines, strict=True))
        ]

    def evict_one(self) -> int:
        """Drop the oldest frame; return the bytes it was counted for."""
        size = len(self.lines.popleft()) + FRAME_OVERHEAD
        self.sessions.popleft()
        self.bytes -= size
        marks = self.marks
        if not self.lines:
            marks.clear()
        elif len(marks) > 1 and marks[1][1] <= self.oldest_seq:
            marks.popleft()  # the oldest frame now came with the next publication
        return size


class Subscription:
    """A cursor in one ring: what the subscriber has not taken yet, frames or :class:`Lagged` notices.

    Taking is the subscriber's own pace; the hub only sets :attr:`ready` when something is there.
    ``accept`` keeps the frames the subscriber asked for (the others pass by, which is no gap).
    """

    def __init__(
        self,
        hub: Hub,
        ring: Ring,
        next_seq: int,
        accept: Callable[[Frame], bool] | None,
        notice: Lagged | None,
        identifier: int,
    ) -> None:
        self.hub = hub
        self.ring = ring
        self.next_seq = next_seq
        """The seq of the next frame this subscriber has not seen."""
        self.accept = accept
        self.id = identifier
        self._notice = notice
        self.ready = asyncio.Event()
        self.closed = False
        if notice is not None or next_seq <= ring.newest_seq:
            self.ready.set()

    def take(self, limit: int = 256) -> list[Frame | Lagged]:
        """Return what is waiting, up to ``limit`` frames: a notice first if there was a gap.

        A batch stops at a gap: frames evicted since the last take give a :class:`Lagged` (and the
        frames after it come with the next take), so the cursor never passes a loss silently.
        """
        out: list[Frame | Lagged] = []
        if self._notice is not None:
            out.append(self._notice)
            self._notice = None
        ring = self.ring
        oldest = ring.oldest_seq
        if self.next_seq < oldest:
            out.append(Lagged(self.next_seq, oldest))
            self.next_seq = oldest
            self._update_ready()  # the frames after the gap come with the next take
            return out
        lines, sessions = ring.lines, ring.sessions
        index = self.next_seq - oldest
        accept = self.accept
        taken = 0
        end = len(lines)
        while index < end and taken < limit:
            frame = Frame(oldest + index, sessions[index], lines[index])
            index += 1
            if accept is None or accept(frame):
                out.append(frame)
                taken += 1
        self.next_seq = oldest + index
        self._update_ready()
        return out

    def _update_ready(self) -> None:
        if self._notice is None and self.next_seq > self.ring.newest_seq and not self.closed:
            self.ready.clear()
        else:
            self.ready.set()

    def cancel(self) -> None:
        """End the subscription: the hub forgets it and :attr:`ready` wakes its reader."""
        self.closed = True
        self.ring.subscribers.discard(self)
        self.ready.set()


class Hub:
    """Every source's ring, one epoch per collector start, and the shared byte budget.

    Args:
        epoch: the epoch (random when not given: tests pass their own).
        ring_frames, ring_bytes, total_bytes: the bounds (see the module docstring).
    """

    def __init__(
        self,
        *,
        epoch: str | None = None,
        ring_frames: int = RING_FRAMES,
        ring_bytes: int = RING_BYTES,
        total_bytes: int = TOTAL_BYTES,
    ) -> None:
        self.epoch = epoch if epoch is not None else secrets.token_hex(8)
        self.ring_frames = ring_frames
        self.ring_bytes = ring_bytes
        self.total_bytes = total_bytes
        self.rings: dict[str, Ring] = {}
        self.bytes = 0
        self.evicted = 0
        """Frames evicted so far (by any bound)."""
        self._order = itertools.count()
        self._ids = itertools.count(1)
        self.on_evicted: Callable[[int], None] | None = None
        """Called with the number of frames each publication evicted (the collector counts them)."""
        self.buffering = False
        """Set by the first subscription: until then a publication only advances the seqs, since
        nobody holds a cursor in this epoch yet (the write path pays one addition per pass)."""

    @property
    def subscribers(self) -> int:
        """Subscriptions open (safe from another thread: it counts copies)."""
        return sum(len(ring.subscribers) for ring in list(self.rings.values()))

    def report(self) -> dict[str, object]:
        """What ``gz-ia status`` says of the subscriptions."""
        return {
            "epoch": self.epoch,
            "sources": len(self.rings),
            "subscribers": self.subscribers,
            "frames": sum(len(ring) for ring in self.rings.values()),
            "bytes": self.bytes,
            "evicted": self.evicted,
        }

    def ring(self, source: str) -> Ring:
        """The ring of ``source``, made empty the first time it is named."""
        ring = self.rings.get(source)
        if ring is None:
            ring = self.rings[source] = Ring(source)
        return ring

    def skip(self, source: str, count: int) -> None:
        """Number ``count`` frames of ``source`` without keeping them (before any subscription)."""
        ring = self.rings.get(source)
        if ring is None:
            ring = self.rings[source] = Ring(source)
        ring.newest_seq += count

    def publish(self, source: str, session_id: str, lines: list[bytes]) -> int:
        """Append written lines of one session to its source's ring; wake its subscribers.

        Never waits: a bound reached evicts the oldest frames instead. Returns the newest seq.
        """
        count = len(lines)
        ring = self.ring(source)
        if not count:
            return ring.newest_seq
        ring.marks.append((next(self._order), ring.newest_seq + 1))
        ring.lines.extend(lines)
        ring.sessions.extend(itertools.repeat(session_id, count))
        added = sum(map(len, lines)) + count * FRAME_OVERHEAD
        ring.newest_seq += count
        ring.bytes += added
        self.bytes += added
        evicted = 0
        frames = self.ring_frames
        limit = self.ring_bytes
        while len(ring.lines) > frames or (ring.bytes > limit and len(ring.lines) > 1):
            self.bytes -= ring.evict_one()
            evicted += 1
        if self.bytes > self.total_bytes:
            evicted += self._evict_globally()
        if evicted:
            self.evicted += evicted
            if self.on_evicted is not None:
                self.on_evicted(evicted)
        for subscriber in ring.subscribers:
            subscriber.ready.set()
        return ring.newest_seq

    def _evict_globally(self) -> int:
        """Evict the oldest frames of all rings until the shared budget holds (the newest frame
        stays); return how many."""
        rings = [ring for ring in self.rings.values() if ring.lines]
        evicted = 0
        while self.bytes > self.total_bytes:
            if len(rings) == 1 and len(rings[0]) == 1:
                break
            oldest = min(rings, key=lambda ring: ring.oldest_order)
            self.bytes -= oldest.evict_one()
            evicted += 1
            if not oldest.lines:
                rings.remove(oldest)
        for ring in self.rings.values():
            for subscriber in ring.subscribers:
                if subscriber.next_seq < ring.oldest_seq:
                    subscriber.ready.set()
        return evicted

    def subscribe(
        self,
        source: str,
        *,
        since_seq: int | None = None,
        epoch: str | None = None,
        accept: Callable[[Frame], bool] | None = None,
    ) -> Subscription:
        """Start a cursor in ``source``'s ring.

        Args:
            source: the source (a session root, as the collector names it).
            since_seq: replay the frames after this one that are still buffered, then go on live;
                None: live only, from the next frame written.
            epoch: the epoch ``since_seq`` belongs to.
            accept: which frames to deliver (None: all).

        Raises:
            InvalidSince: ``since_seq`` of this epoch is past the newest frame.
        """
        ring = self.ring(source)
        self.buffering = True
        notice: Lagged | None = None
        if since_seq is None:
            next_seq = ring.newest_seq + 1
        elif epoch != self.epoch:
            next_seq = ring.oldest_seq
            # The numbering restarted at 1 in this epoch: frames 1 to the oldest buffered are gone.
            notice = Lagged(1, next_seq, epoch_changed=True)
        else:
            if since_seq < 0 or since_seq > ring.newest_seq:
                raise InvalidSince(since_seq, ring.newest_seq)
            next_seq = since_seq + 1
        subscription = Subscription(self, ring, next_seq, accept, notice, next(self._ids))
        ring.subscribers.add(subscription)
        return subscription
