"""The one way into the write path: every source stages its batches here.

A client's connection, the agents' hooks and telemetry heard over HTTP, the spools of clients that
died (and any source added later) hand the intake a root, a producer id, a decoded batch and how the
batch is answered (:class:`~.replies.Reply`). The intake applies what holds for every batch
whatever its door: the bound on a batch's events, the sessions this process does not serve, the
count of events received, staging (:meth:`~..ingest.staging.Ingest.apply`), and the hand-over to
the next write pass, after which the reply is told. No source stages or answers a batch itself, so
none can skip a rule or answer before the write.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from gz_ia.client.protocol import MAX_BATCH_EVENTS
from gz_ia.collector.ingest.rules import too_many_events
from gz_ia.collector.ingest.validation import DecodedBatch
from gz_ia.collector.storage.sessions import RootStore

from .duties import reject_unserved

if TYPE_CHECKING:
    from gz_ia.collector.ingest.staging import BatchOutcome, Ingest
    from gz_ia.collector.metrics import Metrics

    from .duties import Role
    from .health import Health
    from .replies import Reply
    from .write_passes import WritePasses

__all__ = ["Intake", "OpenRoot"]

OpenRoot: TypeAlias = Callable[[Path, int], RootStore]
"""The store of a root (path, owner's uid) once this process holds its lock.

Raises :class:`~..storage.root_lock.RootLocked` (another collector serves it), ``LayoutError`` or
``OSError`` (it cannot be used)."""


class Intake:
    """Stages batches for the write passes and answers them after (see the module).

    Args:
        ingest: the staging of events into session buffers.
        passes: the write passes that write and then answer what is staged.
        metrics: where events received are counted.
        health: whether writes fail now (a source that must answer at once says so: 503).
        role: which sessions this process serves.
        open_root: opens the roots the sources name (the process's own, which takes their locks).
    """

    def __init__(
        self, ingest: Ingest, passes: WritePasses, metrics: Metrics, health: Health, role: Role, open_root: OpenRoot
    ) -> None:
        self.open_root = open_root
        """Open a root to stage into (see :data:`OpenRoot`)."""
        self._ingest = ingest
        self._passes = passes
        self._received = metrics.events_received
        self._health = health
        self._role = role

    @property
    def busy(self) -> bool:
        """Whether the next write pass holds as much as the collector takes: a source that cannot
        wait to be read again answers "retry later" (429) instead of staging more."""
        return self._passes.overloaded

    @property
    def failing(self) -> bool:
        """Whether writes fail now (a full or read-only disk, a removed root)."""
        return self._health.failing

    def stage(self, root: RootStore, producer: str, batch: DecodedBatch, reply: Reply, size: int) -> bool:
        """Stage ``batch`` of ``producer``'s events into ``root``; ``reply`` is told once it is written.

        ``size`` is what the batch counts against the staging bound (its bytes as received).
        Returns False, staging nothing, when the root's directories were removed meanwhile: the
        source opens the root again (the next open recreates it).
        """
        if root.removed:
            return False
        count = len(batch.events)
        self._received.inc(count)
        outcome = self._ingest.apply(root, producer, self._bounded(batch))
        self._passes.enqueue(reply, outcome, size)
        return True

    def stage_keyed(self, root: RootStore, batches: list[tuple[str, DecodedBatch]], reply: Reply, size: int) -> bool:
        """Stage batches of many producers into ``root`` as one, ``reply`` told once all are written:
        a source whose every record is its own producer (an export's spans) and that is answered as
        a whole. As :meth:`stage` otherwise."""
        if root.removed:
            return False
        self._received.inc(sum(len(batch.events) for _, batch in batches))
        outcome = self._ingest.apply_keyed(root, [(producer, self._bounded(batch)) for producer, batch in batches])
        self._passes.enqueue(reply, outcome, size)
        return True

    def write_now(self, root: RootStore, producer: str, batches: list[DecodedBatch]) -> list[BatchOutcome] | None:
        """Stage ``batches`` and write them at once, outside the write passes, for a source that
        deletes what it delivered once it is written (spool adoption); it holds the passes' lock.

        Their events are not counted as received (a dead client's events are counted as adopted).
        Returns the outcomes once every batch is written, else None (a write failed, or the root
        was removed): the source keeps its events and tries again later.
        """
        if root.removed:
            return None
        outcomes = [self._ingest.apply(root, producer, self._bounded(batch)) for batch in batches]
        passes = self._passes
        written, failed, _ = passes.writer.flush(durable=passes.durable)
        passes.note_flushed(written, failed)
        if failed or not all(outcome.intact() for outcome in outcomes):
            return None
        for outcome in outcomes:
            passes.count_outcome(outcome)
        return outcomes

    def _bounded(self, batch: DecodedBatch) -> DecodedBatch:
        """The batch, with every event rejected past the protocol's bound on a batch, or each event
        of a session this process does not serve rejected ``misrouted``."""
        count = len(batch.events)
        if count > MAX_BATCH_EVENTS:
            rejection = too_many_events()
            return DecodedBatch(batch.first, batch.verdicts, [None] * count, dict.fromkeys(range(count), rejection), {})
        if self._role.serves is not None:
            reject_unserved(batch, self._role)
        return batch
