"""Making a write pass durable before it is acknowledged (``durability = "fsync"``).

A few files are synced with ``fdatasync`` each, several at once from a small thread pool (the
kernel can commit them together); a pass over many files is synced with one ``syncfs`` per
filesystem, a single journal commit. A file that fails to sync is cut back to its last good size,
so that its bytes are neither acknowledged nor left for a reader.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from typing import Final

from . import _syncfs
from .open_files import AppendFile

__all__ = ["DurablePass"]

_SYNC_THREADS: Final = 8
_SYNCFS_MIN_FILES: Final = 64
"""A durable pass over this many files or more is synced with ``syncfs`` instead of file by file."""

Written = list[tuple[AppendFile, bytes]]
Failed = list[tuple[AppendFile, OSError]]


class DurablePass:
    """Sync what write passes wrote; owns the sync threads, started on first need."""

    __slots__ = ("_pool",)

    def __init__(self) -> None:
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def sync(self, written: Written) -> tuple[Written, Failed]:
        """Make every written file durable; return (synced, failed)."""
        if len(written) >= _SYNCFS_MIN_FILES and _syncfs.AVAILABLE:
            errors = self._sync_filesystems(written)
        elif len(written) == 1:
            errors = [_sync_one(written[0])]
        else:
            errors = list(self._threads().map(_sync_one, written))
        synced: Written = []
        failed: Failed = []
        for (target, data), error in zip(written, errors, strict=True):
            if error is None:
                synced.append((target, data))
                continue
            if target.fd is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(target.fd, target.size)
            failed.append((target, error))
        return synced, failed

    def close(self) -> None:
        """Stop the sync threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="gz-ia-sync")
        return self._pool

    @staticmethod
    def _sync_filesystems(written: Written) -> list[OSError | None]:
        """Sync a pass over many files with one ``syncfs`` per directory (so per filesystem).

        Where ``syncfs`` reports a write-back error, that directory's files are synced one by one,
        which tells which of them failed; the others are acknowledged.
        """
        directories = {target.dir_fd for target, _data in written}
        failing: set[int] = set()
        for dir_fd in directories:
            try:
                _syncfs.syncfs(dir_fd)
            except OSError:
                failing.add(dir_fd)
        return [_sync_one(item) if item[0].dir_fd in failing else None for item in written]


def _sync_one(item: tuple[AppendFile, bytes]) -> OSError | None:
    target = item[0]
    try:
        if target.fd is not None:
            os.fdatasync(target.fd)
        else:
            # Closed since this pass wrote it (the open-file bound evicted it): its bytes are in
            # the inode's page cache, which any descriptor of the file syncs.
            fd = os.open(target.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=target.dir_fd)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        return exc
    return None
