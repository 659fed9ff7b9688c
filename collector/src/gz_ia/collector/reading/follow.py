"""Following sessions live, like ``tail -F``: across rotations, collector restarts and missing files.

:func:`follow` polls the followed sessions' files (a ``stat`` each), drains whatever is complete
after each one's position page by page, and merges what several sessions wrote in one poll by
timestamp. A follower that lagged behind retention raises :class:`CursorExpired`, or, given
``on_gap``, reports the deleted range and goes on.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from gz_ia.client.schema import is_safe_session_id
from gz_ia.collector.errors import CollectorError
from gz_ia.collector.storage.names import active_name, state_name, stored_session_id
from gz_ia.collector.storage.roots import RootDirs

from .cursor import Position, check_epoch, decode_cursor_epoch, end_position, single_position
from .gaps import Gap, after_gap
from .pages import Entry, Filters, page_of
from .segments import RootNotFound, SessionNotFound, open_dirs, open_view

__all__ = ["CursorExpired", "follow"]

_RESCAN_EVERY: Final = 1.0
"""Seconds between full listings of a root while following it (directory mtimes are coarse)."""


class CursorExpired(CollectorError, LookupError):
    """The events after a follower's position were deleted by retention before it read them.

    Attributes:
        session_id: the session whose history ended.
    """

    def __init__(self, session_id: str) -> None:
        super().__init__(f"events of {session_id!r} after the cursor were deleted by retention")
        self.session_id = session_id


def _stat_key(dirs: RootDirs, session_id: str) -> tuple[int, ...]:
    """What tells a follower that a session changed: the active file's inode and size, and the
    checkpoint's inode, size and mtime (replaced at every rotation, so a write followed at once by a
    rotation, which leaves no active file before or after, is still noticed)."""
    try:
        info = os.stat(active_name(session_id), dir_fd=dirs.sessions_fd, follow_symlinks=False)
        active = (info.st_ino, info.st_size)
    except OSError:
        active = (0, -1)
    checkpoint = (0, 0, 0)
    if dirs.state_fd is not None:
        with contextlib.suppress(OSError):
            state = os.stat(state_name(session_id), dir_fd=dirs.state_fd, follow_symlinks=False)
            checkpoint = (state.st_ino, state.st_size, state.st_mtime_ns)
    return (*active, *checkpoint)


def _stored_session_ids(dirs: RootDirs) -> set[str]:
    """The sessions with a file in ``sessions/`` (a follower of a whole root reads new ones from their start)."""
    return {found for name in os.listdir(dirs.sessions_fd) if (found := stored_session_id(name)) is not None}


def follow(
    root: Path,
    session_ids: Sequence[str] | None = None,
    *,
    cursor: str | None = None,
    poll_interval: float = 0.02,
    stop: Callable[[], bool] | None = None,
    filters: Filters | None = None,
    on_gap: Callable[[Gap], None] | None = None,
) -> Iterator[Entry]:
    """Yield events as they land, like ``tail -F``: across rotations, collector restarts and missing files.

    Args:
        root: the session root.
        session_ids: the sessions to follow; None follows every session of the root, including
            sessions that appear later (read from their first event).
        cursor: resume from here (a cursor of one session, or of :func:`combine_cursors`); followed
            sessions it does not mention are read from their first event, since they appeared
            after it was made. Without a cursor, only events written after the call are yielded
            (sessions that appear later are still read from their first event).
        poll_interval: seconds between checks when nothing changed (the files are polled: a
            ``stat`` per followed session per poll).
        stop: called between polls; the iterator ends when it returns true.
        filters: only yield matching events.
        on_gap: called with each :class:`Gap` met (once per session and first ``seq``). With it, a
            follower that lagged behind retention reports the deleted range and goes on with the
            oldest event still stored, instead of raising :class:`CursorExpired`.

    Events of one session come in ``seq`` order; events of different sessions that land in the same
    poll are merged by timestamp. A session that does not exist yet is waited for.

    Raises:
        CursorExpired: retention deleted events a follower had not read yet (it lagged too far), and
            no ``on_gap`` was given.
        InvalidCursor: the cursor was not made by this reader, or on another root.
    """
    decoded, epoch = decode_cursor_epoch(cursor) if cursor is not None else ({}, "")
    positions: dict[str, Position | None] = dict(decoded)
    waited = False
    while True:
        try:
            dirs = open_dirs(root)
            break
        except RootNotFound:
            raise
        except SessionNotFound:  # nothing written yet: wait for the collector's first write
            if stop is not None and stop():
                return
            waited = True
            time.sleep(poll_interval)
    reported: set[tuple[str, int | None, str]] = set()

    def report(gap: Gap) -> None:
        key = (gap.session_id, gap.first, gap.reason)
        if on_gap is not None and key not in reported:
            reported.add(key)
            on_gap(gap)

    try:
        check_epoch(epoch, dirs)
        watch_all = session_ids is None
        initial = set(session_ids) if session_ids is not None else _stored_session_ids(dirs)
        for session_id in initial:
            if session_id not in positions:
                if not is_safe_session_id(session_id):
                    raise SessionNotFound(f"{session_id!r} is not a valid session id")
                # Resuming: a session the cursor does not know appeared after it was made (and when
                # the root itself had to be waited for, everything in it is new).
                positions[session_id] = None if cursor is not None or waited else _current_end(dirs, session_id)
        if session_ids is not None:
            positions = {key: value for key, value in positions.items() if key in initial}
        seen: dict[str, tuple[int, ...] | bool] = dict.fromkeys(positions, True)
        drained_at: dict[str, float] = {}
        listed_at = time.monotonic()
        directory_mtime = os.fstat(dirs.sessions_fd).st_mtime_ns
        while stop is None or not stop():
            if watch_all:
                mtime = os.fstat(dirs.sessions_fd).st_mtime_ns
                now = time.monotonic()
                if mtime != directory_mtime or now - listed_at >= _RESCAN_EVERY:
                    directory_mtime, listed_at = mtime, now
                    for session_id in _stored_session_ids(dirs) - positions.keys():
                        positions[session_id] = None  # a new session: from its first event
                        seen[session_id] = True
            batches: list[list[Entry]] = []
            now = time.monotonic()
            for session_id in list(positions):
                key = _stat_key(dirs, session_id)
                # Without an active file (just rotated) only the checkpoint tells a change, and a new
                # checkpoint can reuse the old one's inode within one mtime tick: drain such a session
                # anyway once a second, so that its last events never wait for its next write.
                if seen.get(session_id) == key and (key[0] != 0 or now - drained_at.get(session_id, 0.0) < 1.0):
                    continue
                seen[session_id] = key
                drained_at[session_id] = now
                entries, positions[session_id] = _drain(
                    dirs, session_id, positions[session_id], filters, report if on_gap is not None else None
                )
                if entries:
                    batches.append(entries)
            if not batches:
                time.sleep(poll_interval)
                continue
            if len(batches) == 1:
                yield from batches[0]
            else:
                yield from heapq.merge(*batches, key=lambda entry: entry.event.timestamp)
    finally:
        dirs.close()


def _current_end(dirs: RootDirs, session_id: str) -> Position | None:
    try:
        view = open_view(dirs, session_id)
    except SessionNotFound:
        return None
    try:
        return end_position(view)
    finally:
        view.close()


def _drain(
    dirs: RootDirs,
    session_id: str,
    position: Position | None,
    filters: Filters | None,
    on_gap: Callable[[Gap], None] | None,
) -> tuple[list[Entry], Position | None]:
    """Read everything after ``position`` that is complete now; return it and the new position."""
    try:
        view = open_view(dirs, session_id)
    except SessionNotFound:
        return [], position
    entries: list[Entry] = []
    try:
        while True:
            page = page_of(view, position, 10_000, False, filters)
            if on_gap is not None:
                for gap in page.gaps:
                    on_gap(gap)
            if page.expired:
                if on_gap is None:
                    raise CursorExpired(session_id)
                position = after_gap(session_id, page.gaps)
                continue
            entries.extend(page.entries)
            if page.next_cursor is not None:
                position = single_position(page.next_cursor, session_id)
            if page.end:
                return entries, position
    finally:
        view.close()
