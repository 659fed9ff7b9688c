"""Rebuilding the writer's state from the files after a start, and repairing a torn last line.

On first touch after a start, a session is recovered: a torn last line (a crash in the middle of a
write) is moved to ``<id>.events.torn`` and cut off, then the checkpoint is loaded and only the
lines after its position are replayed (normally: the active segment, or less). At start, the roots
served before are repaired as a whole (:func:`repair_root`), so that a torn line is moved aside
before any reader or client looks, not only when its session is next written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Callable

from .checkpoints import read_checkpoint
from .flags import REPAIR_FLAGS
from .names import REJECTS_STATE_SUFFIX, rejects_archive, session_archive, session_id_of, state_name
from .replay import replay_session
from .roots import list_names
from .segments import Segment, segment_exists
from .sessions import RootStore, SessionState
from .torn import OnTorn, repair_torn_tail

__all__ = ["recover_rejects", "recover_session", "repair_root"]

log = logging.getLogger("gz_ia.collector")


def recover_session(state: SessionState, clock: Callable[[], float], on_torn: OnTorn) -> None:
    """Rebuild a session's state from its checkpoint and files, its torn last line repaired first."""
    dirs = state.root.dirs
    checkpoint = read_checkpoint(dirs.state_fd, state_name(state.session_id))
    number = checkpoint.segment if checkpoint is not None else 1
    while segment_exists(dirs.sessions_fd, session_archive(state.session_id, number)):
        number += 1
    state.segment = number
    try:
        fd: int | None = os.open(state.name, REPAIR_FLAGS, dir_fd=state.dir_fd)
    except FileNotFoundError:
        fd = None
    if fd is None and checkpoint is None and number == 1:
        # A new session (no checkpoint, no file): its fresh state is the whole fold. Most sessions
        # are met this way, so the replay's empty fold and its copy are not made for them.
        state.last_write = state.snapshot_at = clock()
        return
    try:
        size = 0
        if fd is not None:
            size = repair_torn_tail(state.dir_fd, state.session_id, fd, os.fstat(fd).st_size, on_torn)
        state.size = size
        active = Segment(number, fd=fd, data=None, size=size, ino=0, active=True) if fd is not None else None
        # A checkpoint whose usage an earlier gz-ia counted is replayed past: its lines count anew.
        start = checkpoint if checkpoint is None or checkpoint.usage_complete else None
        fold, segment_seq, complete = replay_session(dirs.sessions_fd, state.session_id, start, number, active)
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
        state.started = clock()
    state.last_write = clock()
    # No checkpoint needed before the interval has passed: replaying a young segment is cheap.
    state.snapshot_at = state.last_write
    state.snapshot_size = size if checkpoint is not None and checkpoint.offset == size else -1


def recover_rejects(store: RootStore, clock: Callable[[], float]) -> None:
    """Find the rejects file's segment number, size and start from its checkpoint and files."""
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
        target.started = clock()


def repair_root(store: RootStore, on_torn: OnTorn) -> int:
    """Repair the torn last line of every active session file of a root not in memory; return how many."""
    repaired = 0
    for name in list_names(store.dirs.sessions_fd):
        session_id = session_id_of(name)
        if session_id is None or session_id in store.sessions:
            continue
        try:
            fd = os.open(name, REPAIR_FLAGS, dir_fd=store.dirs.sessions_fd)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            if repair_torn_tail(store.dirs.sessions_fd, session_id, fd, size, on_torn) != size:
                repaired += 1
        finally:
            os.close(fd)
    return repaired
