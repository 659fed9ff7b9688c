"""Answering a question over every session of a root fast (``gz-ia logs`` without ``-f``).

Two savings, both exact:

* **Whole sessions are skipped by their checkpoints** when the checkpoint covers everything stored
  (no archive after it, the active file exactly as long as it says): a session whose newest event
  (``newest_time``, the greatest timestamp, not the last one written) is older than ``--since``, or
  that never failed when only FAILED events are asked for, cannot hold a match.
* **Lines are found by a byte search before anything is decoded.** The collector writes compact JSON,
  so an event with ``"status":"FAILED"`` or ``attrs.tool=Bash`` contains that key and value as bytes
  (:meth:`Selection.needles`); a segment is searched for them in large blocks and only the lines
  around a hit are decoded and checked in full.

A session whose files are damaged or change shape during the read (an unreadable segment, an
undecodable candidate line, a hole) is read again the careful way, through the reader, which says what
it could not read: this module never decides alone that something is missing.
"""

from __future__ import annotations

import heapq
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import Status, StoredEvent
from gz_ia.collector.storage import reader
from gz_ia.collector.storage._layout import (
    ACTIVE_SUFFIX,
    STATE_SUFFIX,
    Checkpoint,
    RootDirs,
    Segment,
    SegmentUnreadable,
    locate_active,
    open_archive,
    parse_archive_name,
    read_checkpoint,
    session_archive,
    session_id_of,
    session_id_of_state,
)

from ._match import Selection

__all__ = ["search"]

_BLOCK: Final = 1 << 22
_decoder: Final = msgspec.json.Decoder(StoredEvent)


class _Fallback(Exception):
    """The fast read of a session met something the careful reader must report."""


def _encoded(value: str) -> bytes:
    return msgspec.json.encode(value)


def needles_of(filters: reader.Filters, selection: Selection) -> list[tuple[bytes, ...]]:
    """Groups of byte strings: a matching line holds at least one string of every group."""
    groups = list(selection.needles())
    for key, values in (
        ("status", filters.statuses),
        ("stage", filters.stages),
        ("agent", filters.agents),
        ("action", filters.actions),
        ("role", filters.roles),
    ):
        if values and "" not in values:
            groups.append(tuple(_encoded(key) + b":" + _encoded(str(value)) for value in values))
    # The rarest-looking first: the longest strings usually are (the search runs on the first group).
    groups.sort(key=lambda group: -min(len(needle) for needle in group))
    return groups


class _Listing:
    """One listing of ``sessions/`` and ``state/``: the session ids, and each one's newest archive."""

    def __init__(self, dirs: RootDirs) -> None:
        self.ids: set[str] = set()
        self.newest_archive: dict[str, int] = {}
        self.active: set[str] = set()
        for name in os.listdir(dirs.sessions_fd):
            session_id = session_id_of(name)
            if session_id is not None:
                self.active.add(session_id)
            else:
                archive = parse_archive_name(name)
                if archive is None:
                    continue
                session_id = archive[0]
                self.newest_archive[session_id] = max(archive[1], self.newest_archive.get(session_id, 0))
            self.ids.add(session_id)
        if dirs.state_fd is not None:
            for name in os.listdir(dirs.state_fd):
                session_id = session_id_of_state(name)
                if session_id is not None:
                    self.ids.add(session_id)


def _covering(dirs: RootDirs, session_id: str, listing: _Listing) -> Checkpoint | None:
    """The session's checkpoint when it covers every stored line, else None."""
    checkpoint = read_checkpoint(dirs.state_fd, session_id + STATE_SUFFIX)
    if checkpoint is None or listing.newest_archive.get(session_id, 0) >= checkpoint.segment:
        return None
    if session_id not in listing.active:
        return checkpoint if checkpoint.offset == 0 else None
    try:
        info = os.stat(session_id + ACTIVE_SUFFIX, dir_fd=dirs.sessions_fd, follow_symlinks=False)
    except OSError:
        return None
    return checkpoint if stat.S_ISREG(info.st_mode) and info.st_size == checkpoint.offset else None


def _may_match(checkpoint: Checkpoint, filters: reader.Filters) -> bool:
    if filters.statuses == {Status.FAILED} and checkpoint.failures == 0:
        return False
    if checkpoint.seq == 0:
        return False
    if filters.since is not None and checkpoint.newest_time:
        try:
            newest = datetime.fromisoformat(checkpoint.newest_time)
        except ValueError:
            return True
        return newest >= filters.since
    return True


def _plan(dirs: RootDirs, filters: reader.Filters, selection: Selection) -> list[str]:
    """The sessions that may hold a match, in id order."""
    listing = _Listing(dirs)
    ids = listing.ids
    named = selection.matches.values_of("session_id")
    if named is not None:
        ids = ids & set(named)
    prunable = filters.since is not None or filters.statuses == {Status.FAILED}
    kept = []
    for session_id in sorted(ids):
        if prunable:
            checkpoint = _covering(dirs, session_id, listing)
            if checkpoint is not None and not _may_match(checkpoint, filters):
                continue
        kept.append(session_id)
    return kept


