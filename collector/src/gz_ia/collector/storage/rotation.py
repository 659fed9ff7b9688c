"""When a segment becomes an archive, and how an archive is compressed without stalling ingestion.

The check (:meth:`RotationPolicy.due`) is O(1): it compares counters the writer already keeps (bytes
in the active segment, ``seq`` at its start, the UTC day it was started). The rotation itself
(:func:`rotate_session`, :func:`rotate_rejects`) is a ``rename(2)`` of the active file to
``<id>.events.<n>.jsonl`` followed by an atomic checkpoint write; both happen on the event loop and
cost a few microseconds. Compression runs later in the writer's
worker thread (:func:`compress_archive`): it writes ``.<name>.gz.<pid>.tmp``, syncs it, renames it
to ``<id>.events.<n>.jsonl.gz`` and only then unlinks the plain archive, so a reader always finds at
least one complete copy (both for a moment, which it handles). A kill in between leaves both, or a
plain archive never compressed: start-up finishes the job (:mod:`.archive_tidy`). Two processes
compressing the same archive at once (a share restarted beside the others) each write their own
temporary file and end with the same result.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import Final

import msgspec

from gz_ia.collector.config import RotationConfig

from .archive_seal import write_sealed
from .checkpoints import Checkpoint, encode_checkpoint
from .names import REJECTS_STATE_SUFFIX, archive_name, rejects_archive_name
from .open_files import OpenFiles
from .roots import write_file_atomically
from .sessions import RootStore, SessionState

__all__ = [
    "RotationPolicy",
    "compress_archive",
    "cut_segment",
    "fsync_names",
    "rotate_rejects",
    "rotate_session",
    "utc_day",
]

log = logging.getLogger("gz_ia.collector")

_SECONDS_PER_DAY: Final = 86_400


def utc_day(timestamp: float) -> int:
    """Return the UTC day number (days since the epoch) of a Unix time."""
    return int(timestamp // _SECONDS_PER_DAY)


class RotationPolicy:
    """The rotation limits in the form the writer checks after every write.

    Args:
        config: ``[rotation]`` of the collector configuration.
    """

    __slots__ = ("compress", "daily", "max_bytes", "max_events")

    def __init__(self, config: RotationConfig) -> None:
        self.max_bytes = config.max_bytes
        self.max_events = config.max_events
        self.daily = config.daily
        self.compress = config.compress

    def due(self, size: int, events: int, started_day: int, today: int) -> bool:
        """Tell whether a segment of ``size`` bytes and ``events`` events, started on ``started_day``, rotates."""
        if size <= 0:
            return False
        if size >= self.max_bytes:
            return True
        if self.max_events and events >= self.max_events:
            return True
        return self.daily and started_day != today


def rotate_session(state: SessionState, written: Checkpoint, now: float, files: OpenFiles) -> bool:
    """Make the active file archive ``state.segment``; ``written`` is the state at its end.

    Returns whether it rotated (a failed rename is logged, and the file keeps growing).
    """
    number = state.segment
    if not cut_segment(state, files):
        return False
    state.segment_seq = written.seq
    state.started = now
    state.save_checkpoint(
        now, msgspec.structs.replace(written, segment=number + 1, offset=0, segment_seq=written.seq, started=now)
    )
    return True


def cut_segment(state: SessionState, files: OpenFiles) -> bool:
    """Make the active file archive ``state.segment``, and the next one active; return whether it did.

    In the middle of a write pass (a burst cut between lines) nothing more is done: the write pass
    goes on writing the session's buffer into the new active file, and no checkpoint is written (the
    state at this line is not kept, staging is past it; the one of the previous position stays valid,
    and the pass writes the next once the buffer is written). :func:`rotate_session` adds the
    checkpoint of a rotation between passes.
    """
    number = state.segment
    try:
        os.rename(
            state.name,
            archive_name(state.session_id, number),
            src_dir_fd=state.root.dirs.sessions_fd,
            dst_dir_fd=state.root.dirs.sessions_fd,
        )
    except OSError as exc:
        log.error("cannot rotate %s: %s (it keeps growing)", state.name, exc)
        return False
    files.retire(state)
    state.segment = number + 1
    state.size = 0
    return True


def rotate_rejects(store: RootStore, now: float, files: OpenFiles) -> bool:
    """Make a root's rejects file an archive; return whether it rotated."""
    target = store.rejects
    dirs = store.dirs
    number = target.segment
    stem = store.rejects_stem
    try:
        archived = rejects_archive_name(number, stem=stem)
        os.rename(target.name, archived, src_dir_fd=dirs.root_fd, dst_dir_fd=dirs.root_fd)
    except OSError as exc:
        log.error("cannot rotate %s: %s (it keeps growing)", target.name, exc)
        return False
    files.retire(target)
    target.segment = number + 1
    target.size = 0
    target.started = now
    if dirs.state_fd is not None:
        with contextlib.suppress(OSError):
            write_file_atomically(
                dirs.state_fd,
                stem + REJECTS_STATE_SUFFIX,
                encode_checkpoint(Checkpoint(segment=target.segment, started=now)),
            )
    return True


def compress_archive(dir_fd: int, name_of: Callable[[bool], str]) -> int:
    """Replace a plain archive with its sealed gzip form; return the bytes saved (0 if nothing was done).

    The plain file's mtime is kept on the compressed one: retention measures an archive's age by it.
    The seal (:mod:`.archive_seal`) does not look at it.
    """
    plain = name_of(False)
    packed = name_of(True)
    temporary = f".{packed}.{os.getpid()}.tmp"
    try:
        source = os.open(plain, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return 0  # already compressed, or removed by retention
    try:
        info = os.fstat(source)
        target = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dir_fd,
        )
        try:
            write_sealed(source, target, info)
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
            os.fsync(target)  # after utime: retention goes by the mtime
            packed_size = os.fstat(target).st_size
        finally:
            os.close(target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise
    finally:
        os.close(source)
    os.rename(temporary, packed, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    os.fsync(dir_fd)
    with contextlib.suppress(FileNotFoundError):  # another process finished the same archive
        os.unlink(plain, dir_fd=dir_fd)
    return max(0, info.st_size - packed_size)


def fsync_names(dir_fd: int, names: list[str]) -> None:
    """Make the named files and the directory entries durable (missing names are skipped)."""
    for name in names:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.fsync(dir_fd)
