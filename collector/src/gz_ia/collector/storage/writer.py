"""The single writer of every session file: batched appends, checkpoints and rotation.

Each session keeps its next ``seq``, its open actions and, per producer, the highest event number it
has written (the idempotency watermark): its tally (:mod:`.tally`). Accepted events are encoded
straight into the session's pending buffer; a write pass (:meth:`Writer.take`, :meth:`Writer.write`,
:meth:`Writer.finish`) then writes every dirty file with one ``write(2)`` each, so a burst costs a
few syscalls instead of one per event, and lines never interleave because this is the only writer.
A failed write is undone (``ftruncate`` back to the last good size) and the session's in-memory
state is dropped, to be rebuilt from the files (:mod:`.recovery`), which stay the source of truth.
Before a pass appends to a file it checks, with one ``fstat``, that the file it holds is still the
one at the session's name with every byte it wrote: a file replaced, truncated or removed by hand
is reopened (or created) at its name, so that no later event goes into an unlinked inode
(:meth:`.open_files.OpenFiles.check_touched`).

Rotation (:mod:`.rotation`): when a session's buffer is detached for a write, an O(1) check against
the limits decides whether, once written, the active file becomes archive ``n``: it is renamed (never
copied), and a checkpoint of the state at that exact point (``state/<id>.session.json``), taken as
the buffer was detached, is written atomically. A buffer that would take the segment past a limit
is cut between lines where the limit is reached (:meth:`Writer._cuts`): the write pass writes each
part with one ``write(2)`` and renames the file between them, so a segment exceeds ``max_bytes`` by
at most its last line, however large the burst. The state at such a cut is not kept (staging has
moved past it); the checkpoint after the pass covers the whole buffer. The old descriptor is kept
until the next write pass has synced it (:mod:`.open_files`), so durability=fsync still
acknowledges only synced data (:mod:`.durable`).
Compression, fsyncs of checkpoints and retention run in the storage worker thread (:mod:`.worker`).
Checkpoints are also written every ``snapshot_interval`` seconds while a session is written to, and at
close, which keeps ``gz-ia sessions`` cheap.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.collector.config import CollectorConfig

from .archive_tidy import tidy_archives
from .checkpoints import Checkpoint
from .durable import DurablePass
from .names import REJECTS_STEM
from .open_files import AppendFile, OpenFiles
from .recovery import recover_rejects, recover_session, repair_root
from .retention import IDLE_RECHECK, RetentionPolicy, RetentionReport
from .roots import RootDirs, open_root
from .rotation import RotationPolicy, cut_segment, rotate_rejects, rotate_session, utc_day
from .sessions import RootStore, SessionState
from .worker import StorageWorker

__all__ = ["FlushJob", "Writer"]

log = logging.getLogger("gz_ia.collector")

_RELEASE_CHECKPOINT_BYTES: Final = 1 << 20


def _write_all(fd: int, view: memoryview) -> None:
    """Write all of ``view`` (``write(2)`` may write less than asked)."""
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])


Cut = tuple[int, int]
"""Where a buffer is cut for a rotation: the offset in it after which the file is renamed, and the
``seq`` of the line before that offset."""


class FlushJob:
    """Pending buffers detached for one write pass, with the descriptors retired by rotations."""

    __slots__ = ("checkpoints", "cut_done", "cuts", "failed", "items", "lines", "now", "retired")

    def __init__(
        self,
        items: list[tuple[AppendFile, bytes]],
        retired: list[int],
        now: float,
        failed: list[tuple[AppendFile, OSError]],
        checkpoints: dict[SessionState, tuple[Checkpoint, bool]],
        cuts: dict[SessionState, list[Cut]] | None = None,
        cut_done: dict[SessionState, list[Cut]] | None = None,
        lines: dict[AppendFile, int] | None = None,
    ) -> None:
        self.items = items
        self.lines = lines if lines is not None else {}
        """How many lines each item's bytes hold: counted as they are joined, not searched for again."""
        self.cuts = cuts if cuts is not None else {}
        """Sessions whose buffer crosses a rotation limit: where it is cut (see :meth:`Writer._cuts`)."""
        self.cut_done = cut_done if cut_done is not None else {}
        """The cuts the pass made, each a rename done (a failed rename leaves the rest in one file)."""
        self.retired = retired
        self.now = now
        self.failed = failed
        """Targets failed before writing (their directory was removed)."""
        self.checkpoints = checkpoints
        """Sessions due a checkpoint once written: the state at the end of their buffer, and whether
        the segment rotates. Taken when the buffer is detached, because lines staged while the pass
        is in flight advance ``seq`` and the watermarks past what the file will hold."""


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
        on_written: called on the event loop by :meth:`finish` with every (file, bytes) a pass
            wrote, once they are in the files, and how many lines each file's bytes hold (the live
            subscriptions' feed).
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
        on_written: Callable[[list[tuple[AppendFile, bytes]], dict[AppendFile, int]], None] | None = None,
    ) -> None:
        self.on_written = on_written
        self._files = OpenFiles(max_open_files)
        self._rejects_stem = rejects_stem
        self.max_idle_sessions = max_idle_sessions
        self._loaded = 0
        self._new_states = 0
        self._roots: dict[tuple[Path, int], RootStore] = {}
        self._stale_roots: list[RootStore] = []
        self._durable = DurablePass()
        self._dirty: dict[AppendFile, None] = {}
        self._on_torn = on_torn
        self._on_rotated = on_rotated
        self._on_synced = on_synced
        self._worker = StorageWorker(background=background, on_deleted=on_deleted, on_measured=on_measured)
        self.clock = clock
        self.snapshot_interval = snapshot_interval
        self.rotations = 0
        self.configure(config or CollectorConfig())

    def configure(self, config: CollectorConfig) -> None:
        """Adopt the rotation and retention settings of ``config`` (also on SIGHUP reload).

        New limits apply from the next write; lowering a retention limit takes effect at the next
        rotation or ``gz-ia gc``.
        """
        self.rotation = RotationPolicy(config.rotation)
        self.retention = RetentionPolicy(config.retention)

    @property
    def max_open_files(self) -> int:
        """Bound on files kept open at once."""
        return self._files.limit

    @max_open_files.setter
    def max_open_files(self, limit: int) -> None:
        # A lower bound closes the excess at the next open.
        self._files.limit = limit

    @property
    def deleted_files(self) -> int:
        """Files removed by retention since start."""
        return self._worker.deleted_files

    @property
    def deleted_bytes(self) -> int:
        """Bytes removed by retention since start."""
        return self._worker.deleted_bytes

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
            recover_rejects(store, self.clock)
            self._roots[key] = store
            if self._worker.measures:
                dirs = store.dirs
                self._worker.submit(lambda: self._worker.measure(dirs, force=True))
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
            recover_session(state, self.clock, self._on_torn)
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
        return self._worker.run(job)

    def count_deleted(self, report: RetentionReport) -> None:
        """Count what a retention pass run outside the writer (``gz-ia gc`` through the collector) deleted."""
        self._worker.count_deleted(report)

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
        return len(self._files)

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
        retired = self._files.take_retired()
        dirty, self._dirty = self._dirty, {}
        items: list[tuple[AppendFile, bytes]] = []
        counts: dict[AppendFile, int] = {}
        gone: list[tuple[AppendFile, OSError]] = []
        checkpoints: dict[SessionState, tuple[Checkpoint, bool]] = {}
        cuts: dict[SessionState, list[Cut]] = {}
        removed = self._removed_directories() if dirty else set()
        now = self.clock()
        today = utc_day(now) if self.rotation.daily else 0
        for target in dirty:
            if not target.pending:
                continue
            lines = target.pending
            data = b"".join(lines)
            target.pending = []
            if target.dir_fd in removed:
                gone.append((target, FileNotFoundError(errno.ENOENT, "the session root was removed", target.name)))
                continue
            items.append((target, data))
            counts[target] = len(lines)
            if isinstance(target, SessionState):
                cut = self._cuts(target, lines, len(data)) if self._crosses(target, len(data), len(lines)) else None
                if cut:
                    cuts[target] = cut
                due = self._checkpoint_due(target, len(data), now, today, cut)
                if due is not None:
                    checkpoints[target] = due
        return FlushJob(items, retired, now, gone, checkpoints, cuts, lines=counts)

    def _crosses(self, state: SessionState, added: int, lines: int) -> bool:
        """Whether a buffer of ``added`` bytes and ``lines`` events takes the segment past a limit
        before its last line (past it at the last line is the rotation at the end of the pass)."""
        rotation = self.rotation
        if state.size + added > rotation.max_bytes:
            return True
        return bool(rotation.max_events) and state.seq - state.segment_seq > rotation.max_events

    def _cuts(self, state: SessionState, lines: list[bytes | bytearray], added: int) -> list[Cut]:
        """Where to cut a buffer crossing a limit: after each line that brings its segment to the limit.

        Run only for such a buffer, one ``len`` per line; each line of a session buffer is one event,
        so the ``seq`` at a cut is counted from the state's, which is that of the buffer's end.
        """
        limit = self.rotation.max_bytes
        max_events = self.rotation.max_events or 1 << 62  # 0: no event limit
        seq = state.seq - len(lines)
        size = state.size
        events = seq - state.segment_seq
        offset = 0
        found: list[Cut] = []
        for line in lines[:-1]:
            length = len(line)
            offset += length
            size += length
            seq += 1
            events += 1
            if size >= limit or events >= max_events:
                found.append((offset, seq))
                size = events = 0
        return found

    def _checkpoint_due(
        self, state: SessionState, added: int, now: float, today: int, cuts: list[Cut] | None = None
    ) -> tuple[Checkpoint, bool] | None:
        """Decide whether ``state`` rotates or is checkpointed once ``added`` bytes are written.

        Called as its buffer is detached, when the state in memory is exactly the state at the end
        of that buffer; returns that state as a checkpoint and whether the segment rotates. With
        ``cuts`` the last part of the buffer starts a segment of its own, and a checkpoint is always
        due (its segment, offset and start are set when the pass has made the cuts).
        """
        if cuts:
            offset, seq = cuts[-1]
            size = added - offset
            rotate = self.rotation.due(size, state.seq - seq, utc_day(now), today)
            return state.checkpoint(offset=size, started=now), rotate
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
                    guarded = self._files.check_unlinked(target)
                if target.fd is not None:
                    self._files.check_touched(target)
                fd = self._files.ensure_open(target)
                # Released even when write() fails, before anything else touches the buffer.
                with memoryview(data) as view:
                    if job.cuts and isinstance(target, SessionState) and target in job.cuts:
                        self._write_cut(target, view, job.cuts[target], job, durable=durable)
                    else:
                        _write_all(fd, view)
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
            written, unsynced = self._durable.sync(written)
            if self._on_synced is not None:
                self._on_synced(time.perf_counter() - started)
            failed += unsynced
        return written, failed

    def _write_cut(
        self, state: SessionState, view: memoryview, cuts: list[Cut], job: FlushJob, *, durable: bool
    ) -> None:
        """Write a buffer in its parts, renaming the active file into the next archive between them.

        A part is synced before its rename when the pass is durable: the descriptor leaves the pass
        with the rename, and the pass acknowledges only what it synced. ``state.size`` follows the
        file being written, so that a failed write is cut back to where that file was.
        """
        done: list[Cut] = []
        start = 0
        try:
            for offset, seq in cuts:
                fd = self._files.ensure_open(state)
                _write_all(fd, view[start:offset])
                if durable:
                    os.fdatasync(fd)
                start = offset
                if not cut_segment(state, self._files):
                    break  # the rest of the buffer goes on in the same file, as a failed rotation does
                done.append((offset, seq))
            _write_all(self._files.ensure_open(state), view[start:])
        finally:
            if done:
                job.cut_done[state] = done

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
        for state, made in job.cut_done.items():
            for number in range(state.segment - len(made), state.segment):
                self._rotated(state.root.dirs, state.session_id, number, REJECTS_STEM)
        rotation = self.rotation
        today = utc_day(now) if rotation.daily else 0
        checkpoints = job.checkpoints
        total = 0
        done: list[AppendFile] = []
        for target, data in written:
            if target.size == 0:
                target.started = now
            cut = job.cut_done.get(target) if job.cut_done and isinstance(target, SessionState) else None
            # After cuts the active file holds the buffer's last part only.
            target.size += len(data) - (cut[-1][0] if cut else 0)
            target.last_write = now
            total += len(data)
            done.append(target)
            if isinstance(target, SessionState):
                due = checkpoints.get(target)
                if cut:
                    target.segment_seq = cut[-1][1]
                if due is None:
                    continue
                checkpoint, rotate = due
                if target in job.cuts:
                    # The segment, offset and start of the checkpoint are those the cuts left.
                    checkpoint = msgspec.structs.replace(
                        checkpoint,
                        segment=target.segment,
                        offset=target.size,
                        segment_seq=target.segment_seq,
                        started=target.started,
                    )
                    # A failed rename leaves more in the active file than the cuts planned.
                    rotate = rotation.due(
                        target.size, checkpoint.seq - target.segment_seq, utc_day(target.started), today
                    )
                if rotate:
                    self._rotate_session(target, checkpoint, now)
                else:
                    target.save_checkpoint(now, checkpoint)
            elif rotation.due(target.size, 0, utc_day(target.started), today):
                self._rotate_rejects(target, now)
        if self.on_written is not None and written:
            self.on_written(written, job.lines)
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
                state.save_checkpoint(now)
            self._files.close(state)
            state.root.sessions.pop(state.session_id, None)
            loaded -= 1
        self._loaded = loaded

    def forget(self, target: AppendFile) -> None:
        """Drop what memory says about ``target``; the file on disk stays the truth."""
        self._files.close(target)
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
                        state.save_checkpoint(now)
        self._worker.shutdown()
        self._files.close_all()
        self._durable.close()
        for store in (*self._roots.values(), *self._stale_roots):
            store.dirs.close()
        self._roots.clear()
        self._stale_roots.clear()

    def wait_idle(self) -> None:
        """Wait until queued compression and retention work is done (tests, shutdown)."""
        self._worker.wait_idle()

    def measure(self, dirs: RootDirs, *, force: bool = False) -> None:
        """In the storage worker: report what a root takes (see :meth:`.worker.StorageWorker.measure`)."""
        self._worker.measure(dirs, force=force)

    def repair_root(self, path: Path, *, owner: int) -> int:
        """Repair the torn last line of every active session file of a root; return how many.

        Run at start for the roots served before, so that a crash's torn line is moved aside before
        any reader or client looks, not only when its session is next written. The root's archives
        are then settled in the storage worker (:mod:`.archive_tidy`): a kill may have left one in
        two copies, or uncompressed.
        """
        store = self.root(path, owner=owner)
        repaired = repair_root(store, self._on_torn)
        dirs = store.dirs
        self._worker.submit(lambda: self._tidy(dirs))
        return repaired

    def _tidy(self, dirs: RootDirs) -> None:
        """In the storage worker: settle the archives a kill left in two copies or uncompressed."""
        report = tidy_archives(dirs, compress=self.rotation.compress)
        if report:
            log.warning(
                "settled the archives a stop left unfinished under %s: %d plain copies removed beside their"
                " .gz, %d archives compressed, %d temporary files removed",
                dirs.path,
                report.plain_removed,
                report.compressed,
                report.temporaries_removed,
            )

    # --- rotation ----------------------------------------------------------------------------------

    def _rotate_session(self, state: SessionState, written: Checkpoint, now: float) -> None:
        number = state.segment
        if rotate_session(state, written, now, self._files):
            self._rotated(state.root.dirs, state.session_id, number, REJECTS_STEM)

    def _rotate_rejects(self, target: AppendFile, now: float) -> None:
        store = next((store for store in self._roots.values() if store.rejects is target), None)
        number = target.segment
        if store is not None and rotate_rejects(store, now, self._files):
            self._rotated(store.dirs, None, number, store.rejects_stem)

    def _rotated(self, dirs: RootDirs, session_id: str | None, number: int, stem: str) -> None:
        """Count a rotation and queue what follows it (``session_id`` None: the rejects file ``stem``)."""
        self.rotations += 1
        if self._on_rotated is not None:
            self._on_rotated()
        # The policies and the clock are read when the job runs, as a reload may come in between.
        self._worker.submit(
            lambda: self._worker.after_rotation(
                dirs,
                session_id,
                number,
                stem,
                compress=self.rotation.compress,
                retention=self.retention,
                now=self.clock(),
            )
        )
