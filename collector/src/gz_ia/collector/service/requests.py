"""What a collector answers besides batches and status: ``gz-ia gc`` on a root, as its writer."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from gz_ia.client.protocol import Collect
from gz_ia.collector.storage.retention import RetentionReport, apply_retention, collect_idle
from gz_ia.collector.storage.writer import Writer

from .duties import Role
from .gc_report import gc_report, keeper

if TYPE_CHECKING:
    from .write_passes import WritePasses

__all__ = ["Collection"]


class Collection:
    """Answers ``collect`` frames (``gz-ia gc``): a part the process owns.

    Args:
        writer: the one writer, whose sessions it releases and whose worker trims archives.
        role: which sessions and which root-wide files this process answers for.
        passes: the write passes, whose lock keeps a pass from running beside a removal.
    """

    def __init__(self, writer: Writer, role: Role, passes: WritePasses) -> None:
        self.writer = writer
        self.role = role
        self.passes = passes

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
            async with self.passes.lock:
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
