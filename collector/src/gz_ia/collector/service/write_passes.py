"""Group commit: what the intake staged is written in one pass, and only then answered.

One flush task writes every dirty session with one ``write(2)`` each, syncs them when durability
is ``fsync`` (whatever arrived during the previous sync shares the next one), and only then tells
each batch's :class:`~.replies.Reply`. Past a bound of staged bytes or files, no connection is read
until the pass in flight is detached, so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Set
from typing import Final, Protocol

from gz_ia.client.protocol import Rejection as WireRejection
from gz_ia.collector.ingest.staging import BatchOutcome
from gz_ia.collector.metrics import Metrics, write_error_kind
from gz_ia.collector.storage.open_files import AppendFile
from gz_ia.collector.storage.writer import FlushJob, Writer

from .health import Health
from .replies import Reply

__all__ = ["Reading", "WritePasses"]

log = logging.getLogger("gz_ia.collector")

_INLINE_OPENS: Final = 2
"""Files a write pass may have to create (or reopen) and still be written on the loop."""
_INLINE_ITEMS: Final = 256
"""A write pass with at most ``_INLINE_OPENS`` files to open runs on the loop itself, in parts of
``_INLINE_ITEMS`` files between which the loop reads and stages: it is plain ``write(2)`` calls into
the page cache, and in a worker thread each of them would wait for the GIL, which a busy loop holds
for up to the switch interval. File creation (slow where many files were removed lately) and
``fdatasync`` stay in the thread."""
_MAX_STAGED_BYTES: Final = 16 << 20
"""Received bytes staged for one write pass before the collector stops reading every connection."""
_MAX_STAGED_FILES: Final = 16_384
"""Files with lines staged for one write pass before the collector stops reading. With many sessions
each staged event is a buffer of its own: this bound, not the byte bound, keeps memory flat there."""
_UNRECORDED_LOG_INTERVAL: Final = 60.0
"""Seconds between log lines about reject records lost (a full disk would otherwise flood the log)."""


def _plain(job: FlushJob) -> bool:
    """Tell whether a (non-durable) write pass only appends to open files, give or take a couple to
    open (a rotation in the pass opens one), and can run on the loop (see _INLINE_ITEMS)."""
    opens = sum(target.fd is None for target, _ in job.items) + sum(map(len, job.cuts.values()))
    return not job.retired and opens <= _INLINE_OPENS


class Reading(Protocol):
    """A connection, as the write passes see it: read or not, as the staging bound allows."""

    def update_reading(self) -> None:
        """Pause or resume reading it, as the bounds now say (:attr:`WritePasses.overloaded` among them)."""
        ...


class WritePasses:
    """The collector's write passes and the answers that follow them (a part the process owns).

    Args:
        writer: the one writer.
        metrics: where passes, write errors and outcomes are counted.
        health: told of write errors and of writes that succeed again.
        connections: the connections read, paused together past the staging bound.
        durable: whether a pass is synced before it is answered (``durability = "fsync"``); the
            process sets it again on a reload.
    """

    def __init__(
        self, writer: Writer, metrics: Metrics, health: Health, connections: Set[Reading], *, durable: bool
    ) -> None:
        self.writer = writer
        self.metrics = metrics
        self.health = health
        self.connections = connections
        self.durable = durable
        self.overloaded = False
        """Set while more than _MAX_STAGED_BYTES wait for the next write pass: nothing is read."""
        self.lock = asyncio.Lock()
        """Held by the write pass in flight, and by whatever writes or removes sessions beside the
        passes (spool adoption, ``gz-ia gc``): one writer at a time."""
        self.stopping = asyncio.Event()
        """Set when the process stops: :meth:`flush_loop` returns after the pass in flight."""
        self._replies: list[tuple[Reply, BatchOutcome]] = []
        self._work = asyncio.Event()
        self._staged = 0
        self._error_logged: set[str] = set()
        self._unrecorded_logged_at = -_UNRECORDED_LOG_INTERVAL
        """When reject records lost were last logged (long enough ago at first)."""

    @property
    def waiting(self) -> int:
        """Batches staged for the next pass, not answered yet."""
        return len(self._replies)

    def wake(self) -> None:
        """Make the flush task look again (at stop: it returns once the pass in flight is done)."""
        self._work.set()

    def enqueue(self, reply: Reply, outcome: BatchOutcome, size: int) -> None:
        """Queue a batch's answer for after the next flush; past the staging bound, stop reading.
        (Only the intake calls it: :meth:`.intake.Intake.stage`.)"""
        self._replies.append((reply, outcome))
        self._work.set()
        self._staged += size
        if (self._staged > _MAX_STAGED_BYTES or self.writer.dirty_files > _MAX_STAGED_FILES) and not self.overloaded:
            # Global backpressure: while a write pass is in flight the loop could otherwise read
            # and stage without bound from many busy clients. Every connection waits for the pass.
            self.overloaded = True
            for other in list(self.connections):
                other.update_reading()

    async def flush_loop(self) -> None:
        """Run a write pass whenever something is staged, until the process stops (its flush task)."""
        while not self.stopping.is_set():
            await self._work.wait()
            if len(self._replies) > 1 or len(self.connections) > 1:
                # One more loop pass first: every connection with data ready gets read, so that one
                # write per session covers all of them (a batch costs at most one extra iteration).
                await asyncio.sleep(0)
            self._work.clear()
            await self.flush_once()

    async def flush_once(self) -> None:
        """Write what is staged, then answer the batches it holds.

        Decoding and staging the next batches goes on while a pass is written, between its parts on
        the loop or beside the worker thread; the flush lock keeps a single write pass in flight
        (adoption takes it too).
        """
        async with self.lock:
            replies = self._replies
            self._replies = []
            writer = self.writer
            job = writer.take()
            self._staged = 0
            self._resume_reading()
            durable = self.durable
            if not durable and _plain(job):
                written_data, failed = await self._write_on_loop(job)
            elif job.items or job.retired:
                written_data, failed = await asyncio.to_thread(writer.write, job, durable=durable)
            else:
                written_data, failed = [], list(job.failed)
            written, failed, nbytes = writer.finish(job, written_data, failed)
            if self.health.failing and written:
                self._note_healed(written)
            self._answer(replies, failed, nbytes)
            if failed:
                self.fail_lost_batches()

    async def _write_on_loop(
        self, job: FlushJob
    ) -> tuple[list[tuple[AppendFile, bytes]], list[tuple[AppendFile, OSError]]]:
        """Write a plain pass on the loop, ``_INLINE_ITEMS`` files at a time, reading in between."""
        written: list[tuple[AppendFile, bytes]] = []
        failed = list(job.failed)
        for start in range(0, len(job.items), _INLINE_ITEMS):
            if start:
                await asyncio.sleep(0)  # one loop round: ready connections are read and staged
            part = FlushJob(job.items[start : start + _INLINE_ITEMS], [], job.now, [], {}, job.cuts, job.cut_done)
            done, lost = self.writer.write(part, durable=False)
            written += done
            failed += lost
        return written, failed

    def _resume_reading(self) -> None:
        """Read every connection again once what they staged is detached for a write pass."""
        if self.overloaded:
            self.overloaded = False
            for connection in list(self.connections):
                connection.update_reading()

    def _answer(
        self, replies: list[tuple[Reply, BatchOutcome]], failed: list[tuple[AppendFile, OSError]], nbytes: int
    ) -> None:
        metrics = self.metrics
        if nbytes:
            metrics.written_bytes.inc(nbytes)
        for target, exc in failed:
            self._report_write_error(target, exc)
        now = time.monotonic()
        any_written = False
        for reply, outcome in replies:
            if not outcome.intact():
                reply.lost()
                continue
            self.count_outcome(outcome)
            any_written = any_written or bool(outcome.written)
            metrics.write_latency.observe(now - outcome.received_at)
            reply.written(outcome)
        if any_written:
            metrics.mark_written()

    def fail_lost_batches(self) -> None:
        """Refuse at once every staged batch that a failed write just dropped (closing its connection).

        A producer's events must reach each session in order: a session's watermark takes every
        number up to the highest one written as delivered. Left open until that batch's turn, the
        connection could get a later batch written into the session rebuilt from its file, and the
        dropped batch, resent, would then be answered as a duplicate without ever being written.
        """
        for reply, outcome in self._replies:
            if not reply.closing and not outcome.intact():
                reply.lost()

    def count_outcome(self, outcome: BatchOutcome) -> None:
        """Count a batch whose lines are written: by stage/status, rejections, duplicates, drops."""
        metrics = self.metrics
        metrics.count_written(outcome.written)
        metrics.observe_actions(outcome.durations)
        for rejection in outcome.rejections:
            metrics.events_rejected.labels(rejection.reason.value).inc()
        if not outcome.recorded():
            self._report_unrecorded(outcome)
        if outcome.duplicates:
            metrics.duplicates.inc(outcome.duplicates)
        if outcome.client_dropped:
            metrics.client_dropped.inc(outcome.client_dropped)
        if outcome.usage:
            metrics.count_usage(outcome.usage)

    def _report_unrecorded(self, outcome: BatchOutcome) -> None:
        """A batch's reject records were lost with a failed write of the rejects file: its rejections
        are still answered (a resend would pass for a duplicate), and the loss is counted and logged."""
        lost = len(outcome.rejections)
        self.metrics.rejects_unrecorded.inc(lost)
        outcome.rejections = [
            WireRejection(item.index, item.reason, item.detail + " (not recorded: the rejects file cannot be written)")
            for item in outcome.rejections
        ]
        now = time.monotonic()
        if now - self._unrecorded_logged_at >= _UNRECORDED_LOG_INTERVAL:
            self._unrecorded_logged_at = now
            log.error(
                "%d rejected event(s) answered with their reason but not recorded in the rejects file "
                "(gzia_rejects_unrecorded_total counts them all)",
                lost,
            )

    def note_flushed(self, written: list[AppendFile], failed: list[tuple[AppendFile, OSError]]) -> None:
        """What a write outside a write pass (spool adoption) did, for health and the error counts."""
        if self.health.failing and written:
            self._note_healed(written)
        for target, exc in failed:
            self._report_write_error(target, exc)

    def _note_healed(self, written: list[AppendFile]) -> None:
        """Writes succeeded: the roots they went to are healthy again (only looked at while one is not)."""
        roots = {root for root in map(self.writer.root_path_of, written) if root is not None}
        self.health.wrote(roots)

    def _report_write_error(self, target: AppendFile, exc: OSError) -> None:
        kind = write_error_kind(exc)
        self.metrics.write_errors.labels(kind).inc()
        root = self.writer.root_path_of(target)
        if root is not None:
            self.health.failed(root, exc)
        if kind not in self._error_logged:
            self._error_logged.add(kind)
            log.error("cannot write %s: %s (unacknowledged events stay with their clients)", target.name, exc)