def _segments(dirs: RootDirs, session_id: str) -> Iterator[Segment]:
    """Open the session's segments, oldest first; :class:`_Fallback` on anything unusual."""
    checkpoint = read_checkpoint(dirs.state_fd, session_id + STATE_SUFFIX)
    number, active, unreadable = locate_active(dirs.sessions_fd, session_id, checkpoint.segment if checkpoint else 1)
    if unreadable:
        raise _Fallback
    opened: list[Segment] = []
    try:
        for archived in range(number - 1, 0, -1):
            try:
                opened.append(open_archive(dirs.sessions_fd, session_archive(session_id, archived), archived))
            except FileNotFoundError:
                if archived == number - 1 and not opened and active is None:
                    raise _Fallback from None
                # Older archives were deleted by retention; a missing one below another would be a hole.
                if any(_exists(dirs, session_id, below) for below in range(archived - 1, max(0, archived - 2), -1)):
                    raise _Fallback from None
                break
            except SegmentUnreadable:
                raise _Fallback from None
        opened.reverse()
        if active is not None:
            opened.append(active)
        yield from opened
    finally:
        for segment in opened:
            segment.close()
        if active is not None and active not in opened:
            active.close()


def _exists(dirs: RootDirs, session_id: str, number: int) -> bool:
    names = session_archive(session_id, number)
    for compressed in (False, True):
        try:
            os.stat(names(compressed), dir_fd=dirs.sessions_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        return True
    return False


def _content(segment: Segment) -> bytes:
    """The segment's complete lines (a torn last line is being written: left out)."""
    if segment.data is not None:
        data = segment.data[: segment.size]
    else:
        parts = []
        offset = 0
        while offset < segment.size:
            chunk = segment.read(offset, min(_BLOCK, segment.size - offset))
            if not chunk:
                break
            parts.append(chunk)
            offset += len(chunk)
        data = b"".join(parts)
    return data[: data.rfind(b"\n") + 1]


def _starts(data: bytes, group: tuple[bytes, ...]) -> list[int]:
    """Offsets of the lines of ``data`` that contain one of ``group``, ascending, each once."""
    starts: set[int] = set()
    for needle in group:
        position = data.find(needle)
        while position >= 0:
            start = data.rfind(b"\n", 0, position) + 1
            starts.add(start)
            end = data.find(b"\n", position)
            position = data.find(needle, end + 1) if end >= 0 else -1
    return sorted(starts)


def _session(
    dirs: RootDirs,
    session_id: str,
    filters: reader.Filters,
    test: Callable[[StoredEvent], bool],
    needles: list[tuple[bytes, ...]],
) -> list[reader.Entry]:
    """Every match of one session, in seq order; :class:`_Fallback` when the reader must look."""
    found: list[reader.Entry] = []
    expected: int | None = None
    for segment in _segments(dirs, session_id):
        try:
            data = _content(segment)
        except SegmentUnreadable:
            raise _Fallback from None
        if needles:
            starts: Iterable[int] = _starts(data, needles[0])
            rest = needles[1:]
        else:
            starts = _line_starts(data)
            rest = []
        for start in starts:
            end = data.find(b"\n", start)
            raw = data[start:end]
            if rest and not all(any(needle in raw for needle in group) for group in rest):
                continue
            try:
                event = _decoder.decode(raw)
            except msgspec.DecodeError:
                raise _Fallback from None
            if not needles:
                if expected is not None and event.seq != expected:
                    raise _Fallback  # a hole or a repeat: the reader reports it
                expected = event.seq + 1
            if filters.match(event) and test(event):
                cursor = reader._Position(session_id, segment.number, end + 1, event.seq).encode()
                found.append(reader.Entry(raw.decode(errors="replace"), event, cursor))
    return found


def _line_starts(data: bytes) -> Iterator[int]:
    start = 0
    size = len(data)
    while start < size:
        yield start
        start = data.index(b"\n", start) + 1


def _time(entry: reader.Entry) -> datetime:
    return entry.event.timestamp


def search(
    root: Path,
    filters: reader.Filters,
    selection: Selection,
    *,
    count: int | None = None,
    reverse: bool = False,
    on_gap: Callable[[reader.Gap], None] | None = None,
) -> Iterator[reader.Entry]:
    """Yield the matching events of every session of ``root``, merged in time order.

    Args:
        root: the session root.
        filters: the reader's filters.
        selection: field matches, ``--grep``.
        count: only the last ``count`` matches.
        reverse: newest first.
        on_gap: told of every gap a damaged session's careful read meets.

    Raises:
        LayoutTooNew: the root was written by a newer gz-ia.
    """
    try:
        dirs = reader._open(root)
    except reader.SessionNotFound:
        return  # no root, no sessions: as reader.list_sessions has it
    test = selection.test
    needles = needles_of(filters, selection)
    per_session: list[list[reader.Entry]] = []
    fallbacks: list[str] = []
    try:
        for session_id in _plan(dirs, filters, selection):
            try:
                entries = _session(dirs, session_id, filters, test, needles)
            except _Fallback:
                fallbacks.append(session_id)
                continue
            if entries:
                per_session.append(entries)
    finally:
        dirs.close()
    for session_id in fallbacks:
        try:
            events = reader.iter_events(root, session_id, filters=filters, on_gap=on_gap)
            careful = [entry for entry in events if test(entry.event)]
        except reader.SessionNotFound:
            continue  # removed while we read
        if careful:
            per_session.append(careful)
    for entries in per_session:
        # Strictly in time order, even where a session's clock went back (sorted input costs nothing).
        entries.sort(key=_time)
    merged: Iterable[reader.Entry] = heapq.merge(*per_session, key=_time)
    if count is not None:
        merged = list(merged)[-count:] if count else []
    if reverse:
        merged = reversed(list(merged))
    yield from merged
