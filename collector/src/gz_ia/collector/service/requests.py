"""What a collector answers besides batches: ``gz-ia gc`` on a root, and ``gz-ia status``."""

from __future__ import annotations

import asyncio
import functools
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from gz_ia.client import env
from gz_ia.client.protocol import Collect
from gz_ia.collector.http import HttpServer
from gz_ia.collector.live import Hub
from gz_ia.collector.metrics import Metrics, root_id
from gz_ia.collector.storage.retention import RetentionReport, apply_retention, collect_idle
from gz_ia.collector.storage.writer import Writer

from .adoption import quarantined_spools
from .duties import Role
from .gc_report import gc_report, keeper
from .health import Health

if TYPE_CHECKING:
    from gz_ia.collector.config import CollectorConfig

    from .admission import ConnectionLimits
    from .connection import Connection

__all__ = ["Answers"]


class Answers:
    """The collector's answers to ``collect`` and ``query`` frames (a part of :class:`.server.Collector`)."""

    config: CollectorConfig
    metrics: Metrics
    writer: Writer
    health: Health
    role: Role
    version: str
    started: float
    hub: Hub
    connections: set[Connection]
    connection_limits: ConnectionLimits | None
    http: HttpServer | None
    http_error: str | None
    fleet_report: Callable[[], dict[str, object]] | None
    _flush_lock: asyncio.Lock

    @property
    def spool_dir(self) -> Path:
        """Where clients spool (and where adoption looks)."""
        return Path(self.config.spool_dir) if self.config.spool_dir else env.default_spool_dir()

    async def collect(self, request: Collect, uid: int) -> dict[str, object]:
        """Apply retention to a root now, as its writer (see :mod:`.gc_report`).

        Idle sessions are removed on the loop under the flush lock, so no write pass is in flight
        and nothing is staged meanwhile; archives are trimmed in the storage worker with the
        running retention settings, tightened by the request's vacuum limits. A process that serves
        part of the sessions removes and trims those; the rejects files and the root's budget are
        the root-wide process's (see :class:`.duties.Role`).

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
            return role.serves is None or role.serves[session_id]

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
