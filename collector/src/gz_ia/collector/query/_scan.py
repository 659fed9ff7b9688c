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
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import Status, StoredEvent
from gz_ia.collector import reading as reader
from gz_ia.collector.reading.cursor import Position
from gz_ia.collector.reading.segments import open_dirs
from gz_ia.collector.reading.sessions import Listing, covering_checkpoint
from gz_ia.collector.storage._layout import (
    ACTIVE_SUFFIX,
    Checkpoint,
    RootDirs,
    Segment,
    SegmentUnreadable,
    open_archive,
    session_archive,
)

from ._match import Selection

__all__ = ["search"]

_BLOCK: Final = 1 << 22
_SAMPLE: Final = 1 << 16
_WORKERS: Final = min(4, os.cpu_count() or 1)
_CHUNK: Final = 128
"""Sessions per task of the thread pool (a task per session costs more than a small session's read)."""
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
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


def _plan(
    dirs: RootDirs, listing: Listing, filters: reader.Filters, selection: Selection
) -> list[tuple[str, Checkpoint | None]]:
    """The sessions that may hold a match, in id order, with their checkpoint when it was read."""
    ids = listing.session_ids
    named = selection.matches.values_of("session_id")
    if named is not None:
        ids = ids & set(named)
    prunable = filters.since is not None or filters.statuses == {Status.FAILED}
    kept = []
    for session_id in sorted(ids):
        checkpoint = None
        if prunable:
            checkpoint = covering_checkpoint(dirs, session_id, listing)
            if checkpoint is not None and not _may_match(checkpoint, filters):
                continue
        kept.append((session_id, checkpoint))
    return kept


def _segments(dirs: RootDirs, session_id: str, listing: Listing, checkpoint: Checkpoint | None) -> list[Segment]:
    """Open the session's segments as listed, oldest first; :class:`_Fallback` on anything unusual
    (a hole between archives, a file that moved since the listing, an unreadable one)."""
    if listing.holed(session_id):
        raise _Fallback
    archives = sorted(listing.archives.get(session_id, ()))
    # The active segment's number only goes into the entries' cursors, where it is a hint checked
    # against seq: without a checkpoint at hand, one past the newest archive saves reading it.
    number = max(archives[-1] + 1 if archives else 1, checkpoint.segment if checkpoint is not None else 1)
    opened: list[Segment] = []
    try:
        for archived in archives:
            opened.append(open_archive(dirs.sessions_fd, session_archive(session_id, archived), archived))
        if session_id in listing.active:
            fd = os.open(session_id + ACTIVE_SUFFIX, _READ_FLAGS, dir_fd=dirs.sessions_fd)
            try:
                info = os.fstat(fd)
            except OSError:
                os.close(fd)
                raise
            opened.append(Segment(number, fd=fd, data=None, size=info.st_size, ino=info.st_ino, active=True))
            if not stat.S_ISREG(info.st_mode):
                raise _Fallback
    except (OSError, SegmentUnreadable):
        for segment in opened:
            segment.close()
        raise _Fallback from None
    except _Fallback:
        for segment in opened:
            segment.close()
        raise
    return opened


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


