"""The single writer of every session file: batched appends, rotation, bounded open files, recovery.

Each session keeps its next ``seq``, its open actions and, per producer, the highest event number it
has written (the idempotency watermark). Accepted events are encoded straight into the session's
pending buffer; :meth:`Writer.flush` then writes every dirty session with one ``write(2)`` each, so a
burst costs a few syscalls instead of one per event, and lines never interleave because this is the
only writer. A failed write is undone (``ftruncate`` back to the last good size) and the session's
in-memory state is dropped, to be rebuilt from the files, which stay the source of truth.

Rotation (:mod:`.rotation`): when a session's buffer is detached for a write, an O(1) check against
the limits decides whether, once written, the active file becomes archive ``n``: it is renamed (never
copied), and a checkpoint of the state at that exact point (``state/<id>.session.json``), taken as
the buffer was detached, is written atomically. The old descriptor is
kept until :meth:`Writer.sync` has synced it, so durability=fsync still acknowledges only synced data.
Compression, fsyncs of checkpoints and retention (:mod:`.retention`) run in one worker thread.
Checkpoints are also written every ``snapshot_interval`` seconds while a session is written to, and at
close, which keeps ``gz-ia sessions`` cheap.

On first touch after a start, a session is recovered: a torn last line (a crash in the middle of a
write) is moved to ``<id>.events.torn`` and cut off, then the checkpoint is loaded and only the lines
after its position are replayed (normally: the active segment, or less).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import errno
import fcntl
import logging
import os
import stat
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import LogEvent
from gz_ia.collector.config import CollectorConfig

from . import _syncfs
from .checkpoints import Checkpoint, encode_checkpoint, read_checkpoint
from .names import (
    REJECTS_STATE_SUFFIX,
    REJECTS_STEM,
    active_name,
    archive_name,
    rejects_archive,
    rejects_archive_name,
    session_archive,
    session_id_of,
    state_name,
    torn_name,
)
from .replay import replay_session
from .retention import IDLE_RECHECK, RetentionPolicy, RetentionReport, disk_usage, enforce_session
from .roots import RootDirs, list_names, open_root, write_file_atomically
from .rotation import RotationPolicy, compress_archive, fsync_names, utc_day
from .segments import Segment, segment_exists
from .tally import MAX_WATERMARKS, TALLY_FIELDS, SessionTally

__all__ = ["MAX_WATERMARKS", "AppendFile", "FlushJob", "RootStore", "SessionState", "Writer"]

log = logging.getLogger("gz_ia.collector")

_FILE_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_SYNC_THREADS: Final = 8
_SYNCFS_MIN_FILES: Final = 64
"""A durable pass over this many files or more is synced with ``syncfs`` instead of file by file."""
_RELEASE_CHECKPOINT_BYTES: Final = 1 << 20
_SCAN_CHUNK: Final = 1 << 20
_MEASURE_INTERVAL: Final = 60.0
"""Seconds between two measures of a root's size after rotations (each lists the whole root)."""
_json: Final = msgspec.json.Encoder()


class FlushJob:
    """Pending buffers detached for one write pass, with the descriptors retired by rotations."""

    __slots__ = ("checkpoints", "failed", "items", "now", "retired")

    def __init__(
        self,
        items: list[tuple[AppendFile, bytes]],
        retired: list[int],
        now: float,
        failed: list[tuple[AppendFile, OSError]],
        checkpoints: dict[SessionState, tuple[Checkpoint, bool]],
    ) -> None:
        self.items = items
        self.retired = retired
        self.now = now
        self.failed = failed
        """Targets failed before writing (their directory was removed)."""
        self.checkpoints = checkpoints
        """Sessions due a checkpoint once written: the state at the end of their buffer, and whether
        the segment rotates. Taken when the buffer is detached, because lines staged while the pass
        is in flight advance ``seq`` and the watermarks past what the file will hold."""


class AppendFile:
    """An append-only file under a root, written through a pending buffer."""

    __slots__ = ("dir_fd", "fd", "generation", "last_write", "name", "pending", "segment", "size", "started")

    def __init__(self, dir_fd: int, name: str) -> None:
        self.dir_fd = dir_fd
        self.name = name
        # Bumped whenever memory forgets this file after a failure: anything staged before the
        # bump was lost with the pending buffer and must not be acknowledged.
        self.generation = 0
        self.fd: int | None = None
        self.pending: list[bytes | bytearray] = []
        """Lines staged for the next write pass, joined once when it detaches them: appending to a
        growing buffer instead reallocates and copies it over and over (1 in 8 appends)."""
        self.size = 0
        self.segment = 1
        """Number of the active segment (the archive number it gets when rotated)."""
        self.started = 0.0
        """When the active segment got its first bytes (writer clock), for daily rotation."""
        self.last_write = 0.0


