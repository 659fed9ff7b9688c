"""Answering a question over every session of a root fast (``gz-ia logs`` without ``-f``).

Two savings, both exact:

* **Whole sessions are skipped by their checkpoints** when the checkpoint covers everything stored
  (no archive after it, the active file exactly as long as it says): a session whose newest event
  (``newest_time``, the greatest timestamp, not the last one written) is older than ``--since``, or
  that never failed when only FAILED events are asked for, cannot hold a match.
* **Lines are found by a byte search before anything is decoded.** The collector writes compact JSON,
  so an event with ``"status":"FAILED"`` or ``attrs.tool=Bash`` contains that key and value as bytes
  (:meth:`Selection.needles`); a segment is read whole and searched for them, and only the lines
  around a hit are decoded, as far as the question reads them (:mod:`._fields`), and checked. Only
  complete lines count: a last line without its newline is being written, and is left out as the
  reader leaves it out.
* **A match costs a line's bytes and four numbers**, sent back per session (:mod:`._answer`, which
  also puts them in time order); its text and cursor are made only if it is shown as an entry.

The files are read with ``preadv`` into a buffer kept from one session to the next, never mapped: the
writer truncates an active file back after a failed write, and touching a mapped page past the new
end would kill the process (``SIGBUS``). The sessions are shared out in chunks among forked processes
(:mod:`._fanout`), one per core, each with its own buffer.

A search decodes only the lines around a hit, so it proves otherwise that it saw every line
(:func:`_prove_complete`): the ``seq`` of each segment's first and last line, continuous from one
segment to the next, and a last segment that is the file the listing saw as active. A session that
rotates between the root's listing and the open of its active file would otherwise lose the segment
archived meanwhile without a word.

A session whose files are damaged or change shape during the read (an unreadable segment, an
undecodable line, a hole, a rotation since the listing) is read again the careful way, through the
reader, which says what it could not read: this module never decides alone that something is missing.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from operator import attrgetter
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec

from gz_ia.client.schema import Status
from gz_ia.collector import reading as reader
from gz_ia.collector.errors import CollectorError
from gz_ia.collector.reading.segments import open_dirs
from gz_ia.collector.reading.sessions import Listing, covering_checkpoint
from gz_ia.collector.storage.checkpoints import Checkpoint, read_checkpoint
from gz_ia.collector.storage.names import ACTIVE_SUFFIX, STATE_SUFFIX, parse_archive_name, session_archive
from gz_ia.collector.storage.roots import RootDirs
from gz_ia.collector.storage.segments import (
    Segment,
    SegmentUnreadable,
    open_archive,
    open_regular,
    segment_exists,
)

from . import _answer, _fanout
from ._fields import Decode, Test, question_for
from ._finder import Data, Finder, FoldedFinder
from ._match import EXOTIC, Selection

__all__ = ["narrows", "search", "search_lines"]

_BUFFER: Final = 1 << 20
_CHUNK: Final = 128
"""Sessions per claim of a search process (a claim per session costs more than a small session's read)."""
_MATCH_BUDGET: Final = 650_000
"""Matches the search may expect to hold (about 500 MB: a match holds its line's bytes and a few
numbers, under 800 bytes in all); a question expected to match more is streamed."""
_GZIP_RATIO: Final = 8
_SAMPLE_FILES: Final = 8
_SAMPLE_BYTES: Final = 1 << 14


class _Seq(msgspec.Struct):
    """Only a line's ``seq``: the rest of the line is skipped, not decoded."""

    seq: int


_seq_decoder: Final = msgspec.json.Decoder(_Seq)


class _Fallback(CollectorError):
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


def _prunable(filters: reader.Filters) -> bool:
    """Whether a session's checkpoint alone may tell that it holds no match."""
    return filters.since is not None or filters.statuses == {Status.FAILED}


def narrows(filters: reader.Filters, selection: Selection, root: Path | None = None) -> bool:
    """Whether :func:`search` should answer this question: it can skip sessions or lines (checkpoints,
    byte needles) and what it finds fits in memory.

    The search holds its matches to merge them in time order (about 1 KB each); a question that
    selects much of a big root is read session by session instead, as a stream (``gz-ia logs`` does
    so). With ``root``, a byte needle counts only when a sample of the root's files says it matches
    at most :data:`_MATCH_BUDGET` lines of the whole root (``stage=FINISH`` over ten million events
    is streamed; over a million it is searched).
    """
    if _prunable(filters):
        return True
    groups = needles_of(filters, selection)
    folded = _folded(selection)
    if not (groups or folded) or root is None:
        return bool(groups or folded)
    sample, stored = _sample(root)
    if not sample:
        return True
    # A matching line holds a needle of every group: the rarest group bounds the matches.
    counts = [sum(sample.count(needle) for needle in group) for group in groups]
    if folded is not None:
        counts.append(sample.lower().count(folded.needle))
    hits = min(counts)
    return hits * stored <= _MATCH_BUDGET * len(sample)


def _sample(root: Path) -> tuple[bytes, int]:
    """The first bytes of a few active files of the root, and about how many bytes it stores: its
    active files at the sampled ones' mean size (no ``stat`` of each), its archives at their size
    (a compressed one at :data:`_GZIP_RATIO` times it)."""
    parts: list[bytes] = []
    sizes: list[int] = []
    active = archived = 0
    try:
        with os.scandir(root / "sessions") as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(ACTIVE_SUFFIX):
                    active += 1
                    if len(parts) < _SAMPLE_FILES and entry.is_file(follow_symlinks=False):
                        _sample_file(entry.path, parts, sizes)
                elif (archive := parse_archive_name(name)) is not None and entry.is_file(follow_symlinks=False):
                    size = entry.stat(follow_symlinks=False).st_size
                    archived += size * _GZIP_RATIO if archive[2] else size
    except OSError:
        pass  # the search itself says what is wrong with the root
    return b"".join(parts), active * sum(sizes) // max(1, len(sizes)) + archived


def _sample_file(path: str, parts: list[bytes], sizes: list[int]) -> None:
    try:
        fd, info = open_regular(None, path)  # as the search opens it: no symlink, no wait on a FIFO
    except SegmentUnreadable:
        return
    try:
        sizes.append(info.st_size)
        parts.append(os.pread(fd, _SAMPLE_BYTES, 0))
    finally:
        os.close(fd)


def _folded(selection: Selection) -> FoldedFinder | None:
    """A finder of ``--grep``'s literal when it ignores case (:meth:`Selection.needles` has it otherwise)."""
    grepped = selection.grep_needle()
    if grepped is None or not grepped.folded or not grepped.needle:
        return None
    return FoldedFinder(grepped.needle, EXOTIC if grepped.exotic else ())


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


def _candidates(listing: Listing, selection: Selection) -> list[str]:
    """The sessions to look at, in id order (``session_id=`` matches narrow them by name)."""
    ids = listing.session_ids
    named = selection.matches.values_of("session_id")
    if named is not None:
        ids = ids & set(named)
    return sorted(ids)


_T = TypeVar("_T")


class _Buffer:
    """One reader's buffer, kept from one session to the next.

    Reading a file into memory that was just used is about twice as fast as into a new ``bytes``:
    the kernel copies into pages already mapped and in the CPU's caches, and the search that follows
    finds them there. It grows to the largest active segment read and never shrinks.
    """

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = bytearray(_BUFFER)

    def fill(self, fd: int, size: int) -> int:
        """Read up to ``size`` bytes from the file's start; return how many (fewer if it shrank)."""
        if size > len(self.data):
            self.data = bytearray(size + size // 8)
        filled = 0
        with memoryview(self.data) as view:
            # One call almost always; a read is capped near 2 GiB, and a file may shrink meanwhile.
            while filled < size and (got := os.preadv(fd, [view[filled:size]], filled)):
                filled += got
        return filled


def _contents(
    dirs: RootDirs, session_id: str, listing: Listing, checkpoint: Checkpoint | None, buffer: _Buffer
) -> list[tuple[int, Data, int]]:
    """Each of the session's segments as listed, oldest first: its number, and bytes whose first
    ``end`` are its complete lines (a torn last line is being written: left out); the active one is
    in ``buffer``. :class:`_Fallback` on anything unusual (a hole between archives, a file that moved
    since the listing, an unreadable one)."""
    if listing.holed(session_id):
        raise _Fallback
    # The active segment's number only goes into the entries' cursors, where it is a hint checked
    # against seq: without a checkpoint at hand, one past the newest archive saves reading it.
    number = checkpoint.segment if checkpoint is not None else 1
    contents: list[tuple[int, Data, int]] = []
    archives = listing.archives.get(session_id)
    if archives:
        ordered = sorted(archives)
        number = max(number, ordered[-1] + 1)
        try:
            segments = [
                open_archive(dirs.sessions_fd, session_archive(session_id, archived), archived) for archived in ordered
            ]
        except (OSError, SegmentUnreadable):
            raise _Fallback from None
        try:
            for segment in segments:
                data = _archived(segment)
                contents.append((segment.number, data, data.rfind(b"\n") + 1))
        except SegmentUnreadable:
            raise _Fallback from None
        finally:
            for segment in segments:
                segment.close()
    if session_id in listing.active:
        try:
            fd, info = open_regular(dirs.sessions_fd, session_id + ACTIVE_SUFFIX)
        except (OSError, SegmentUnreadable):
            raise _Fallback from None
        try:
            filled = buffer.fill(fd, info.st_size)
        except OSError:
            raise _Fallback from None
        finally:
            os.close(fd)
        contents.append((number, buffer.data, buffer.data.rfind(b"\n", 0, filled) + 1))
    return contents


def _archived(segment: Segment) -> bytes:
    """An archived segment's bytes (archives are rare beside active files: no buffer)."""
    if segment.data is not None:
        return segment.data[: segment.size]
    parts = []
    offset = 0
    while offset < segment.size:
        chunk = segment.read(offset, segment.size - offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _seqs(data: Data, size: int) -> tuple[int, int]:
    """The ``seq`` of the first and of the last complete line of ``data[:size]``."""
    if size == 0:
        raise _Fallback  # nothing to prove anything with (an active file just created, or damage)
    first_end = data.index(b"\n", 0, size)
    last_start = data.rfind(b"\n", 0, size - 1) + 1
    try:
        return _seq_decoder.decode(data[:first_end]).seq, _seq_decoder.decode(data[last_start : size - 1]).seq
    except msgspec.DecodeError:
        raise _Fallback from None


def _prove_complete(
    dirs: RootDirs,
    session_id: str,
    listing: Listing,
    checkpoint: Checkpoint | None,
    contents: list[tuple[int, Data, int]],
) -> None:
    """Raise :class:`_Fallback` unless ``contents`` holds every retained line of the session.

    Within a segment the writer only appends, so the first and last ``seq`` of each segment, each one
    past the one before, prove that no segment was missed between them, and that the active file read
    follows the newest archive read. When the listing showed no archive and the active file does not
    start at seq 1 (its predecessors retired), nothing read anchors it: the checkpoint says which
    segment starts there, and the archive just before it must not exist, as it would had the active
    file rotated since the listing.
    """
    previous: int | None = None
    first_of_all = 0
    for _number, data, size in contents:
        first, last = _seqs(data, size)
        if last < first or (previous is not None and first != previous + 1):
            raise _Fallback
        if previous is None:
            first_of_all = first
        previous = last
    if first_of_all <= 1 or session_id in listing.archives or session_id not in listing.active:
        return
    if checkpoint is None:
        checkpoint = read_checkpoint(dirs.state_fd, session_id + STATE_SUFFIX)
    if (
        checkpoint is None
        or checkpoint.segment_seq + 1 != first_of_all
        or segment_exists(dirs.sessions_fd, session_archive(session_id, checkpoint.segment - 1))
    ):
        raise _Fallback


def _session(
    dirs: RootDirs,
    listing: Listing,
    session_id: str,
    checkpoint: Checkpoint | None,
    question: _Question,
    buffer: _Buffer,
) -> tuple[list[Data], array[float], array[int], array[int], list[tuple[int, int]]]:
    """Every match of one session, in seq order: the lines (``\\n``-ended), their times, ``seq`` and
    ends in their segments, and each segment's number with how many matched; :class:`_Fallback`
    when the reader must look."""
    hits: list[tuple[Data, Any, int]] = []
    segments: list[tuple[int, int]] = []
    expected: int | None = None
    finder, folded, decode, match, test = question
    contents = _contents(dirs, session_id, listing, checkpoint, buffer)
    _prove_complete(dirs, session_id, listing, checkpoint, contents)
    for number, data, size in contents:
        before = len(hits)
        if finder is not None:
            starts: Iterable[int] = finder.starts(data, size)
            rest = finder.rest
        else:
            starts = _line_starts(data, size)
            rest = []
        for start in starts:
            end = data.index(b"\n", start, size) + 1
            raw = data[start:end]
            if rest and not all(any(needle in raw for needle in group) for group in rest):
                continue
            if folded is not None and not folded.matches(raw):
                continue
            try:
                event = decode(raw)
            except msgspec.DecodeError:
                raise _Fallback from None
            if finder is None:
                if expected is not None and event.seq != expected:
                    raise _Fallback  # a hole or a repeat: the reader reports it
                expected = event.seq + 1
            if (match is None or match(event)) and (test is None or test(event)):
                hits.append((raw, event, end))
        if len(hits) > before:
            segments.append((number, len(hits) - before))
    if not hits:
        return [], array("d"), array("q"), array("q"), []
    found, events, ends = zip(*hits, strict=True)
    # Times, seqs and ends gathered in C once the matches are known, not one call per match.
    keys = array("d", map(_seconds, map(_timestamp, events)))
    return list(found), keys, array("q", map(_seq, events)), array("q", ends), segments


_timestamp: Final = attrgetter("timestamp")
_seq: Final = attrgetter("seq")
_seconds: Final = datetime.timestamp


_Question = tuple[
    Finder | FoldedFinder | None,
    FoldedFinder | None,
    Decode,
    Test | None,
    Test | None,
]
"""How a session is searched: the finder of candidate lines, ``--grep``'s literal in any case when
the finder looks for other needles, the decoder of the fields the question reads, and the filters'
and the selection's tests (None: every event passes)."""


def _newest(
    matches: tuple[list[Data], array[float], array[int], array[int], list[tuple[int, int]]], count: int
) -> tuple[list[Data], array[float], array[int], array[int], list[tuple[int, int]]]:
    """Only a session's ``count`` newest matches by ``seq``: all the answer can take."""
    found, keys, seqs, ends, segments = matches
    drop = max(0, len(found) - count)
    if not drop:
        return matches
    kept: list[tuple[int, int]] = []
    for number, many in segments:
        if drop >= many:
            drop -= many
            continue
        kept.append((number, many - drop))
        drop = 0
    skip = len(found) - count
    return found[skip:], keys[skip:], seqs[skip:], ends[skip:], kept


def _line_starts(data: Data, size: int) -> Iterator[int]:
    start = 0
    while start < size:
        yield start
        start = data.index(b"\n", start, size) + 1


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
        count: only the last ``count`` matches: each session's ``count`` newest by ``seq``, then
            the ``count`` newest of those by time.
        reverse: newest first.
        on_gap: told of every gap a damaged session's careful read meets.

    Raises:
        LayoutTooNew: the root was written by a newer gz-ia.
    """
    groups, epoch = _groups(root, filters, selection, count, on_gap)
    yield from _answer.entries(groups, epoch, count=count, reverse=reverse)


def search_lines(
    root: Path,
    filters: reader.Filters,
    selection: Selection,
    *,
    count: int | None = None,
    reverse: bool = False,
    on_gap: Callable[[reader.Gap], None] | None = None,
) -> Iterator[bytes]:
    """:func:`search`'s answer as its lines exactly as stored (what ``--json`` prints), each ended
    by ``\\n``, in chunks: no entry, no cursor, no text object is made for a line.

    Raises:
        LayoutTooNew: the root was written by a newer gz-ia.
    """
    groups, _epoch = _groups(root, filters, selection, count, on_gap)
    return _answer.lines(groups, count=count, reverse=reverse)


def _groups(
    root: Path,
    filters: reader.Filters,
    selection: Selection,
    count: int | None,
    on_gap: Callable[[reader.Gap], None] | None,
) -> tuple[list[_answer.Group], str]:
    """Every session's matches (each session's ``count`` newest by ``seq``), and the root's epoch."""
    try:
        dirs = open_dirs(root)
    except reader.SessionNotFound:
        return [], ""  # no root, no sessions: as reader.list_sessions has it
    test = selection.test if selection else None

    def newest(entries: list[_T]) -> list[_T]:
        return entries if count is None else entries[-count:] if count else []

    needles = needles_of(filters, selection)
    folded = _folded(selection)
    finder: Finder | FoldedFinder | None = Finder(needles) if needles else folded
    if finder is folded:
        folded = None  # it finds the lines itself
    decode, checks = question_for(filters, selection)
    question: _Question = (finder, folded, decode, None if filters.empty else filters.match, checks)
    groups: list[_answer.Group] = []
    epoch = dirs.epoch
    fallbacks: list[str] = []
    try:
        listing = Listing(dirs, checkpoints=False)  # a session with no file left has no event to find
        prunable = _prunable(filters)
        buffer = _Buffer()  # each forked process has its own copy

        def read(chunk: list[str]) -> tuple[list[_answer.Packed], list[str]]:
            found = []
            careful = []
            for session_id in chunk:
                checkpoint = None
                if prunable:
                    checkpoint = covering_checkpoint(dirs, session_id, listing)
                    if checkpoint is not None and not _may_match(checkpoint, filters):
                        continue
                try:
                    matches = _session(dirs, listing, session_id, checkpoint, question, buffer)
                except _Fallback:
                    careful.append(session_id)
                    continue
                if count is not None:
                    matches = _newest(matches, count)
                if matches[0]:
                    found.append(_answer.pack(session_id, *matches))
            return found, careful

        candidates = _candidates(listing, selection)
        size = max(_CHUNK, -(-len(candidates) // _fanout.MAX_CHUNKS))
        chunks = [candidates[index : index + size] for index in range(0, len(candidates), size)]
        for found, to_read in _fanout.run(read, chunks):
            groups.extend(_answer.Group(packed) for packed in found)
            fallbacks.extend(to_read)
    finally:
        dirs.close()
    fallbacks.sort()  # their gap notices in session order
    for session_id in fallbacks:
        try:
            events = reader.iter_events(root, session_id, filters=filters, on_gap=on_gap)
            careful = newest([entry for entry in events if test is None or test(entry.event)])
        except reader.SessionNotFound:
            continue  # removed while we read
        if careful:
            groups.append(_answer.Group(careful=(session_id, careful)))
    return groups, epoch
