"""Putting the matches of every session in time order, touching each match as little as possible.

The answer is every session's matches merged by time; at equal times, in session id order, then in
the order they were stored (a stable sort of the sessions' matches, taken in id order, by time).
Sessions rarely share minutes, and a session's events are nearly always stored in time order: a
session whose matches are in order and whose time span overlaps no other's is a run of the answer
as it stands. So the sessions are sorted by their first match's time and swept into clusters of
overlapping spans; a cluster of one ordered session is written as the bytes it came in, and only a
cluster of several (or a session out of order) is sorted match by match.

A session's matches travel as a :class:`Group`: their lines, already ``\\n``-ended and valid UTF-8,
in one ``bytes``, and their times, sizes, ``seq`` and ends in arrays, so that a search process sends
a few objects per session (not a few per match) and nothing is made for a match the answer leaves
out. A cursor is made only for a match the answer shows as an entry.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from itertools import accumulate, repeat
from typing import Final

from gz_ia.collector import reading as reader
from gz_ia.collector.reading.cursor import encode_position

__all__ = ["Group", "Packed", "entries", "lines", "pack"]

Packed = tuple[str, bytes, bytes, bytes, bytes, bytes, list[tuple[int, int]]]
"""A :class:`Group` as a search process sends it (built-in values only: see ``_fanout``): the
session, the lines, then as array bytes their times (``d``), sizes (``I``), ``seq`` (``q``) and
ends in their segments (``q``), and each segment's number with how many matches it gave."""


def pack(
    session_id: str,
    found: list[bytes | bytearray],
    keys: array[float],
    seqs: array[int],
    ends: array[int],
    segments: list[tuple[int, int]],
) -> Packed:
    """One session's matches (lines with their ``\\n``, in stored order) ready to be sent."""
    blob = b"".join(found)
    if not blob.isascii():
        try:
            blob.decode()
        except UnicodeDecodeError:
            # Shown as the reader shows such a line: each bad byte replaced (the sizes change).
            found = [line.decode(errors="replace").encode() for line in found]
            blob = b"".join(found)
    sizes = array("I", map(len, found))
    return session_id, blob, keys.tobytes(), sizes.tobytes(), seqs.tobytes(), ends.tobytes(), segments


class Group:
    """One session's matches, in stored order."""

    __slots__ = (
        "_cursors",
        "_entries",
        "_keys",
        "_offsets",
        "blob",
        "high",
        "low",
        "ordered",
        "packed",
        "session_id",
        "size",
    )

    def __init__(self, packed: Packed | None = None, careful: tuple[str, list[reader.Entry]] | None = None) -> None:
        self._entries: list[reader.Entry] | None = None
        self._offsets: list[int] | None = None
        self._cursors: tuple[list[int], array[int], array[int]] | None = None
        if careful is not None:
            session_id, found = careful
            self._entries = found
            keys = array("d", (entry.event.timestamp.timestamp() for entry in found))
            text = [(entry.line + "\n").encode() for entry in found]
            packed = (session_id, b"".join(text), keys.tobytes(), array("I", map(len, text)).tobytes(), b"", b"", [])
        assert packed is not None
        self.packed = packed
        self.session_id = packed[0]
        self.blob = packed[1]
        self._keys = array("d")
        self._keys.frombytes(packed[2])
        self.size = len(self._keys)
        self.low = min(self._keys)
        self.high = max(self._keys)
        listed = self._keys.tolist()
        self.ordered = listed == sorted(listed)

    def keys(self) -> list[float]:
        """The matches' times (seconds since the epoch; a float orders microseconds exactly)."""
        return self._keys.tolist()

    def sizes(self) -> array[int]:
        """Each line's size in :attr:`blob`, its newline included."""
        sizes = array("I")
        sizes.frombytes(self.packed[3])
        return sizes

    def line(self, index: int) -> bytes:
        """The ``index``-th match's line and its newline."""
        if self._offsets is None:
            self._offsets = [0, *accumulate(self.sizes())]
        return self.blob[self._offsets[index] : self._offsets[index + 1]]

    def entry(self, index: int, epoch: str) -> reader.Entry:
        """The ``index``-th match as the reader's entry: its text and cursor made now."""
        if self._entries is not None:
            return self._entries[index]
        if self._cursors is None:
            seqs, ends = array("q"), array("q")
            seqs.frombytes(self.packed[4])
            ends.frombytes(self.packed[5])
            numbers = [number for number, count in self.packed[6] for _ in range(count)]
            self._cursors = (numbers, seqs, ends)
        numbers, seqs, ends = self._cursors
        cursor = encode_position(self.session_id, numbers[index], ends[index], seqs[index], epoch)
        return reader.Entry(self.line(index)[:-1].decode(), None, cursor)


