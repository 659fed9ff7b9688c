"""The front of a sharded collector: the process that holds the clients' socket and starts the shares.

With ``shards = n`` (n > 1) the sessions are divided between n share processes by a hash of their
id (:func:`gz_ia.client.protocol.owner_of`); each share is a collector process on a private socket
(:mod:`.shares`). The front accepts the clients, checks their uid, applies the connection limits,
holds the roots' locks and the known-roots file, and hands each batch to the share of its sessions
(:mod:`.front_client`). The per-event work, the file writes and the syncs are thus spread over the
shares, one core each. It also adopts dead clients' spools, as a client of its own socket
(:mod:`.spool_delivery`), and answers status and metrics for the whole collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec
from prometheus_client import CollectorRegistry

from gz_ia.client import env
from gz_ia.client.protocol import Owners
from gz_ia.collector.config import CollectorConfig
from gz_ia.collector.metrics import Metrics
from gz_ia.collector.service.admission import ConnectionLimits
from gz_ia.collector.service.adoption import count_adoption, quarantined_spools
from gz_ia.collector.service.known_roots import KnownRoots, default_state_dir
from gz_ia.collector.service.listener import serve_sockets
from gz_ia.collector.service.reload import begin_reload, changed_settings, finish_reload
from gz_ia.collector.service.systemd import Notifier, watchdog_interval
from gz_ia.collector.storage.root_lock import RootLocked, RootLocks
from gz_ia.collector.storage.roots import LayoutError

from .front_client import FrontClient
from .metrics import MergedMetrics, merge_reports
from .shares import ShareFailed, Shares
from .spool_delivery import adopt_spools_through
from .wire import route_frame

__all__ = ["Front"]

log = logging.getLogger("gz_ia.collector")

_STATUS_INTERVAL: Final = 10.0


class Front:
    """The front process of a sharded collector (see the module's docstring).

    Args: as :class:`.server.Collector`, and ``near``: the listening socket's path, beside which the
    shares' private directory is made.
    """

    def __init__(
        self,
        config: CollectorConfig,
        metrics: Metrics,
        *,
        version: str,
        load_config: Callable[[], CollectorConfig] | None = None,
        near: Path,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.version = version
        self._load_config = load_config
        self.uid = os.getuid()
        self.started = time.time()
        self.fleet_report: Callable[[], dict[str, object]] | None = None
        """``fleet`` in the status: set by the daemon when this collector ships or is a hub."""
        self.socket_path = near
        self.shares = Shares(config.shards, config, near=near, version=version)
        self.owners = Owners(config.shards)
        """The share of each session, for the batches of clients that do not route."""
        self.route_frames = [route_frame(share) for share in range(config.shards)]
        self.clients: set[FrontClient] = set()
        self.connection_limits = ConnectionLimits(
            config, metrics.connections_over_limit, per_connection=1 + config.shards
        )
        """A client connection costs the front one descriptor, and one more to each share."""
        self.paused: set[FrontClient] = set()
        """Clients not read for backpressure: a share's backlog is full, or they do not read."""
        self.connecting: set[asyncio.Future[None]] = set()
        self.notifier = Notifier()
        self._stopping = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._reloads: set[asyncio.Future[None]] = set()
        self.registry = CollectorRegistry()
        """What the metrics endpoint serves: this process's metrics merged with every share's."""
        self.registry.register(MergedMetrics(metrics.registry, self.shares.sockets))
        metrics.connections.set_function(lambda: len(self.clients))
        metrics.paused_connections.set_function(lambda: len(self.paused))
        self.sockets: list[str] = []
        """The paths of the sockets the front listens on (known once :meth:`serve` runs)."""
        self.root_locks = RootLocks(pid=os.getpid(), sockets=self.sockets)
        """The roots this collector serves: the front holds them for its shares (see .storage.root_lock)."""
        self.known_roots = KnownRoots(default_state_dir())
        self.root_refusal = ""
        """Why the last root was refused (the detail of the client's ``root_locked``)."""

    async def serve(self, sockets: list[socket.socket]) -> None:
        """Start the shares, serve the clients until SIGTERM/SIGINT, then drain and return."""
        loop = asyncio.get_running_loop()
        self.sockets[:] = [os.path.abspath(str(sock.getsockname())) for sock in sockets]
        self._take_known_roots()  # before the shares start: share 0 repairs the roots held here
        try:
            await self.shares.start()
        except ShareFailed as exc:
            log.error("cannot start the collector's shares: %s", exc)
            self.shares.stop()
            raise SystemExit(1) from exc
        servers = await serve_sockets(sockets, lambda: FrontClient(self))
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        watcher = asyncio.create_task(self.shares.watch(), name="gz-ia-shares")
        await self._adopt()  # before READY, as a single collector does
        adopter = asyncio.create_task(self._adoption_loop(), name="gz-ia-adoption")
        watchdog = asyncio.create_task(self._watchdog_loop(), name="gz-ia-watchdog")
        self.notifier.notify("READY=1", f"STATUS=serving on {len(sockets)} socket(s) with {self.shares.count} shares")
        log.info(
            "gz-ia collector %s ready (durability=%s, %d shares)",
            self.version,
            self.config.durability,
            self.shares.count,
        )
        try:
            await self._stopping.wait()
        finally:
            self.notifier.notify("STOPPING=1", "STATUS=draining")
            log.info("stopping: draining connections")
            for server in servers:
                server.close()
            for client in list(self.clients):
                client.stop_reading()
            tasks = (watcher, watchdog, adopter, *self._reloads)  # a reload in flight is moot now
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # Each share drains: it writes what it staged and answers it, which reaches the
            # clients through their links, and then closes its connections.
            await asyncio.to_thread(self.shares.stop)
            await asyncio.sleep(0)
            for client in list(self.clients):
                client.close()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
            log.info("stopped")
            self.notifier.close()

    def take_root(self, root: str, uid: int) -> bool:
        """Take the lock of the root a client's hello names, for this collector; False when another
        collector holds it (:attr:`root_refusal` says which). A root that cannot be used at all is
        passed on: the shares refuse it with the reason."""
        path = Path(root)
        try:
            self.root_locks.take(path, uid)
        except RootLocked as exc:
            self.root_refusal = str(exc)
            self.root_locks.refused(exc)
            return False
        except (LayoutError, OSError):
            return True
        self.known_roots.add(path, uid, self.sockets[0] if self.sockets else "")
        return True

    def _take_known_roots(self) -> None:
        """Take the roots this collector served before (its share 0 repairs them before it answers)."""
        gone: list[tuple[Path, int]] = []
        for path, uid in self.known_roots.served_through(self.sockets):
            if not path.is_dir():
                gone.append((path, uid))
                continue
            try:
                self.root_locks.take(path, uid)
            except (RootLocked, LayoutError, OSError) as exc:
                log.warning("not taking %s at start: %s", path, exc)
        self.known_roots.discard(gone)

    @property
    def spool_dir(self) -> Path:
        """Where clients spool (and where adoption looks)."""
        return Path(self.config.spool_dir) if self.config.spool_dir else env.default_spool_dir()

    async def _adopt(self) -> None:
        """Deliver the spools of clients that died, through the front's own socket (see adoption)."""
        try:
            done = await asyncio.to_thread(
                adopt_spools_through,
                self.socket_path,
                self.spool_dir,
                uid=self.uid,
                sockets=self.sockets,
                shares=self.shares.count,
            )
        except Exception:  # pragma: no cover - never let a bad spool take the daemon down
            log.exception("spool adoption failed; will retry")
        else:
            count_adoption(self.metrics, done)

    async def _adoption_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.spool_adoption_interval)  # read again after a reload
            await self._adopt()

    async def _watchdog_loop(self) -> None:
        if not self.notifier.enabled:
            return
        interval = watchdog_interval()
        while True:
            # Pinged only while every share runs: one that keeps failing to start shows in systemd.
            lines = ["WATCHDOG=1"] if interval is not None and self.shares.alive() else []
            lines.append(f"STATUS=serving: {len(self.clients)} connection(s), {self.shares.count} shares")
            self.notifier.notify(*lines)
            await asyncio.sleep(interval if interval is not None else _STATUS_INTERVAL)

    def connected(self, connecting: asyncio.Future[None]) -> None:
        """Forget a finished connection attempt; log it if it failed on a bug."""
        self.connecting.discard(connecting)
        if not connecting.cancelled() and connecting.exception() is not None:
            log.error("connecting a client to the shares failed", exc_info=connecting.exception())

    @property
    def stopping(self) -> bool:
        """Whether the front is draining."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Ask :meth:`serve` to drain and return (as SIGTERM does)."""
        self._stopping.set()

    def reload(self) -> None:
        """SIGHUP: re-read the configuration and have the shares apply it, in the background.

        Reloads run one after the other; each is over (logged, ``READY=1``) once every share shows
        the new configuration, so that what follows a reload meets the new limits in any share.
        """
        task = asyncio.ensure_future(self._reload())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _reload(self) -> None:
        async with self._reload_lock:
            new = begin_reload(self._load_config, self.config, self.notifier, self.metrics)
            if new is None:
                return
            old = self.config
            self.config = new
            self.connection_limits.configure(new)
            logging.getLogger().setLevel(new.log_level.upper())
            lagging = await self.shares.reload(new)
            if lagging:
                log.warning(
                    "configuration reloaded (%s), but share(s) %s do not show it yet; see their log",
                    changed_settings(old, new),
                    ", ".join(map(str, lagging)),
                )
            else:
                log.info("configuration reloaded (%s) and applied by every share", changed_settings(old, new))
            finish_reload(self.notifier, self.metrics, f"serving with {self.shares.count} shares")

    def status(self, reports: list[dict[str, object]]) -> dict[str, object]:
        """``gz-ia status`` of the whole collector: the shares' reports merged, with the front's facts.

        With a share down, the shares that answered (none, when the front answers alone) and
        ``healthy`` false.
        """
        merged = merge_reports(reports)
        merged["config_reload_refused"] = self.metrics.reload_refused or None  # the front reloads
        down = self.shares.down()
        if down or len(reports) < self.shares.count:
            merged["healthy"] = False
            merged["reasons"] = [
                *(merged.get("reasons") or []),  # type: ignore[misc]
                *(f"share {share} is down, being restarted" for share in down),
            ]
        limits = merged.get("limits")
        merged["limits"] = {
            **(limits if isinstance(limits, dict) else {}),
            **self.connection_limits.report(),  # the front's: it holds the clients
        }
        merged.update(
            {
                "version": self.version,
                "pid": os.getpid(),
                "uptime_seconds": round(time.time() - self.started, 3),
                "config": {
                    **msgspec.to_builtins(self.config),
                    "fleet": {**msgspec.to_builtins(self.config.fleet), "url": self.config.fleet.shown_url()},
                },
                "durability": self.config.durability,
                "fleet": self.fleet_report() if self.fleet_report is not None else None,
                "metrics_endpoint": self.metrics.endpoint_report(),
                "connections": len(self.clients),
                "spools": {"quarantined": quarantined_spools(self.spool_dir)},
                "shares": {
                    "count": self.shares.count,
                    "pids": self.shares.pids(),
                    "down": down,
                    "restarts": self.shares.restarts,
                },
            }
        )
        return merged
