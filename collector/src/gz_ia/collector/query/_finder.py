"""Finding the lines that hold one of a few byte strings, at ``memchr`` speed when they have a rare byte."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

__all__ = ["Data", "Finder", "FoldedFinder"]

Data = bytes | bytearray
_SAMPLE: Final = 1 << 16
_RARE: Final = 512
"""A needle's rarest byte is searched for first when it is rarer than one byte in this many."""


class Finder:
    """Finds the lines holding one of a few byte strings, memchr-fast when they have a rare byte.

    ``bytes.find`` of a whole needle crawls through JSON, whose common bytes (``"``, ``:``, letters)
    defeat its skips; like ripgrep, look first for the needle's rarest byte (a one-byte ``find`` is
    ``memchr``), then check the needle around it. Which byte is rare is learnt from the first session read.
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
            if counts[byte] * _RARE > len(sample):
                # Checking a candidate costs about what the plain search (all in C) spends on a few
                # hundred bytes of JSON: with no rarer byte, the plain search is faster.
                self.rare = []
                return
            chosen.append((byte, needle.index(byte)))
        self.rare = chosen

    def starts(self, data: Data, end: int | None = None) -> list[int]:
        """Offsets of the lines of ``data[:end]`` that contain one of the strings, ascending, each once."""
        if end is None:
            end = len(data)
        if self.rare is None:
            self._learn(bytes(data[: min(end, _SAMPLE)]))
        assert self.rare is not None
        starts: list[int] = []
        for index, needle in enumerate(self.group):
            if self.rare:
                byte, offset = self.rare[index]
                hits = self._by_rare_byte(data, end, needle, byte, offset)
            else:
                hits = self._by_needle(data, end, needle)
            for position in hits:
                start = data.rfind(b"\n", 0, position) + 1
                if not starts or starts[-1] != start:  # one needle's hits come in order
                    starts.append(start)
        return starts if len(self.group) == 1 else sorted(set(starts))

    @staticmethod
    def _by_needle(data: Data, end: int, needle: bytes) -> Iterator[int]:
        position = data.find(needle, 0, end)
        while position >= 0:
            yield position
            position = data.find(needle, position + len(needle), end)

    @staticmethod
    def _by_rare_byte(data: Data, end: int, needle: bytes, byte: bytes, offset: int) -> Iterator[int]:
        position = data.find(byte, offset, end)
        while position >= 0:
            start = position - offset
            if data.startswith(needle, start, end):
                yield start
            position = data.find(byte, position + 1, end)


class FoldedFinder:
    """Finds the lines holding a lower-case byte string in any case (``--grep`` ignoring case).

    As :class:`Finder` does, look for the rarest byte first, here in each of its cases (two
    ``memchr`` passes for a letter, one for anything else), then compare the lowered bytes around
    it. When the needle has a letter a non-ASCII one also matches (``exotic``), a segment holding
    any of those letters gives every line: only the decoded text can tell.
    """

    rest: Final[list[tuple[bytes, ...]]] = []

    def __init__(self, needle: bytes, exotic: tuple[bytes, ...] = ()) -> None:
        self.needle = needle
        self.exotic = exotic
        self.position: int | None = None

    def _learn(self, sample: bytes) -> None:
        lowered = sample.lower()
        counts = [lowered.count(self.needle[i : i + 1]) for i in range(len(self.needle))]
        self.position = min(range(len(self.needle)), key=counts.__getitem__)

    def matches(self, line: Data) -> bool:
        """Whether ``line`` holds the needle in any case."""
        return self.needle in line.lower() or any(letter in line for letter in self.exotic)

    def starts(self, data: Data, end: int | None = None) -> list[int]:
        """Offsets of the lines of ``data[:end]`` that may hold the needle, ascending, each once."""
        if end is None:
            end = len(data)
        if self.exotic and _holds_any(data, end, self.exotic):
            return _all_starts(data, end)
        if self.position is None:
            self._learn(bytes(data[: min(end, _SAMPLE)]))
        assert self.position is not None
        needle, offset = self.needle, self.position
        length = len(needle)
        byte = needle[offset : offset + 1]
        variants = {byte, byte.upper()}
        starts: list[int] = []
        for variant in variants:
            position = data.find(variant, offset, end)
            while position >= 0:
                start = position - offset
                if data[start : start + length].lower() == needle:
                    line = data.rfind(b"\n", 0, start) + 1
                    if not starts or starts[-1] != line:
                        starts.append(line)
                position = data.find(variant, position + 1, end)
        return starts if len(variants) == 1 else sorted(set(starts))


def _holds_any(data: Data, end: int, letters: tuple[bytes, ...]) -> bool:
    """Whether ``data[:end]`` holds one of a few multi-byte letters: each one's first byte is looked
    for alone (``memchr``; a longer ``find`` crawls), then the rest of it checked."""
    for lead in {letter[:1] for letter in letters}:
        position = data.find(lead, 0, end)
        while position >= 0:
            if any(data.startswith(letter, position, end) for letter in letters):
                return True
            position = data.find(lead, position + 1, end)
    return False


def _all_starts(data: Data, end: int) -> list[int]:
    starts = []
    start = 0
    while start < end:
        starts.append(start)
        start = data.index(b"\n", start, end) + 1
    return starts
