"""The single writer of every session file: batched appends, bounded open files, crash recovery.

Each session keeps its next ``seq``, its open actions and, per producer, the highest event number it
has written (the idempotency watermark). Accepted events are encoded straight into the session's
pending buffer; :meth:`Writer.flush` then writes every dirty session with one ``write(2)`` each, so a
burst costs a few syscalls instead of one per event, and lines never interleave because this is the
only writer. A failed write is undone (``ftruncate`` back to the last good size) and the session's
in-memory state is dropped, to be rebuilt from the file, which stays the source of truth.

On first touch after a start, a session is recovered from its file: a torn last line (a crash in the
middle of a write) is moved to ``<id>.events.torn`` and cut off, then the lines are replayed to
rebuild ``seq``, the open actions and the watermarks.
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import Stage

from ._layout import REJECTS_FILE, RootDirs, active_name, open_root, torn_name

__all__ = ["AppendFile", "RootStore", "SessionState", "Writer"]

_FILE_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_SCAN_CHUNK: Final = 1 << 20
MAX_WATERMARKS: Final = 4096


class _Trace(msgspec.Struct, gc=False):
    """The part of a stored line that recovery needs."""

    action: str
    stage: Stage
    seq: int = 0
    delivery: str | None = None


_trace_decoder: Final = msgspec.json.Decoder(_Trace)


class AppendFile:
    """An append-only file under a root, written through a pending buffer."""

    __slots__ = ("dir_fd", "fd", "generation", "name", "pending", "size")

    def __init__(self, dir_fd: int, name: str) -> None:
        self.dir_fd = dir_fd
        self.name = name
        # Bumped whenever memory forgets this file after a failure: anything staged before the
        # bump was lost with the pending buffer and must not be acknowledged.
        self.generation = 0
        self.fd: int | None = None
        self.pending = bytearray()
        self.size = 0


class SessionState(AppendFile):
    """What the collector knows about one session between writes."""

    __slots__ = ("marks", "open_actions", "root", "seq", "session_id")

    def __init__(self, root: RootStore, session_id: str) -> None:
        super().__init__(root.dirs.sessions_fd, active_name(session_id))
        self.root = root
        self.session_id = session_id
        self.seq = 0
        self.open_actions: dict[str, Stage] = {}
        self.marks: dict[str, int] = {}

    def note_delivery(self, producer: str, number: int) -> None:
        """Record that ``producer``'s event ``number`` is in this session (bounded table)."""
        marks = self.marks
        marks[producer] = number
        if len(marks) > MAX_WATERMARKS:
            # Forget the producers written longest ago; a resend from one of them after this many
            # newer producers is the only case that could slip through as a duplicate.
            for stale in list(marks)[: MAX_WATERMARKS // 2]:
                del marks[stale]


class RootStore:
    """One session root: its directories, its sessions' state and its rejects file."""

    __slots__ = ("dirs", "rejects", "sessions")

    def __init__(self, dirs: RootDirs) -> None:
        self.dirs = dirs
        self.sessions: dict[str, SessionState] = {}
        self.rejects = AppendFile(dirs.root_fd, REJECTS_FILE)

    @property
    def path(self) -> Path:
        """The root's path as the client named it."""
        return self.dirs.path


class Writer:
    """Own every open session file of the collector, across all roots.

    Args:
        max_open_files: bound on session files kept open at once (least recently written closed).
        on_torn: called with the number of bytes cut off when a torn line is repaired.
    """

    def __init__(self, *, max_open_files: int = 256, on_torn: Callable[[int], None] | None = None) -> None:
        if max_open_files < 1:
            raise ValueError("max_open_files must be at least 1")
        self.max_open_files = max_open_files
        self._roots: dict[tuple[Path, int], RootStore] = {}
        self._open: collections.OrderedDict[AppendFile, None] = collections.OrderedDict()
        self._dirty: dict[AppendFile, None] = {}
        self._on_torn = on_torn

    # --- roots and sessions ----------------------------------------------------------------------

    def root(self, path: Path, *, owner: int) -> RootStore:
        """Return the store for ``path``, opening it for ``owner`` on first use.

        Raises:
            LayoutError: the root is missing, a symlink, someone else's, or of a newer layout.
        """
        key = (path, owner)
        store = self._roots.get(key)
        if store is None:
            store = RootStore(open_root(path, owner=owner))
            self._roots[key] = store
        return store

    @property
    def roots(self) -> list[RootStore]:
        """Every root opened since start."""
        return list(self._roots.values())

    def session(self, root: RootStore, session_id: str) -> SessionState:
        """Return the session's state, recovering it from its file on first touch."""
        state = root.sessions.get(session_id)
        if state is None:
            state = SessionState(root, session_id)
            self._recover(state)
            root.sessions[session_id] = state
        return state

    def mark_dirty(self, target: AppendFile) -> None:
        """Note that ``target`` has pending bytes for the next flush."""
        self._dirty[target] = None

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted but not yet written."""
        return sum(len(target.pending) for target in self._dirty)

    @property
    def open_files(self) -> int:
        """Session and rejects files currently open."""
        return len(self._open)

    # --- writing -----------------------------------------------------------------------------------

    def flush(self) -> tuple[list[AppendFile], list[tuple[AppendFile, OSError]], int]:
        """Write every pending buffer; return (written targets, failures, bytes written).

        A failed target's partial write is cut off and, for a session, its in-memory state is
        forgotten so that the next event rebuilds it from the file.
        """
        dirty = self._dirty
        self._dirty = {}
        written: list[AppendFile] = []
        failed: list[tuple[AppendFile, OSError]] = []
        total = 0
        for target in dirty:
            data = target.pending
            if not data:
                continue
            try:
                fd = self._ensure_open(target)
                view = memoryview(data)
                done = 0
                while done < len(data):
                    done += os.write(fd, view[done:])
                view.release()
            except OSError as exc:
                failed.append((target, exc))
                self._undo(target)
                continue
            target.size += len(data)
            total += len(data)
            data.clear()
            written.append(target)
        return written, failed, total

    def sync(self, targets: list[AppendFile]) -> list[tuple[AppendFile, OSError]]:
        """``fdatasync`` the given written targets (group commit); return those that failed."""
        failed: list[tuple[AppendFile, OSError]] = []
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
        """Close every file and root descriptor (pending bytes must have been flushed)."""
        for target in list(self._open):
            self._close(target)
        for store in self._roots.values():
            store.dirs.close()
        self._roots.clear()

    def _undo(self, target: AppendFile) -> None:
        if target.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(target.fd, target.size)
        self.forget(target)

    def _ensure_open(self, target: AppendFile) -> int:
        fd = target.fd
        if fd is not None:
            self._open.move_to_end(target)
            return fd
        while len(self._open) >= self.max_open_files:
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

    # --- recovery ----------------------------------------------------------------------------------

    def _recover(self, state: SessionState) -> None:
        try:
            fd = os.open(state.name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=state.dir_fd)
        except FileNotFoundError:
            return
        try:
            size = os.fstat(fd).st_size
            end = self._repair_torn_tail(state, fd, size)
            state.size = end
            for trace in _scan(fd, end):
                self._replay(state, trace)
        finally:
            os.close(fd)

    def _repair_torn_tail(self, state: SessionState, fd: int, size: int) -> int:
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
        torn = os.open(torn_name(state.session_id), _FILE_FLAGS, 0o600, dir_fd=state.dir_fd)
        try:
            os.write(torn, fragment + b"\n")
            os.fsync(torn)
        finally:
            os.close(torn)
        os.ftruncate(fd, end)
        if self._on_torn is not None:
            self._on_torn(len(fragment))
        return end

    @staticmethod
    def _replay(state: SessionState, trace: _Trace) -> None:
        state.seq = max(state.seq, trace.seq)
        if trace.stage is Stage.FINISH:
            state.open_actions.pop(trace.action, None)
        else:
            state.open_actions[trace.action] = trace.stage
        if trace.delivery:
            producer, _, number = trace.delivery.rpartition(":")
            if number.isdigit():
                state.note_delivery(producer, int(number))


def _scan(fd: int, end: int) -> Iterator[_Trace]:
    """Yield the recovery view of every complete line in ``fd[0:end]``, skipping unreadable lines."""
    offset = 0
    carry = b""
    while offset < end:
        chunk = carry + os.pread(fd, min(_SCAN_CHUNK, end - offset), offset)
        offset += len(chunk) - len(carry)
        cut = chunk.rfind(b"\n") + 1
        carry = chunk[cut:]
        lines = chunk[:cut]
        if not lines:
            continue
        try:
            yield from _trace_decoder.decode_lines(lines)
        except msgspec.DecodeError:
            for line in lines.splitlines():
                with contextlib.suppress(msgspec.DecodeError):
                    yield _trace_decoder.decode(line)