def _clusters(groups: list[Group]) -> list[list[Group]]:
    """The groups in answer order, as clusters whose time spans overlap no other cluster's."""
    clusters: list[list[Group]] = []
    high = 0.0
    for group in sorted(groups, key=lambda group: (group.low, group.session_id)):
        if clusters and group.low <= high:
            clusters[-1].append(group)
            high = max(high, group.high)
        else:
            clusters.append([group])
            high = group.high
    return clusters


def _merged(cluster: list[Group]) -> tuple[list[Group], list[int], list[int]]:
    """A cluster's matches sorted one by one: its groups in id order, each match's place among
    their matches taken in that order, and where each match starts in their blobs joined."""
    members = sorted(cluster, key=lambda group: group.session_id)
    keys: list[float] = []
    sizes = array("I")
    for group in members:
        keys.extend(group.keys())
        sizes.extend(group.sizes())
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return members, order, [0, *accumulate(sizes)]


_WRITE: Final = 1 << 20
"""Bytes gathered into one chunk of output (one write of a pipe's worth of lines, not one per line)."""


def lines(groups: list[Group], *, count: int | None = None, reverse: bool = False) -> Iterator[bytes]:
    """The answer's lines, ``\\n``-ended, in chunks; the last ``count``; newest first with ``reverse``."""
    if count is not None or reverse:
        chosen = _items(groups, count, reverse)
        for start in range(0, len(chosen), 4096):
            yield b"".join(group.line(index) for group, index in chosen[start : start + 4096])
        return
    for cluster in _clusters(groups):
        if len(cluster) == 1 and cluster[0].ordered:
            yield cluster[0].blob
            continue
        members, order, offsets = _merged(cluster)
        blob = b"".join(group.blob for group in members)
        step = max(1, _WRITE * len(order) // max(1, len(blob)))
        for start in range(0, len(order), step):
            yield b"".join([blob[offsets[index] : offsets[index + 1]] for index in order[start : start + step]])


def _items(groups: list[Group], count: int | None, reverse: bool) -> list[tuple[Group, int]]:
    """Every match as (its group, its index there), in answer order, cut and turned as asked."""
    items: list[tuple[Group, int]] = []
    for cluster in _clusters(groups):
        if len(cluster) == 1 and cluster[0].ordered:
            group = cluster[0]
            items.extend(zip(repeat(group, group.size), range(group.size), strict=True))
            continue
        members, order, _offsets = _merged(cluster)
        owners: list[tuple[Group, int]] = []
        for group in members:
            owners.extend(zip(repeat(group, group.size), range(group.size), strict=True))
        items.extend(owners[index] for index in order)
    if count is not None:
        items = items[-count:] if count else []
    if reverse:
        items.reverse()
    return items


def entries(
    groups: list[Group], epoch: str, *, count: int | None = None, reverse: bool = False
) -> Iterator[reader.Entry]:
    """The answer as the reader's entries (see :func:`lines`)."""
    for group, index in _items(groups, count, reverse):
        yield group.entry(index, epoch)
