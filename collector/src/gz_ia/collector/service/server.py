"""The collector process: many connections on one event loop, one writer, verdicts after the write.

Each connection (:mod:`.connection`) decodes and stages what it receives at once (:mod:`..ingest.staging`),
which only stages lines in memory; the write passes (:mod:`.write_passes`) write it and then answer
it. This module holds the process around them: start-up (repairing the roots it served, adopting
dead clients' spools), signals, systemd, configuration reloads and shutdown. What it answers for is
its :class:`~.duties.Role`: by default, everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client import env
from gz_ia.client.protocol import Collect
from gz_ia.collector.config import CollectorConfig
from gz_ia.collector.http import HttpServer
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.live import Hub
from gz_ia.collector.live.feed import WrittenFeed
from gz_ia.collector.metrics import Metrics, root_id
from gz_ia.collector.storage.root_lock import RootLocked, RootLocks
from gz_ia.collector.storage.roots import LayoutError
from gz_ia.collector.storage.sessions import RootStore
from gz_ia.collector.storage.writer import Writer
from gz_ia.collector.views import answers
from gz_ia.collector.web import WebView
from gz_ia.collector.web.api import open_cycles
from gz_ia.collector.web.memory import summaries_in_memory

from .admission import ConnectionLimits, descriptor_limit, socket_reserve
from .adoption import adopt_spools, count_adoption, quarantined_spools
from .connection import Connection
from .duties import WHOLE, Role
from .health import Health
from .intake import Intake
from .known_roots import KnownRoots, default_state_dir
from .listener import serve_sockets
from .reload import begin_reload, changed_settings, finish_reload
from .request_roots import root_to_come
from .requests import Collection
from .systemd import Notifier, watchdog_interval
from .write_passes import WritePasses

__all__ = ["Collector"]

log = logging.getLogger("gz_ia.collector")

_DRAIN_TIMEOUT: Final = 5.0
_STATUS_INTERVAL: Final = 10.0
"""Seconds between ``STATUS=`` updates to systemd when there is no watchdog to piggyback on."""


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

    It is composed of parts it owns: the :attr:`writer`, the :attr:`passes` that write and answer
    what the :attr:`intake` stages, the :attr:`collection` that answers ``gz-ia gc``.

    Args:
        config: the effective configuration.
        metrics: where to count.
        version: reported to clients and in ``gz-ia status``.
        load_config: re-reads the configuration on SIGHUP (same file, environment and start-up
            flags); None: SIGHUP only logs that there is nothing to reload.
        role: what this process answers for (see :mod:`.duties`); by default, everything.
        connection: makes the handler of each accepted connection.
        state_dir: where the known-roots file is kept; by default ``$GZ_IA_STATE_DIR``, else
            ``$XDG_STATE_HOME/gz-ia``.
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
        state_dir: Path | None = None,
    ) -> None:
        self.config = config
        self.role = role
        self._connection = connection
        self._load_config = load_config
        self.metrics = metrics
        self.version = version
        self.uid = os.getuid()
        self.started = time.time()
        self.hub = Hub()
        """Live subscriptions: the rings of what this process wrote (a new epoch per start)."""
        self.writer = Writer(
            max_open_files=file_budget(config.max_open_files),
            on_torn=lambda _n: metrics.torn_repaired.inc(),
            config=config,
            on_rotated=metrics.rotations.inc,
            on_deleted=self._count_retention,
            on_synced=metrics.fsync_latency.observe,
            on_measured=self._measured_root if role.root_wide else None,
            rejects_stem=role.rejects_stem,
            on_written=WrittenFeed(self.hub),
        )
        self.ingest = Ingest(
            self.writer,
            max_open_actions=config.max_open_actions,
            max_open_actions_total=role.open_actions_total(config.max_open_actions_total),
            redactor=config.redaction.redactor(metrics.count_redaction),
        )
        self.connections: set[Connection] = set()
        self.paused: set[Connection] = set()
        self.notifier = Notifier()
        self.known_roots = KnownRoots(state_dir if state_dir is not None else default_state_dir())
        self.sockets: list[str] = []
        """The paths of the sockets this process listens on (known once :meth:`serve` runs)."""
        self.root_locks = RootLocks(pid=os.getpid(), sockets=self.sockets, front=role.lock_holder)
        self._servers: list[asyncio.AbstractServer] = []
        self.health = Health()
        self.passes = WritePasses(
            self.writer, metrics, self.health, self.connections, durable=config.durability == "fsync"
        )
        """The write passes: what is staged is written, then answered."""
        self.intake = Intake(self.ingest, self.passes, metrics, self.health, role, self.open_root)
        """The one way into the write path, for every source (see :mod:`.intake`)."""
        self.collection = Collection(self.writer, role, self.passes)
        """Answers ``gz-ia gc``."""
        self.tasks: set[asyncio.Future[dict[str, object]]] = set()
        """Requests in progress (``gz-ia gc``), referenced until they answer."""
        self.http: HttpServer | None = None
        """The loopback HTTP side, when the daemon gave it a socket (:meth:`attach_http`)."""
        self._http_socket: socket.socket | None = None
        self.http_error: str | None = None
        self.fleet_report: Callable[[], dict[str, object]] | None = None
        """``fleet`` in the status: set by the daemon when this collector ships or is a hub."""
        """Why the HTTP side is not served although configured (the events are served regardless)."""
        self.web = WebView(
            self.hub,
            self.served_roots,
            lambda: self.http.base_url if self.http is not None else "",
            in_memory=lambda root: summaries_in_memory(self.writer.roots, root),
            key=lambda: self.http.key if self.http is not None else None,
            root_to_come=lambda path: root_to_come(path, self.uid),
        )
        """The web view on the HTTP side (its page, JSON and ``/live``), opened with the user's key."""
        self.connection_limits = (
            ConnectionLimits(config, metrics.connections_over_limit) if role.limits_connections else None
        )
        self._bind_gauges()

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
        metrics.live_subscribers.set_function(lambda: self.hub.subscribers)
        metrics.live_buffered_bytes.set_function(lambda: self.hub.bytes)
        self.hub.on_evicted = metrics.live_evicted.inc
        metrics.backlog_bytes.set_function(lambda: writer.pending_bytes)
        # These run on the metrics server's thread while the loop changes what they read: they
        # iterate copies (list() of a set or dict holds the GIL), never the live containers.
        metrics.backlog_batches.set_function(lambda: sum(c.awaiting for c in list(self.connections)))
        metrics.sessions_known.set_function(lambda: writer.sessions_known)
        metrics.sessions_active.set_function(lambda: writer.sessions_active)
        if self.role.root_wide:  # one process of a sharded collector reads the roots for them all
            metrics.open_cycles.source = self.open_cycle_ages

    def open_cycle_ages(self) -> tuple[dict[str, float], int]:
        """The age of each agent's oldest open cycle over the served roots, and how many cycles are
        open longer than ``alerts.hung_after`` (run on the metrics server's thread: it reads the
        files, and what memory holds through copies)."""
        now = datetime.now(UTC)
        after = self.config.alerts.hung_after
        oldest: dict[str, float] = {}
        hung = 0
        for root in self.served_roots():
            try:
                found, busy = open_cycles(Path(root), summaries_in_memory(self.writer.roots, root))
            except (OSError, LayoutError):
                continue  # a root gone or unreadable has nothing to say here
            for cycles in found.values():
                for cycle in cycles:
                    oldest[cycle.agent] = max(oldest.get(cycle.agent, 0.0), cycle.open_for_s(now))
                hung += len(answers.hung(cycles, now, after, busy))
        return oldest, hung

    def served_roots(self) -> list[str]:
        """The real paths of the session roots this collector writes, or wrote before (its own uid's)."""
        paths = {os.path.realpath(store.path) for store in self.writer.roots}
        paths.update(os.path.realpath(path) for path, uid, _socket in self.known_roots if uid == self.uid)
        return sorted(paths)

    @property
    def overloaded(self) -> bool:
        """Set while the next write pass holds too much: no connection is read."""
        return self.passes.overloaded

    @property
    def spool_dir(self) -> Path:
        """Where clients spool (and where adoption looks)."""
        return Path(self.config.spool_dir) if self.config.spool_dir else env.default_spool_dir()

    async def collect(self, request: Collect, uid: int) -> dict[str, object]:
        """Run ``gz-ia gc`` on a root (see :class:`.requests.Collection`); its report."""
        return await self.collection.collect(request, uid)

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

    def _shown_config(self) -> dict[str, object]:
        """The configuration as the status shows it: a password in the fleet's URL masked."""
        shown: dict[str, object] = msgspec.to_builtins(self.config)
        fleet = shown.get("fleet")
        if isinstance(fleet, dict):
            fleet["url"] = self.config.fleet.shown_url()
        return shown

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
            "config": self._shown_config(),
            "config_reload_refused": self.metrics.reload_refused or None,
            "limits": self.limits(),
            "metrics_endpoint": self.metrics.endpoint_report(),
            "endpoints": self.http.endpoints() if self.http is not None and self.http.port else {},
            "http_error": self.http_error,
            "fleet": self.fleet_report() if self.fleet_report is not None else None,
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
            "live": self.hub.report(),
        }

    def ui_url(self) -> str | None:
        """The web view's address with this start's key (None: the HTTP side is not served)."""
        return self.web.url() if self.http is not None else None

    def attach_http(self, server: HttpServer, sock: socket.socket) -> None:
        """Serve ``server`` on the listening TCP socket ``sock`` beside the event sockets."""
        self.http = server
        self._http_socket = sock

    # --- lifecycle ------------------------------------------------------------------------------------

    async def serve(self, sockets: list[socket.socket]) -> None:
        """Serve on the given listening sockets until SIGTERM/SIGINT, then drain and return."""
        loop = asyncio.get_running_loop()
        self.sockets[:] = [os.path.abspath(str(sock.getsockname())) for sock in sockets]
        if self.role.repairs_known_roots:
            self._repair_known_roots()  # before any connection is served
        self._servers += await serve_sockets(sockets, lambda: self._connection(self))
        if self.http is not None and self._http_socket is not None:
            await self.http.start(self._http_socket)
            log.info("http on %s", self.http.base_url)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.passes.stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        if self.role.adopts_spools:
            try:
                self.adopt_spools()
            except Exception:  # pragma: no cover - a bad spool must not stop the start
                log.exception("spool adoption failed; will retry")
        flusher = asyncio.create_task(self.passes.flush_loop(), name="gz-ia-flush")
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
            await self.passes.stopping.wait()
        finally:
            self.notifier.notify("STOPPING=1", "STATUS=draining")
            log.info("stopping: draining connections")
            for server in self._servers:
                server.close()
            if self.http is not None:
                await self.http.close()  # requests in progress are staged, then written below
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.pause_reading()
            adopter.cancel()
            watchdog.cancel()
            # Never cancel the flusher: a write pass in its worker thread would go on beside the
            # final one. Woken up, it finishes what is in flight and returns (stopping is set).
            self.passes.wake()
            await flusher
            for task in (adopter, watchdog):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.passes.flush_once()
            await self._close_connections()
            self.writer.close()
            self.root_locks.release()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
            log.info("stopped")
            self.notifier.close()

    def stop(self) -> None:
        """Ask :meth:`serve` to drain and return (as SIGTERM does)."""
        self.passes.stopping.set()

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
        self.passes.durable = new.durability == "fsync"
        self.writer.max_open_files = file_budget(new.max_open_files)  # LRU closes the excess at next open
        self.ingest.cycles.per_session = new.max_open_actions
        self.ingest.cycles.total = self.role.open_actions_total(new.max_open_actions_total)
        if new.redaction != old.redaction:
            self.ingest.redactor = new.redaction.redactor(self.metrics.count_redaction)
        if self.connection_limits is not None:
            self.connection_limits.configure(new)
        logging.getLogger().setLevel(new.log_level.upper())
        for connection in list(self.connections):
            connection.update_reading()  # a raised max_backlog_batches resumes paused connections
        log.info("configuration reloaded (%s)", changed_settings(old, new))

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

    def adopt_spools(self) -> int:
        """Deliver the disk spools of clients that died (see :mod:`.adoption`); return the events."""
        done = adopt_spools(
            self.spool_dir,
            self.intake,
            uid=self.uid,
            sockets=self.sockets,
            open_root=lambda path: self.open_root(path, self.uid),
        )
        count_adoption(self.metrics, done)
        if done.events:
            self.metrics.mark_written()
        return done.events

    async def _adoption_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.spool_adoption_interval)  # read again after a reload
            async with self.passes.lock:  # adoption writes synchronously: never beside a write pass
                try:
                    self.adopt_spools()
                except Exception:  # pragma: no cover - never let a bad spool take the daemon down
                    log.exception("spool adoption failed; will retry")
                self.passes.fail_lost_batches()  # its write pass also wrote (or lost) what clients staged