class _Finder:
    """Finds the lines holding one of a few byte strings, memchr-fast when they have a rare byte.

    ``bytes.find`` of a whole needle crawls through JSON, whose common bytes (``"``, ``:``, letters)
    defeat its skips; like ripgrep, look first for the needle's rarest byte (a one-byte ``find`` is
    ``memchr``), then check the needle around it. Which byte is rare is learnt from the first block.
    """

    def __init__(self, groups: list[tuple[bytes, ...]]) -> None:
        self.groups = groups
        self.group = groups[0]
        self.rest = groups[1:]
        """The groups checked on each candidate line (after the searched one)."""
        self.rare: list[tuple[bytes, int]] | None = None

    def _learn(self, sample: bytes) -> None:
        # Search for the group that is rarest in the sample: fewer candidate lines to check.
        ordered = sorted(self.groups, key=lambda group: sum(sample.count(needle) for needle in group))
        self.group, self.rest = ordered[0], ordered[1:]
        chosen: list[tuple[bytes, int]] = []
        for needle in self.group:
            counts = {needle[i : i + 1]: sample.count(needle[i : i + 1]) for i in range(len(needle))}
            byte = min(counts, key=lambda item: counts[item])
            if counts[byte] * 256 > len(sample):
                self.rare = []  # no byte rarer than one in 256: the plain search is as good
                return
            chosen.append((byte, needle.index(byte)))
        self.rare = chosen

    def starts(self, data: bytes) -> list[int]:
        """Offsets of the lines of ``data`` that contain one of the strings, ascending, each once."""
        if self.rare is None:
            self._learn(data[:_SAMPLE])
        starts: set[int] = set()
        for index, needle in enumerate(self.group):
            if self.rare:
                byte, offset = self.rare[index]
                hits = self._by_rare_byte(data, needle, byte, offset)
            else:
                hits = self._by_needle(data, needle)
            for position in hits:
                starts.add(data.rfind(b"\n", 0, position) + 1)
        return sorted(starts)

    @staticmethod
    def _by_needle(data: bytes, needle: bytes) -> Iterator[int]:
        position = data.find(needle)
        while position >= 0:
            yield position
            position = data.find(needle, position + len(needle))

    @staticmethod
    def _by_rare_byte(data: bytes, needle: bytes, byte: bytes, offset: int) -> Iterator[int]:
        position = data.find(byte, offset)
        while position >= 0:
            start = position - offset
            if data.startswith(needle, start):
                yield start
            position = data.find(byte, position + 1)


def _session(
    dirs: RootDirs,
    listing: Listing,
    session_id: str,
    checkpoint: Checkpoint | None,
    filters: reader.Filters,
    test: Callable[[StoredEvent], bool],
    finder: _Finder | None,
) -> list[reader.Entry]:
    """Every match of one session, in seq order; :class:`_Fallback` when the reader must look."""
    found: list[reader.Entry] = []
    expected: int | None = None
    segments = _segments(dirs, session_id, listing, checkpoint)
    try:
        contents = [(segment.number, _content(segment)) for segment in segments]
    except SegmentUnreadable:
        raise _Fallback from None
    finally:
        for segment in segments:
            segment.close()
    for number, data in contents:
        if finder is not None:
            starts: Iterable[int] = finder.starts(data)
            rest = finder.rest
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
            if finder is None:
                if expected is not None and event.seq != expected:
                    raise _Fallback  # a hole or a repeat: the reader reports it
                expected = event.seq + 1
            if filters.match(event) and test(event):
                cursor = Position(session_id, number, end + 1, event.seq).encode()
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
        dirs = open_dirs(root)
    except reader.SessionNotFound:
        return  # no root, no sessions: as reader.list_sessions has it
    test = selection.test
    needles = needles_of(filters, selection)
    finder = _Finder(needles) if needles else None
    per_session: list[list[reader.Entry]] = []
    fallbacks: list[str] = []
    try:
        listing = Listing(dirs)

        def read(chunk: list[tuple[str, Checkpoint | None]]) -> list[tuple[str, list[reader.Entry] | None]]:
            done: list[tuple[str, list[reader.Entry] | None]] = []
            for session_id, checkpoint in chunk:
                try:
                    done.append((session_id, _session(dirs, listing, session_id, checkpoint, filters, test, finder)))
                except _Fallback:
                    done.append((session_id, None))
            return done

        plan = _plan(dirs, listing, filters, selection)
        chunks = [plan[index : index + _CHUNK] for index in range(0, len(plan), _CHUNK)]
        # Copying the files out of the page cache (pread) releases the GIL: threads overlap it.
        with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
            for done in pool.map(read, chunks):
                for session_id, entries in done:
                    if entries is None:
                        fallbacks.append(session_id)
                    elif entries:
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