NEVER: Final = datetime.min.replace(tzinfo=UTC)
"""Before every timestamp: a session's ``newest_stamp`` before its first event."""


def _parsed(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return NEVER


def format_timestamp(timestamp: datetime) -> str:
    """``timestamp`` as the session file spells it (RFC 3339, as msgspec encodes it)."""
    return _json.encode(timestamp)[1:-1].decode()


class SessionState(AppendFile, SessionTally):
    """What the collector knows about one session between writes: its file and its tally.

    Staging an event updates the tally in place, except two timestamps kept as ``datetime`` and
    formatted into ``last_time`` and ``newest_time`` only when a checkpoint needs them.
    """

    __slots__ = (
        *TALLY_FIELDS,
        "last_stamp",
        "newest_stamp",
        "root",
        "segment_seq",
        "session_id",
        "snapshot_at",
        "snapshot_size",
    )

    def __init__(self, root: RootStore, session_id: str) -> None:
        super().__init__(root.dirs.sessions_fd, active_name(session_id))
        self.root = root
        self.session_id = session_id
        self.clear_tally()
        self.segment_seq = 0
        self.last_stamp: datetime | None = None
        """Timestamp of the last event staged, not yet formatted into ``last_time``."""
        self.newest_stamp = NEVER
        """The greatest timestamp staged (one comparison per event: timestamps may go backwards)."""
        self.snapshot_at = 0.0
        self.snapshot_size = -1
        """Active-segment size at the last checkpoint (-1: none for this segment)."""

    def note_first(self, event: LogEvent) -> None:
        """Take the session's summary fields from its first event."""
        self.first_time = format_timestamp(event.timestamp)
        self.parent = event.parent_session_id or ""
        self.agent = event.agent

    def restore(self, fold: SessionTally) -> None:
        """Take the tally rebuilt by recovery."""
        self.copy_tally(fold)
        self.last_stamp = None
        self.newest_stamp = _parsed(self.newest_time) if self.newest_time else NEVER

    def checkpoint(self, *, offset: int | None = None, started: float | None = None) -> Checkpoint:
        """Return the state as of the end of what is staged, written at ``offset`` of the active file.

        With no pending bytes the default ``offset`` (the file's size) is that end. A checkpoint
        must never cover lines that are not in the file: recovery would take their producers'
        numbers as delivered and drop the clients' resends as duplicates.
        """
        if self.last_stamp is not None:
            self.last_time = format_timestamp(self.last_stamp)
            self.last_stamp = None
        if self.newest_time is not None and self.newest_stamp is not NEVER:
            self.newest_time = format_timestamp(self.newest_stamp)
        return self.tally_checkpoint(
            segment=self.segment,
            offset=self.size if offset is None else offset,
            segment_seq=self.segment_seq,
            started=self.started if started is None else started,
        )


class RootStore:
    """One session root: its directories, its sessions' state and its rejects file."""

    __slots__ = ("dirs", "rejects", "rejects_stem", "removed", "sessions")

    def __init__(self, dirs: RootDirs, rejects_stem: str = REJECTS_STEM) -> None:
        self.dirs = dirs
        self.sessions: dict[str, SessionState] = {}
        self.rejects_stem = rejects_stem
        self.rejects = AppendFile(dirs.root_fd, rejects_stem + ".jsonl")
        self.removed = False
        """Set once its directories were found deleted: nothing more may be staged into it (its
        open files are unlinked ones, where lines would be written and lost)."""

    @property
    def path(self) -> Path:
        """The root's path as the client named it."""
        return self.dirs.path


class Writer:
    """Own every open session file of the collector, across all roots.

    Args:
        max_open_files: bound on session files kept open at once (least recently written closed).
        max_idle_sessions: sessions whose state stays in memory; past it (plus an eighth) the least
            recently written idle ones are released and rebuilt from their files when they come back.
        on_torn: called with the number of bytes cut off when a torn line is repaired.
        config: rotation and retention settings (``[rotation]``, ``[retention]``); None: defaults.
        clock: wall clock (Unix seconds) for daily rotation, archive ages and snapshots.
        on_rotated: called on the event loop after each rotation.
        on_deleted: called from the worker thread with (files, bytes) removed by retention.
        on_synced: called (from the thread that synced) with the seconds one durable write pass
            spent in ``fdatasync``/``syncfs``.
        on_measured: called from the worker thread with (root path, bytes) after a retention pass
            measured what the root takes (at most once a minute per root, and after each gc).
        snapshot_interval: seconds between checkpoints of a session that keeps being written.
        background: run compression and retention in a worker thread (False: at once, inline).
        rejects_stem: the name (without ``.jsonl``) of the rejects file this writer appends to in each
            root: each such file has a single writer.
    """

    def __init__(
        self,
        *,
        max_open_files: int = 256,
        max_idle_sessions: int = 20_000,
        on_torn: Callable[[int], None] | None = None,
        config: CollectorConfig | None = None,
        clock: Callable[[], float] = time.time,
        on_rotated: Callable[[], None] | None = None,
        on_deleted: Callable[[int, int], None] | None = None,
        on_synced: Callable[[float], None] | None = None,
        on_measured: Callable[[Path, int], None] | None = None,
        snapshot_interval: float = 30.0,
        background: bool = True,
        rejects_stem: str = REJECTS_STEM,
    ) -> None:
        if max_open_files < 1:
            raise ValueError("max_open_files must be at least 1")
        self.max_open_files = max_open_files
        self._rejects_stem = rejects_stem
        self.max_idle_sessions = max_idle_sessions
        self._loaded = 0
        self._new_states = 0
        self._roots: dict[tuple[Path, int], RootStore] = {}
        self._stale_roots: list[RootStore] = []
        self._sync_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._open: collections.OrderedDict[AppendFile, None] = collections.OrderedDict()
        self._dirty: dict[AppendFile, None] = {}
        self._retired: list[int] = []
        self._on_torn = on_torn
        self._on_rotated = on_rotated
        self._on_deleted = on_deleted
        self._on_synced = on_synced
        self._on_measured = on_measured
        self._measured: dict[Path, float] = {}
        """When each root was last measured (worker thread only)."""
        self.clock = clock
        self.snapshot_interval = snapshot_interval
        self.rotations = 0
        self.deleted_files = 0
        self.deleted_bytes = 0
        self._executor = (
            concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gz-ia-storage")
            if background
            else None
        )
        self._jobs: list[concurrent.futures.Future[None]] = []
        self.configure(config or CollectorConfig())

    def configure(self, config: CollectorConfig) -> None:
        """Adopt the rotation and retention settings of ``config`` (also on SIGHUP reload).

        New limits apply from the next write; lowering a retention limit takes effect at the next
        rotation or ``gz-ia gc``.
        """
        self.rotation = RotationPolicy(config.rotation)
        self.retention = RetentionPolicy(config.retention)

    # --- roots and sessions ----------------------------------------------------------------------

    def root(self, path: Path, *, owner: int) -> RootStore:
        """Return the store for ``path``, opening it for ``owner`` on first use.

        Raises:
            LayoutError: the root is missing, a symlink, someone else's, or of a newer layout.
        """
        key = (path, owner)
        store = self._roots.get(key)
        if store is None:
            store = RootStore(open_root(path, owner=owner), self._rejects_stem)
            self._recover_rejects(store)
            self._roots[key] = store
            if self._on_measured is not None:
                dirs = store.dirs
                self._submit(lambda: self.measure(dirs, force=True))
        return store

    @property
    def roots(self) -> list[RootStore]:
        """Every root opened since start."""
        return list(self._roots.values())

    def root_path_of(self, target: AppendFile) -> Path | None:
        """The root a session or rejects file belongs to (None: a root no longer served)."""
        if isinstance(target, SessionState):
            return target.root.path
        return next(
            (store.path for store in (*self._roots.values(), *self._stale_roots) if store.rejects is target), None
        )

    def session(self, root: RootStore, session_id: str) -> SessionState:
        """Return the session's state, recovering it from its files on first touch."""
        state = root.sessions.get(session_id)
        if state is None:
            state = SessionState(root, session_id)
            self._recover(state)
            root.sessions[session_id] = state
            self._new_states += 1
        return state

    def release_for_collection(self, root: RootStore, session_id: str, idle_for: float, *, dry_run: bool) -> bool:
        """Before ``gz-ia gc`` removes an idle session: tell whether this writer keeps it, else forget it.

        Kept: a session in memory with lines staged, open actions, or a write within ``idle_for``
        seconds (whatever its files' mtimes say). Otherwise its state is dropped (unless
        ``dry_run``), so that nothing is appended to or checkpointed for the removed files: its next
        event starts it again. Call on the event loop with no write pass in flight.
        """
        state = root.sessions.get(session_id)
        if state is None:
            return False
        if state.pending or state in self._dirty or state.open_actions or self.clock() - state.last_write < idle_for:
            return True
        if not dry_run:
            self.forget(state)
        return False

    def storage_job(self, job: Callable[[], RetentionReport]) -> concurrent.futures.Future[RetentionReport]:
        """Run ``job`` in the storage worker thread, after the compression and retention queued before it."""
        if self._executor is None:
            done: concurrent.futures.Future[RetentionReport] = concurrent.futures.Future()
            done.set_result(job())
            return done
        return self._executor.submit(job)

    def count_deleted(self, report: RetentionReport) -> None:
        """Count what a retention pass run outside the writer (``gz-ia gc`` through the collector) deleted."""
        self._count_deleted(report)

    def mark_dirty(self, target: AppendFile) -> None:
        """Note that ``target`` has pending bytes for the next flush."""
        self._dirty[target] = None

    def mark_dirty_all(self, targets: Iterable[AppendFile]) -> None:
        """Note that each of ``targets`` has pending bytes (one call per batch)."""
        self._dirty.update(dict.fromkeys(targets))

    @property
    def dirty_files(self) -> int:
        """Files with lines staged for the next write pass."""
        return len(self._dirty)

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted but not yet written.

        Read by the metrics server's thread while the loop stages: it iterates a copy of the dirty
        set (``list()`` of a dict holds the GIL throughout), as iterating the set itself fails when
        the loop adds a session meanwhile.
        """
        return sum(len(line) for target in list(self._dirty) for line in target.pending)

    @property
    def sessions_known(self) -> int:
        """Sessions whose state is in memory (safe from the metrics thread, like :attr:`pending_bytes`)."""
        return sum(len(root.sessions) for root in self.roots)

    @property
    def sessions_active(self) -> int:
        """Sessions in memory with an open action (iterates copies: the loop may add sessions meanwhile)."""
        return sum(1 for root in self.roots for state in list(root.sessions.values()) if state.open_actions)

    @property
    def open_files(self) -> int:
        """Session and rejects files currently open."""
        return len(self._open)

    # --- writing -----------------------------------------------------------------------------------

    def flush(self, *, durable: bool = False) -> tuple[list[AppendFile], list[tuple[AppendFile, OSError]], int]:
        """Write (and with ``durable``, sync) every pending buffer at once; see :meth:`take`."""
        job = self.take()
        return self.finish(job, *self.write(job, durable=durable))

    def take(self) -> FlushJob:
        """Detach every pending buffer (event loop): staging goes on into fresh buffers meanwhile.

        The collector then runs :meth:`write` in a worker thread, so that the system calls (file
        creation, ``write(2)``, ``fdatasync``) overlap with decoding the next batches, and calls
        :meth:`finish` back on the loop. Only one job is in flight at a time.
        """
        retired, self._retired = self._retired, []
        dirty, self._dirty = self._dirty, {}
        items: list[tuple[AppendFile, bytes]] = []
        gone: list[tuple[AppendFile, OSError]] = []
        checkpoints: dict[SessionState, tuple[Checkpoint, bool]] = {}
        removed = self._removed_directories() if dirty else set()
        now = self.clock()
        today = utc_day(now) if self.rotation.daily else 0
        for target in dirty:
            if not target.pending:
                continue
            data = b"".join(target.pending)
            target.pending = []
            if target.dir_fd in removed:
                gone.append((target, FileNotFoundError(errno.ENOENT, "the session root was removed", target.name)))
                continue
            items.append((target, data))
            if isinstance(target, SessionState):
                due = self._checkpoint_due(target, len(data), now, today)
                if due is not None:
                    checkpoints[target] = due
        return FlushJob(items, retired, now, gone, checkpoints)

    def _checkpoint_due(
        self, state: SessionState, added: int, now: float, today: int
    ) -> tuple[Checkpoint, bool] | None:
        """Decide whether ``state`` rotates or is checkpointed once ``added`` bytes are written.

        Called as its buffer is detached, when the state in memory is exactly the state at the end
        of that buffer; returns that state as a checkpoint and whether the segment rotates.
        """
        size = state.size + added
        started = state.started if state.size else now
        rotate = self.rotation.due(size, state.seq - state.segment_seq, utc_day(started), today)
        if not rotate and now - state.snapshot_at < self.snapshot_interval:
            return None
        return state.checkpoint(offset=size, started=started), rotate

    def _removed_directories(self) -> set[int]:
        """Descriptors of root and sessions directories deleted under us (``rm -r .harness``).

        Their stores are dropped, so that the next handshake opens the path afresh (a client recreates
        a missing root before connecting); the old descriptors stay open until :meth:`close`, so that
        their numbers can never be reused for another directory while stale state still names them.
        """
        removed: set[int] = set()
        for key, store in list(self._roots.items()):
            fds = (store.dirs.root_fd, store.dirs.sessions_fd)
            try:
                deleted = any(os.fstat(fd).st_nlink == 0 for fd in fds)
            except OSError:
                deleted = True
            if deleted:
                log.error("session root %s was removed; its unwritten events stay with their clients", store.path)
                removed.update(fds)
                store.removed = True
                del self._roots[key]
                self._stale_roots.append(store)
        return removed

    def write(
        self, job: FlushJob, *, durable: bool
    ) -> tuple[list[tuple[AppendFile, bytes]], list[tuple[AppendFile, OSError]]]:
        """Append the detached buffers (safe in a worker thread); return (written, failed).

        It touches only descriptors, sizes and the open-file LRU, which the loop leaves alone while
        a job is in flight. A failed write is cut back to the last good size at once.
        """
        for fd in job.retired:
            with contextlib.suppress(OSError):
                if durable:
                    os.fdatasync(fd)
                os.close(fd)
        written: list[tuple[AppendFile, bytes]] = []
        failed: list[tuple[AppendFile, OSError]] = list(job.failed)
        for target, data in job.items:
            guarded: int | None = None
            try:
                if target.fd is not None and job.now - target.last_write > IDLE_RECHECK:
                    guarded = self._check_unlinked(target)
                fd = self._ensure_open(target)
                # Released even when write() fails, before anything else touches the buffer.
                with memoryview(data) as view:
                    done = 0
                    while done < len(data):
                        done += os.write(fd, view[done:])
            except OSError as exc:
                if target.fd is not None:
                    with contextlib.suppress(OSError):
                        os.ftruncate(target.fd, target.size)
                failed.append((target, exc))
                continue
            finally:
                if guarded is not None and guarded == target.fd:
                    with contextlib.suppress(OSError):
                        fcntl.flock(guarded, fcntl.LOCK_UN)
            written.append((target, data))
        if durable and written:
            started = time.perf_counter()
            written, unsynced = self._sync_written(written)
            if self._on_synced is not None:
                self._on_synced(time.perf_counter() - started)
            failed += unsynced
        return written, failed

    def _sync_written(
        self, written: list[tuple[AppendFile, bytes]]
    ) -> tuple[list[tuple[AppendFile, bytes]], list[tuple[AppendFile, OSError]]]:
        """Make every written file durable: ``fdatasync`` several at once (the kernel can commit them
        together), or one ``syncfs`` for a pass over many files, a single journal commit."""

        def sync(item: tuple[AppendFile, bytes]) -> OSError | None:
            target = item[0]
            try:
                if target.fd is not None:
                    os.fdatasync(target.fd)
                else:
                    # Closed since this pass wrote it (the open-file bound evicted it): its bytes
                    # are in the inode's page cache, which any descriptor of the file syncs.
                    fd = os.open(target.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=target.dir_fd)
                    try:
                        os.fdatasync(fd)
                    finally:
                        os.close(fd)
            except OSError as exc:
                return exc
            return None

        if len(written) >= _SYNCFS_MIN_FILES and _syncfs.AVAILABLE:
            errors = self._sync_filesystems(written, sync)
        elif len(written) == 1:
            errors = [sync(written[0])]
        else:
            errors = list(self._sync_threads().map(sync, written))
        synced: list[tuple[AppendFile, bytes]] = []
        failed: list[tuple[AppendFile, OSError]] = []
        for (target, data), error in zip(written, errors, strict=True):
            if error is None:
                synced.append((target, data))
                continue
            if target.fd is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(target.fd, target.size)
            failed.append((target, error))
        return synced, failed

    def _sync_threads(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._sync_pool is None:
            self._sync_pool = concurrent.futures.ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="gz-ia-sync")
        return self._sync_pool

    def _sync_filesystems(
        self,
        written: list[tuple[AppendFile, bytes]],
        sync: Callable[[tuple[AppendFile, bytes]], OSError | None],
    ) -> list[OSError | None]:
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
        return [sync(item) if item[0].dir_fd in failing else None for item in written]

    def finish(
        self,
        job: FlushJob,
        written: list[tuple[AppendFile, bytes]],
        failed: list[tuple[AppendFile, OSError]],
    ) -> tuple[list[AppendFile], list[tuple[AppendFile, OSError]], int]:
        """Account for a written job (event loop): sizes, summaries, rotation, checkpoints, failures.

        A failed target's in-memory state is forgotten (the next event rebuilds it from the file);
        anything staged for it while the job was in flight is dropped with it, and the generation
        bump makes sure the batches that staged it are not acknowledged.
        """
        for target, _exc in failed:
            self.forget(target)
        now = job.now
        rotation = self.rotation
        today = utc_day(now) if rotation.daily else 0
        checkpoints = job.checkpoints
        total = 0
        done: list[AppendFile] = []
        for target, data in written:
            if target.size == 0:
                target.started = now
            target.size += len(data)
            target.last_write = now
            total += len(data)
            done.append(target)
            if isinstance(target, SessionState):
                due = checkpoints.get(target)
                if due is None:
                    continue
                checkpoint, rotate = due
                if rotate:
                    self._rotate_session(target, checkpoint, now)
                else:
                    self._snapshot(target, now, checkpoint)
            elif rotation.due(target.size, 0, utc_day(target.started), today):
                self._rotate_rejects(target, now)
        self._loaded += self._new_states
        self._new_states = 0
        if self._loaded > self.max_idle_sessions + self.max_idle_sessions // 8:
            self._release_idle(now)
        return done, failed, total

    def _release_idle(self, now: float) -> None:
        """Let go of the least recently written idle sessions, keeping memory flat with many sessions.

        Idle: nothing pending (open actions included: an agent may never come back to finish them).
        Their state, open actions and watermarks are rebuilt from checkpoint and file on their next
        event, which is what recovery after a restart does anyway. Runs on the loop between write
        passes, so no state in flight is touched.
        """
        idle: list[SessionState] = []
        loaded = 0
        for store in self._roots.values():
            loaded += len(store.sessions)
            idle.extend(state for state in store.sessions.values() if not state.pending and state not in self._dirty)
        excess = loaded - self.max_idle_sessions
        if excess <= 0:
            self._loaded = loaded
            return
        idle.sort(key=lambda state: state.last_write)
        for state in idle[:excess]:
            # A checkpoint only where replaying the segment on return would cost much: creating one
            # file per released session would cost more than it saves.
            if state.size - max(state.snapshot_size, 0) > _RELEASE_CHECKPOINT_BYTES:
                self._snapshot(state, now)
            self._close(state)
            state.root.sessions.pop(state.session_id, None)
            loaded -= 1
        self._loaded = loaded

    def sync(self, targets: list[AppendFile]) -> list[tuple[AppendFile, OSError]]:
        """``fdatasync`` the given written targets and any rotated-away descriptors; return failures."""
        failed: list[tuple[AppendFile, OSError]] = []
        retired, self._retired = self._retired, []
        for fd in retired:
            try:
                os.fdatasync(fd)
            except OSError as exc:
                log.error("cannot sync a rotated segment: %s", exc)
            finally:
                with contextlib.suppress(OSError):
                    os.close(fd)
        for target in targets:
            if target.fd is None:
                continue
            try:
                os.fdatasync(target.fd)
            except OSError as exc:
                failed.append((target, exc))
        return failed

    def forget(self, target: AppendFile) -> None:
        """Drop what memory says about ``target``; the file on disk stays the truth."""
        self._close(target)
        target.generation += 1
        target.pending.clear()
        self._dirty.pop(target, None)
        if isinstance(target, SessionState):
            target.root.sessions.pop(target.session_id, None)

    def close(self) -> None:
        """Write final checkpoints, finish background work, close every file and root descriptor.

        Pending bytes must have been flushed before.
        """
        now = self.clock()
        for store in self._roots.values():
            for state in store.sessions.values():
                if not state.pending and state.snapshot_size != state.size:
                    with contextlib.suppress(OSError):
                        self._snapshot(state, now)
        self.wait_idle()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._close_retired()
        for target in list(self._open):
            self._close(target)
        if self._sync_pool is not None:
            self._sync_pool.shutdown(wait=True)
            self._sync_pool = None
        for store in (*self._roots.values(), *self._stale_roots):
            store.dirs.close()
        self._roots.clear()
        self._stale_roots.clear()

    def wait_idle(self) -> None:
        """Wait until queued compression and retention work is done (tests, shutdown)."""
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            with contextlib.suppress(Exception):
                job.result()

    def _close_retired(self) -> None:
        retired, self._retired = self._retired, []
        for fd in retired:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _check_unlinked(self, target: AppendFile) -> int | None:
        """Before writing to a file idle for a while: reopen it if ``gz-ia gc`` removed it.

        Returns the descriptor left under a shared ``flock``, which the caller releases after its
        write (None if the file was gone and closed). ``gz-ia gc`` removes a session only under an
        exclusive lock of its active file, so it cannot remove it between this check and the write.
        """
        assert target.fd is not None
        fd = target.fd
        fcntl.flock(fd, fcntl.LOCK_SH)
        if os.fstat(fd).st_nlink == 0:
            log.info("%s was removed while idle; starting it again", target.name)
            self._close(target)
            target.size = 0
            return None
        return fd

    def _ensure_open(self, target: AppendFile) -> int:
        fd = target.fd
        if fd is not None:
            self._open.move_to_end(target)
            return fd
        if len(self._open) >= self.max_open_files:
            # Close the least recently written eighth at once: evicting one file per open makes a
            # round-robin over slightly more sessions than slots miss on every single write.
            for _ in range(len(self._open) - self.max_open_files + max(1, self.max_open_files // 8)):
                oldest, _ = self._open.popitem(last=False)
                self._close(oldest)
        fd = os.open(target.name, _FILE_FLAGS, 0o600, dir_fd=target.dir_fd)
        target.fd = fd
        self._open[target] = None
        return fd

    def _close(self, target: AppendFile) -> None:
        self._open.pop(target, None)
        if target.fd is not None:
            with contextlib.suppress(OSError):
                os.close(target.fd)
            target.fd = None

    # --- rotation ----------------------------------------------------------------------------------

    def _retire(self, target: AppendFile) -> None:
        # The descriptor stays open until the next sync or flush: its last bytes may still need an
        # fdatasync before their batch is acknowledged (durability=fsync).
        self._open.pop(target, None)
        if target.fd is not None:
            self._retired.append(target.fd)
            target.fd = None

    def _snapshot(self, state: SessionState, now: float, checkpoint: Checkpoint | None = None) -> None:
        """Write ``checkpoint`` (default: the state now, which must have nothing pending) for ``state``."""
        dirs = state.root.dirs
        if dirs.state_fd is None:
            return
        try:
            write_file_atomically(
                dirs.state_fd,
                state_name(state.session_id),
                encode_checkpoint(checkpoint if checkpoint is not None else state.checkpoint()),
                durable=False,
            )
        except OSError as exc:
            log.warning("cannot write the checkpoint of %s: %s", state.session_id, exc)
        state.snapshot_at = now
        state.snapshot_size = state.size

    def _rotate_session(self, state: SessionState, written: Checkpoint, now: float) -> None:
        """Make the active file archive ``state.segment``; ``written`` is the state at its end."""
        dirs = state.root.dirs
        number = state.segment
        try:
            os.rename(
                state.name,
                archive_name(state.session_id, number),
                src_dir_fd=dirs.sessions_fd,
                dst_dir_fd=dirs.sessions_fd,
            )
        except OSError as exc:
            log.error("cannot rotate %s: %s (it keeps growing)", state.name, exc)
            return
        self._retire(state)
        state.segment = number + 1
        state.size = 0
        state.segment_seq = written.seq
        state.started = now
        self._snapshot(
            state,
            now,
            msgspec.structs.replace(written, segment=number + 1, offset=0, segment_seq=written.seq, started=now),
        )
        self._rotated()
        session_id = state.session_id
        self._submit(lambda: self._after_rotation(dirs, session_id, number))

    def _rotate_rejects(self, target: AppendFile, now: float) -> None:
        store = next((store for store in self._roots.values() if store.rejects is target), None)
        if store is None:
            return
        dirs = store.dirs
        number = target.segment
        stem = store.rejects_stem
        try:
            archived = rejects_archive_name(number, stem=stem)
            os.rename(target.name, archived, src_dir_fd=dirs.root_fd, dst_dir_fd=dirs.root_fd)
        except OSError as exc:
            log.error("cannot rotate %s: %s (it keeps growing)", target.name, exc)
            return
        self._retire(target)
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
        self._rotated()
        self._submit(lambda: self._after_rotation(dirs, None, number, stem))

    def _rotated(self) -> None:
        self.rotations += 1
        if self._on_rotated is not None:
            self._on_rotated()

    def _submit(self, job: Callable[[], None]) -> None:
        if self._executor is None:
            job()
            return
        self._jobs = [pending for pending in self._jobs if not pending.done()]
        self._jobs.append(self._executor.submit(job))

    def _after_rotation(self, dirs: RootDirs, session_id: str | None, number: int, stem: str = REJECTS_STEM) -> None:
        """Worker thread: make the rotation durable, compress the archive, apply retention.

        ``session_id`` None: the rejects file named by ``stem``.
        """
        try:
            if dirs.state_fd is not None:
                fsync_names(
                    dirs.state_fd, [state_name(session_id) if session_id is not None else stem + REJECTS_STATE_SUFFIX]
                )
            dir_fd = dirs.sessions_fd if session_id is not None else dirs.root_fd
            name_of = session_archive(session_id, number) if session_id is not None else rejects_archive(number, stem)
            if self.rotation.compress:
                compress_archive(dir_fd, name_of)
            else:
                os.fsync(dir_fd)
            report = enforce_session(dirs, session_id, number, self.retention, now=self.clock(), rejects_stem=stem)
            self._count_deleted(report)
            self.measure(dirs)
        except OSError as exc:
            log.error("after rotating segment %d of %s: %s", number, session_id or stem + ".jsonl", exc)

    def measure(self, dirs: RootDirs, *, force: bool = False) -> None:
        """Worker thread: report what a root takes to ``on_measured`` (a directory listing and a
        ``stat`` per file, so at most once every ``_MEASURE_INTERVAL`` seconds unless ``force``)."""
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

    def _count_deleted(self, report: RetentionReport) -> None:
        if not report.deleted:
            return
        self.deleted_files += report.files
        self.deleted_bytes += report.bytes
        if self._on_deleted is not None:
            self._on_deleted(report.files, report.bytes)

    # --- recovery ----------------------------------------------------------------------------------

    def _recover_rejects(self, store: RootStore) -> None:
        dirs = store.dirs
        target = store.rejects
        stem = store.rejects_stem
        checkpoint = read_checkpoint(dirs.state_fd, stem + REJECTS_STATE_SUFFIX)
        number = checkpoint.segment if checkpoint is not None else 1
        while segment_exists(dirs.root_fd, rejects_archive(number, stem)):
            number += 1
        target.segment = number
        target.started = checkpoint.started if checkpoint is not None and checkpoint.segment == number else 0.0
        with contextlib.suppress(OSError):
            info = os.stat(target.name, dir_fd=dirs.root_fd, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                target.size = info.st_size
        if target.size and not target.started:
            target.started = self.clock()

    def _recover(self, state: SessionState) -> None:
        dirs = state.root.dirs
        checkpoint = read_checkpoint(dirs.state_fd, state_name(state.session_id))
        number = checkpoint.segment if checkpoint is not None else 1
        while segment_exists(dirs.sessions_fd, session_archive(state.session_id, number)):
            number += 1
        state.segment = number
        try:
            fd: int | None = os.open(state.name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=state.dir_fd)
        except FileNotFoundError:
            fd = None
        try:
            size = 0
            if fd is not None:
                size = self._repair_torn_tail(state.dir_fd, state.session_id, fd, os.fstat(fd).st_size)
            state.size = size
            active = Segment(number, fd=fd, data=None, size=size, ino=0, active=True) if fd is not None else None
            fold, segment_seq, complete = replay_session(dirs.sessions_fd, state.session_id, checkpoint, number, active)
        finally:
            if fd is not None:
                os.close(fd)
        state.restore(fold)
        state.segment_seq = segment_seq
        if not complete:
            log.warning("%s: rebuilt from the retained segments only; some state may be missing", state.session_id)
        if checkpoint is not None and checkpoint.segment == number:
            state.segment_seq = checkpoint.segment_seq
            state.started = checkpoint.started
        if size and not state.started:
            state.started = self.clock()
        state.last_write = self.clock()
        # No checkpoint needed before the interval has passed: replaying a young segment is cheap.
        state.snapshot_at = state.last_write
        state.snapshot_size = size if checkpoint is not None and checkpoint.offset == size else -1

    def repair_root(self, path: Path, *, owner: int) -> int:
        """Repair the torn last line of every active session file of a root; return how many.

        Run at start for the roots served before, so that a crash's torn line is moved aside before
        any reader or client looks, not only when its session is next written.
        """
        store = self.root(path, owner=owner)
        repaired = 0
        for name in list_names(store.dirs.sessions_fd):
            session_id = session_id_of(name)
            if session_id is None or session_id in store.sessions:
                continue
            try:
                fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=store.dirs.sessions_fd)
            except OSError:
                continue
            try:
                size = os.fstat(fd).st_size
                if self._repair_torn_tail(store.dirs.sessions_fd, session_id, fd, size) != size:
                    repaired += 1
            finally:
                os.close(fd)
        return repaired

    def _repair_torn_tail(self, dir_fd: int, session_id: str, fd: int, size: int) -> int:
        """Cut a last line without its newline off into the torn file; return the good size."""
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return size
        end = size
        while end > 0:
            start = max(0, end - _SCAN_CHUNK)
            chunk = os.pread(fd, end - start, start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        fragment = os.pread(fd, size - end, end)
        torn = os.open(torn_name(session_id), _FILE_FLAGS, 0o600, dir_fd=dir_fd)
        try:
            os.write(torn, fragment + b"\n")
            os.fsync(torn)
        finally:
            os.close(torn)
        os.ftruncate(fd, end)
        if self._on_torn is not None:
            self._on_torn(len(fragment))
        return end
