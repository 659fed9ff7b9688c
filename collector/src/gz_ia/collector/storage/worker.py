"""The storage worker thread: what follows a rotation, and retention, off the event loop.

After a rotation the checkpoint and the directory entry are made durable, the archive is compressed
and retention is applied; a ``gz-ia gc`` run by the collector queues behind them. Each root's size
is measured here too (a listing and a ``stat`` per file), at most once a minute unless asked.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from .names import REJECTS_STATE_SUFFIX, rejects_archive, session_archive, state_name
from .retention import RetentionPolicy, RetentionReport, disk_usage, enforce_session
from .roots import RootDirs
from .rotation import compress_archive, fsync_names

__all__ = ["StorageWorker"]

log = logging.getLogger("gz_ia.collector")

_MEASURE_INTERVAL: Final = 60.0
"""Seconds between two measures of a root's size after rotations (each lists the whole root)."""


class StorageWorker:
    """Run storage jobs in order in one thread (or at once, inline, without ``background``).

    Args:
        background: run jobs in a worker thread (False: at once, in the caller's thread).
        on_deleted: called from the worker thread with (files, bytes) removed by retention.
        on_measured: called from the worker thread with (root path, bytes) a root takes.
    """

    def __init__(
        self,
        *,
        background: bool,
        on_deleted: Callable[[int, int], None] | None,
        on_measured: Callable[[Path, int], None] | None,
    ) -> None:
        self._executor = (
            concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gz-ia-storage")
            if background
            else None
        )
        self._jobs: list[concurrent.futures.Future[None]] = []
        self._on_deleted = on_deleted
        self._on_measured = on_measured
        self._measured: dict[Path, float] = {}
        """When each root was last measured (worker thread only)."""
        self.deleted_files = 0
        self.deleted_bytes = 0

    @property
    def measures(self) -> bool:
        """Whether anyone listens to the measures of roots."""
        return self._on_measured is not None

    def submit(self, job: Callable[[], None]) -> None:
        """Queue ``job``; its errors are its own to log."""
        if self._executor is None:
            job()
            return
        self._jobs = [pending for pending in self._jobs if not pending.done()]
        self._jobs.append(self._executor.submit(job))

    def run(self, job: Callable[[], RetentionReport]) -> concurrent.futures.Future[RetentionReport]:
        """Run ``job`` after the jobs queued before it; return its future."""
        if self._executor is None:
            done: concurrent.futures.Future[RetentionReport] = concurrent.futures.Future()
            done.set_result(job())
            return done
        return self._executor.submit(job)

    def wait_idle(self) -> None:
        """Wait until the queued jobs are done (tests, shutdown)."""
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            with contextlib.suppress(Exception):
                job.result()

    def shutdown(self) -> None:
        """Finish the queued jobs and stop the thread."""
        self.wait_idle()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def after_rotation(
        self,
        dirs: RootDirs,
        session_id: str | None,
        number: int,
        stem: str,
        *,
        compress: bool,
        retention: RetentionPolicy,
        now: float,
    ) -> None:
        """Make a rotation durable, compress the archive, apply retention.

        ``session_id`` None: the rejects file named by ``stem``.
        """
        try:
            if dirs.state_fd is not None:
                checkpoint = state_name(session_id) if session_id is not None else stem + REJECTS_STATE_SUFFIX
                fsync_names(dirs.state_fd, [checkpoint])
            dir_fd = dirs.sessions_fd if session_id is not None else dirs.root_fd
            name_of = session_archive(session_id, number) if session_id is not None else rejects_archive(number, stem)
            if compress:
                compress_archive(dir_fd, name_of)
            else:
                os.fsync(dir_fd)
            report = enforce_session(dirs, session_id, number, retention, now=now, rejects_stem=stem)
            self.count_deleted(report)
            self.measure(dirs)
        except OSError as exc:
            log.error("after rotating segment %d of %s: %s", number, session_id or stem + ".jsonl", exc)

    def measure(self, dirs: RootDirs, *, force: bool = False) -> None:
        """Report what a root takes to ``on_measured`` (a directory listing and a ``stat`` per file,
        so at most once every ``_MEASURE_INTERVAL`` seconds unless ``force``)."""
        if self._on_measured is None:
            return
        now = time.monotonic()
        if not force and now - self._measured.get(dirs.path, -_MEASURE_INTERVAL) < _MEASURE_INTERVAL:
            return
        self._measured[dirs.path] = now
        try:
            self._on_measured(dirs.path, disk_usage(dirs).bytes)
        except OSError as exc:
            log.warning("cannot measure %s: %s", dirs.path, exc)

    def count_deleted(self, report: RetentionReport) -> None:
        """Count what a retention pass deleted."""
        if not report.deleted:
            return
        self.deleted_files += report.files
        self.deleted_bytes += report.bytes
        if self._on_deleted is not None:
            self._on_deleted(report.files, report.bytes)
