"""The collector daemon: many connections on one event loop, one writer, verdicts after the write.

Each connection is an :class:`asyncio.Protocol`. Received frames are decoded and applied at once
(:mod:`.ingest`), which only stages lines in memory; one flush task then writes every dirty session
with one ``write(2)`` each, syncs them when durability is ``fsync`` (group commit: whatever arrived
during the previous sync shares the next one), and only then sends each batch its verdicts. A
connection with too many batches awaiting verdicts, or whose peer does not read its replies, is no
longer read (backpressure), so memory stays bounded and a flood cannot starve anyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import resource
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client import env
from gz_ia.client.protocol import (
    Collect,
    RejectReason,
    Verdicts,
)
from gz_ia.client.protocol import Rejection as WireRejection

from .adoption import adopt_spools, count_adoption, quarantined_spools
from .collection import gc_report, keeper
from .config import CollectorConfig
from .connection import Connection
from .connection_limits import ConnectionLimits, descriptor_limit, socket_reserve
from .health import Health
from .ingest import BatchOutcome, Ingest
from .known_roots import KnownRoots, default_state_dir
from .listener import serve_sockets
from .metrics import Metrics, root_id, write_error_kind
from .reload import begin_reload, changed_settings, finish_reload
from .role import WHOLE, Role
from .storage._layout import LayoutError
from .storage.retention import RetentionReport, apply_retention, collect_idle
from .storage.root_lock import RootLocked, RootLocks
from .storage.writer import AppendFile, FlushJob, RootStore, Writer
from .systemd import Notifier, watchdog_interval

__all__ = ["Collector"]

log = logging.getLogger("gz_ia.collector")

_DRAIN_TIMEOUT: Final = 5.0
_ADOPTION_INTERVAL: Final = 30.0
_INLINE_OPENS: Final = 2
"""Files a write pass may have to create (or reopen) and still be written on the loop."""
_INLINE_ITEMS: Final = 256
"""A write pass with at most ``_INLINE_OPENS`` files to open runs on the loop itself, in parts of
``_INLINE_ITEMS`` files between which the loop reads and stages: it is plain ``write(2)`` calls into
the page cache, and in a worker thread each of them would wait for the GIL, which a busy loop holds
for up to the switch interval (5 ms): a pass of 100 files took 0.4 s there instead of 11 ms. File
creation (20 µs a file on this machine's ext4, over 1 ms where many files were removed in the last
minutes) and ``fdatasync`` stay in the thread."""
_WRITE_FAILED: Final = "the collector could not write this batch (see its log); resend after reconnecting"
_MAX_STAGED_BYTES: Final = 16 << 20
"""Received bytes staged for one write pass before the collector stops reading every connection."""
_MAX_STAGED_FILES: Final = 16_384
"""Files with lines staged for one write pass before the collector stops reading. With many sessions
each staged event is a buffer of its own: this bound, not the byte bound, keeps memory flat there."""
_STATUS_INTERVAL: Final = 10.0
"""Seconds between ``STATUS=`` updates to systemd when there is no watchdog to piggyback on."""
_UNRECORDED_LOG_INTERVAL: Final = 60.0
"""Seconds between log lines about reject records lost (a full disk would otherwise flood the log)."""


def _plain(job: FlushJob) -> bool:
    """Tell whether a (non-durable) write pass only appends to open files, give or take a couple to
    open, and can run on the loop (see _INLINE_ITEMS)."""
    return not job.retired and sum(target.fd is None for target, _ in job.items) <= _INLINE_OPENS


def file_budget(configured: int) -> int:
    """Return how many session files may stay open, within the process's descriptor limit.

    The soft ``RLIMIT_NOFILE`` is raised to the hard one first (what systemd recommends for daemons
    that need many descriptors); an eighth of it (at least 64) stays for sockets and the rest goes to
    session files, so that ``ulimit -n 256`` cannot make writes fail with EMFILE.
    """
    soft = descriptor_limit()
    if soft is None:
        return configured
    budget = max(8, soft - socket_reserve(soft))
    if budget < configured:
        log.info("max_open_files lowered from %d to %d by the descriptor limit (%d)", configured, budget, soft)
    return min(configured, budget)


class Collector:
    """The daemon: listening sockets, connections, the flush task, signals and systemd.

    Args:
        config: the effective configuration.
        metrics: where to count.
        version: reported to clients and in ``gz-ia status``.
        load_config: re-reads the configuration on SIGHUP (same file, environment and start-up
            flags); None: SIGHUP only logs that there is nothing to reload.
        role: what this process answers for (see :mod:`.role`); by default, everything.
        connection: makes the handler of each accepted connection.
    """

    def __init__(
        self,
        config: CollectorConfig,
        metrics: Metrics,
        *,
        version: str,
        load_config: Callable[[], CollectorConfig] | None = None,
        role: Role = WHOLE,
        connection: Callable[[Collector], Connection] = Connection,
    ) -> None:
        self.config = config
        self.role = role
        self._connection = connection
        self._load_config = load_config
        self.metrics = metrics
        self.version = version
        self.uid = os.getuid()
        self.started = time.time()
        self.writer = Writer(
            max_open_files=file_budget(config.max_open_files),
            on_torn=lambda _n: metrics.torn_repaired.inc(),
            config=config,
            on_rotated=metrics.rotations.inc,
            on_deleted=self._count_retention,
            on_synced=metrics.fsync_latency.observe,
            on_measured=self._measured_root if role.root_wide else None,
            rejects_stem=role.rejects_stem,
        )
        self.ingest = Ingest(
            self.writer,
            max_open_actions=config.max_open_actions,
            max_open_actions_total=role.open_actions_total(config.max_open_actions_total),
        )
        self.connections: set[Connection] = set()
        self.paused: set[Connection] = set()
        self.notifier = Notifier()
        self.known_roots = KnownRoots(default_state_dir())
        self.sockets: list[str] = []
        """The paths of the sockets this process listens on (known once :meth:`serve` runs)."""
        self.root_locks = RootLocks(pid=os.getpid(), sockets=self.sockets, front=role.lock_holder)
        self._replies: list[tuple[Connection, BatchOutcome]] = []
        self._work = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._staged = 0
        self.overloaded = False
        """Set while more than _MAX_STAGED_BYTES wait for the next write pass: nothing is read."""
        self._servers: list[asyncio.AbstractServer] = []
        self._stopping = asyncio.Event()
        self._error_logged: set[str] = set()
        self._unrecorded_logged_at = -_UNRECORDED_LOG_INTERVAL
        self.health = Health()
        self.tasks: set[asyncio.Future[dict[str, object]]] = set()
        """Requests in progress (``gz-ia gc``), referenced until they answer."""
        self.connection_limits = (
            ConnectionLimits(config, metrics.connections_over_limit) if role.limits_connections else None
        )
        self._bind_gauges()

    def admit(self, connection: Connection) -> bool:
        """Count ``connection`` against the connection limits, or refuse it ``busy`` (see .connection_limits)."""
        if self.connection_limits is None:
            return True
        refused = self.connection_limits.admit(connection.uid)
        if refused is None:
            return True
        connection.fail(RejectReason.BUSY, refused)
        return False

    def _measured_root(self, path: Path, size: int) -> None:
        # Called from the writer's worker thread; prometheus_client gauges are thread-safe.
        self.metrics.root_size.labels(root_id(path)).set(size)

    def _count_retention(self, files: int, nbytes: int) -> None:
        # Called from the writer's worker thread; prometheus_client counters are thread-safe.
        self.metrics.retention_deleted_files.inc(files)
        self.metrics.retention_deleted_bytes.inc(nbytes)

    def _bind_gauges(self) -> None:
        metrics = self.metrics
        writer = self.writer
        metrics.connections.set_function(lambda: len(self.connections))
        metrics.paused_connections.set_function(lambda: len(self.paused))
        metrics.open_files.set_function(lambda: writer.open_files)
        metrics.backlog_bytes.set_function(lambda: writer.pending_bytes)
        # These run on the metrics server's thread while the loop changes what they read: they
        # iterate copies (list() of a set or dict holds the GIL), never the live containers.
        metrics.backlog_batches.set_function(lambda: sum(c.awaiting for c in list(self.connections)))
        metrics.sessions_known.set_function(lambda: writer.sessions_known)
        metrics.sessions_active.set_function(lambda: writer.sessions_active)

    # --- lifecycle ------------------------------------------------------------------------------------

    async def serve(self, sockets: list[socket.socket]) -> None:
        """Serve on the given listening sockets until SIGTERM/SIGINT, then drain and return."""
        loop = asyncio.get_running_loop()
        self.sockets[:] = [os.path.abspath(str(sock.getsockname())) for sock in sockets]
        if self.role.repairs_known_roots:
            self._repair_known_roots()  # before any connection is served
        self._servers += await serve_sockets(sockets, lambda: self._connection(self))
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        if self.role.adopts_spools:
            try:
                self.adopt_spools()
            except Exception:  # pragma: no cover - a bad spool must not stop the start
                log.exception("spool adoption failed; will retry")
        flusher = asyncio.create_task(self._flush_loop(), name="gz-ia-flush")
        watchdog = asyncio.create_task(self._watchdog_loop(), name="gz-ia-watchdog")
        adopter = asyncio.create_task(
            self._adoption_loop() if self.role.adopts_spools else asyncio.sleep(0), name="gz-ia-adoption"
        )
        self.notifier.notify("READY=1", f"STATUS=serving on {len(sockets)} socket(s)")
        if self.role.started_message is None:
            log.info("gz-ia collector %s ready (durability=%s)", self.version, self.config.durability)
        else:
            log.info("%s", self.role.started_message)
        try:
            await self._stopping.wait()
        finally:
            self.notifier.notify("STOPPING=1", "STATUS=draining")
            log.info("stopping: draining connections")
            for server in self._servers:
                server.close()
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.pause_reading()
            adopter.cancel()
            watchdog.cancel()
            # Never cancel the flusher: a write pass in its worker thread would go on beside the
            # final one. Woken up, it finishes what is in flight and returns (stopping is set).
            self._work.set()
            await flusher
            for task in (adopter, watchdog):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._flush_once()
            await self._close_connections()
            self.writer.close()
            self.root_locks.release()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
            log.info("stopped")
            self.notifier.close()

    def stop(self) -> None:
        """Ask :meth:`serve` to drain and return (as SIGTERM does)."""
        self._stopping.set()

    async def _close_connections(self) -> None:
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.close()
        deadline = time.monotonic() + _DRAIN_TIMEOUT
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()

    async def _watchdog_loop(self) -> None:
        if not self.notifier.enabled:
            return
        interval = watchdog_interval()
        # Pinged from the event loop itself: a stalled loop stops the pings and systemd restarts us.
        # The same tick refreshes the STATUS= line that `systemctl --user status` shows.
        last_status = ""
        while True:
            lines = ["WATCHDOG=1"] if interval is not None else []
            status = self._status_line()
            if status != last_status:
                lines.append(f"STATUS={status}")
                last_status = status
            if lines:
                self.notifier.notify(*lines)
            await asyncio.sleep(interval if interval is not None else _STATUS_INTERVAL)

    def _status_line(self) -> str:
        counters = self.metrics.totals()
        return (
            f"serving: {len(self.connections)} connection(s), {counters['written']} event(s) written, "
            f"{counters['rejected']} rejected, {counters['write_errors']} write error(s)"
        )

    # --- configuration reload (SIGHUP) ----------------------------------------------------------------

    def reload(self) -> bool:
        """Re-read the configuration and apply it; on any error keep the running one and say why.

        Returns:
            Whether the new configuration was applied.
        """
        new = begin_reload(self._load_config, self.config, self.notifier, self.metrics)
        if new is None:
            return False
        self.apply_config(new)
        finish_reload(self.notifier, self.metrics, self._status_line())
        return True

    def apply_config(self, new: CollectorConfig) -> None:
        """Switch to ``new`` without dropping connections or events.

        Limits, durability, log level and the rotation/retention settings take effect at once; the
        socket, the metrics address and the shards need a restart (:func:`.reload.begin_reload`
        keeps their running values).
        """
        old = self.config
        self.writer.configure(new)  # rotation and retention, from the next write on
        self.config = new
        self.writer.max_open_files = file_budget(new.max_open_files)  # LRU closes the excess at next open
        self.ingest.cycles.per_session = new.max_open_actions
        self.ingest.cycles.total = self.role.open_actions_total(new.max_open_actions_total)
        if self.connection_limits is not None:
            self.connection_limits.configure(new)
        logging.getLogger().setLevel(new.log_level.upper())
        for connection in list(self.connections):
            connection._update_reading()  # a raised max_backlog_batches resumes paused connections
        log.info("configuration reloaded (%s)", changed_settings(old, new))

    # --- flushing -------------------------------------------------------------------------------------

    def enqueue(self, connection: Connection, outcome: BatchOutcome, size: int) -> None:
        """Queue a batch's verdicts for after the next flush; past the staging bound, stop reading."""
        self._replies.append((connection, outcome))
        self._work.set()
        self._staged += size
        if (self._staged > _MAX_STAGED_BYTES or self.writer.dirty_files > _MAX_STAGED_FILES) and not self.overloaded:
            # Global backpressure: while a write pass is in flight the loop could otherwise read
            # and stage without bound from many busy clients. Every connection waits for the pass.
            self.overloaded = True
            for other in list(self.connections):
                other._update_reading()

    async def _flush_loop(self) -> None:
        while not self._stopping.is_set():
            await self._work.wait()
            if len(self._replies) > 1 or len(self.connections) > 1:
                # One more loop pass first: every connection with data ready gets read, so that one
                # write per session covers all of them (a batch costs at most one extra iteration).
                await asyncio.sleep(0)
            self._work.clear()
            await self._flush_once()

    async def _flush_once(self) -> None:
        """Write what is staged, then answer the batches it holds.

        Decoding and staging the next batches goes on while a pass is written, between its parts on
        the loop or beside the worker thread; the flush lock keeps a single write pass in flight
        (adoption takes it too).
        """
        async with self._flush_lock:
            replies = self._replies
            self._replies = []
            writer = self.writer
            job = writer.take()
            self._staged = 0
            self._resume_reading()
            durable = self.config.durability == "fsync"
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
                self._fail_lost_batches()

    async def _write_on_loop(
        self, job: FlushJob
    ) -> tuple[list[tuple[AppendFile, bytes]], list[tuple[AppendFile, OSError]]]:
        """Write a plain pass on the loop, ``_INLINE_ITEMS`` files at a time, reading in between."""
        written: list[tuple[AppendFile, bytes]] = []
        failed = list(job.failed)
        for start in range(0, len(job.items), _INLINE_ITEMS):
            if start:
                await asyncio.sleep(0)  # one loop round: ready connections are read and staged
            part = FlushJob(job.items[start : start + _INLINE_ITEMS], [], job.now, [], {})
            done, lost = self.writer.write(part, durable=False)
            written += done
            failed += lost
        return written, failed

    def _resume_reading(self) -> None:
        """Read every connection again once what they staged is detached for a write pass."""
        if self.overloaded:
            self.overloaded = False
            for connection in list(self.connections):
                connection._update_reading()

    def _answer(
        self, replies: list[tuple[Connection, BatchOutcome]], failed: list[tuple[AppendFile, OSError]], nbytes: int
    ) -> None:
        metrics = self.metrics
        if nbytes:
            metrics.written_bytes.inc(nbytes)
        for target, exc in failed:
            self._report_write_error(target, exc)
        now = time.monotonic()
        any_written = False
        for connection, outcome in replies:
            if not outcome.intact():
                connection.awaiting -= 1
                connection.fail(RejectReason.WRITE_FAILED, _WRITE_FAILED)
                continue
            self._count(outcome)
            any_written = any_written or bool(outcome.written)
            metrics.write_latency.observe(now - outcome.received_at)
            connection.send(
                Verdicts(
                    first=outcome.first,
                    count=outcome.count,
                    seqs=outcome.seqs or [],
                    rejected=outcome.rejections,
                )
            )
            connection.answered()
        if any_written:
            metrics.mark_written()

    def _fail_lost_batches(self) -> None:
        """Close at once every connection with a staged batch that a failed write just dropped.

        A producer's events must reach each session in order: a session's watermark takes every
        number up to the highest one written as delivered. Left open until that batch's turn, the
        connection could get a later batch written into the session rebuilt from its file, and the
        dropped batch, resent, would then be answered as a duplicate without ever being written.
        """
        for connection, outcome in self._replies:
            if not connection.closing and not outcome.intact():
                connection.fail(RejectReason.WRITE_FAILED, _WRITE_FAILED)

    def _count(self, outcome: BatchOutcome) -> None:
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

    def open_root(self, path: Path, uid: int) -> RootStore:
        """The store of root ``path`` (owned by ``uid``), once this collector holds its lock.

        Raises:
            RootLocked: another collector serves the root.
            LayoutError, OSError: the root cannot be used (see :meth:`.Writer.root`).
        """
        self.root_locks.take(path, uid)
        store = self.writer.root(path, owner=uid)
        if self.role.records_known_roots:
            self.known_roots.add(path, uid, self.sockets[0] if self.sockets else "")
        return store

    def _repair_known_roots(self) -> None:
        """Take the roots this collector served before and move torn last lines aside in them,
        before anyone reads them. A process that does not keep the file repairs every root in it
        (the process that keeps it took them)."""
        records = self.role.records_known_roots
        gone: list[tuple[Path, int]] = []
        served = (
            self.known_roots.served_through(self.sockets)
            if records
            else [(path, uid) for path, uid, _socket in self.known_roots]
        )
        for path, uid in served:
            if not path.is_dir():
                gone.append((path, uid))
                continue
            try:
                self.root_locks.take(path, uid)
                repaired = self.writer.repair_root(path, owner=uid)
            except RootLocked as exc:
                if records:
                    log.warning("not taking %s at start: %s", path, exc)
                continue
            except (OSError, LayoutError) as exc:
                log.warning("not repairing %s at start: %s", path, exc)
                continue
            if repaired:
                log.warning("repaired %d torn last line(s) under %s (moved to <id>.events.torn)", repaired, path)
        if records:
            self.known_roots.discard(gone)

    @property
    def spool_dir(self) -> Path:
        """Where clients spool (and where adoption looks)."""
        return Path(self.config.spool_dir) if self.config.spool_dir else env.default_spool_dir()

    def adopt_spools(self) -> int:
        """Deliver the disk spools of clients that died (see :mod:`.adoption`); return the events."""
        done = adopt_spools(
            self.spool_dir,
            self.ingest,
            self.writer,
            uid=self.uid,
            sockets=self.sockets,
            open_root=lambda path: self.open_root(path, self.uid),
            durable=self.config.durability == "fsync",
            on_outcome=self._count,
        )
        count_adoption(self.metrics, done)
        if done.events:
            self.metrics.mark_written()
        return done.events

    async def _adoption_loop(self) -> None:
        while True:
            await asyncio.sleep(_ADOPTION_INTERVAL)
            async with self._flush_lock:  # adoption writes synchronously: never beside a write pass
                try:
                    self.adopt_spools()
                except Exception:  # pragma: no cover - never let a bad spool take the daemon down
                    log.exception("spool adoption failed; will retry")
                self._fail_lost_batches()  # its write pass also wrote (or lost) what clients staged

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

    # --- gz-ia gc ----------------------------------------------------------------------------------------

    async def collect(self, request: Collect, uid: int) -> dict[str, object]:
        """Apply retention to a root now, as its writer (see :mod:`.collection`).

        Idle sessions are removed on the loop under the flush lock, so no write pass is in flight
        and nothing is staged meanwhile; archives are trimmed in the storage worker with the
        running retention settings, tightened by the request's vacuum limits. A process that serves
        part of the sessions removes and trims those; the rejects files and the root's budget are
        the root-wide process's (see :class:`.role.Role`).

        Raises:
            LayoutError: the root cannot be used (missing, someone else's, ...).
        """
        writer = self.writer
        store = writer.root(Path(request.root), owner=uid)
        policy = writer.retention.tightened(max_root_bytes=request.vacuum_bytes, max_age_seconds=request.vacuum_seconds)
        role = self.role

        def owns(session_id: str | None) -> bool:
            if session_id is None:
                return role.root_wide
            return role.serves is None or role.serves(session_id)

        now = writer.clock()
        kept: list[str] = []
        idle = RetentionReport()
        if request.older_than > 0:
            async with self._flush_lock:
                release = functools.partial(
                    writer.release_for_collection, store, idle_for=request.older_than, dry_run=request.dry_run
                )
                idle = collect_idle(
                    store.dirs, request.older_than, now=now, dry_run=request.dry_run, keep=keeper(owns, release, kept)
                )

        def trim() -> RetentionReport:
            report = apply_retention(
                store.dirs, policy, now=now, dry_run=request.dry_run, owns=owns, budget=role.root_wide
            )
            if not request.dry_run:
                writer.measure(store.dirs, force=True)
            return report

        trimmed = await asyncio.wrap_future(writer.storage_job(trim))
        if not request.dry_run:
            writer.count_deleted(idle)
            writer.count_deleted(trimmed)
        return gc_report(store.path, policy, idle, trimmed, kept_live=kept, dry_run=request.dry_run, by="collector")

    # --- status ---------------------------------------------------------------------------------------

    def limits(self) -> dict[str, int]:
        """The limits in effect in this process, which may be lower than configured: ``max_open_files``
        after :func:`file_budget` fitted it to the descriptor limit."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return {
            "max_open_files": self.writer.max_open_files,
            "descriptor_limit": -1 if soft == resource.RLIM_INFINITY else soft,
            "max_open_actions": self.config.max_open_actions,
            "max_backlog_batches": self.config.max_backlog_batches,
            **(self.connection_limits.report() if self.connection_limits is not None else {}),
        }

    def status(self) -> dict[str, object]:
        """Health, version, uptime, roots, sessions and counters, for ``gz-ia status``."""
        healthy, reasons = self.health.report()
        return {
            "healthy": healthy,
            "reasons": reasons,
            "spools": {"quarantined": quarantined_spools(self.spool_dir)},
            "version": self.version,
            "pid": os.getpid(),
            "uptime_seconds": round(time.time() - self.started, 3),
            "durability": self.config.durability,
            "config": msgspec.to_builtins(self.config),
            "limits": self.limits(),
            "metrics_endpoint": self.metrics.endpoint_report(),
            "connections": len(self.connections),
            "roots": [
                {
                    "path": str(root.path),
                    "id": root_id(root.path),
                    "sessions_loaded": len(root.sessions),
                    "open_sessions": sum(1 for state in root.sessions.values() if state.open_actions),
                }
                for root in self.writer.roots
            ],
            "counters": self.metrics.status_counters(),
        }
