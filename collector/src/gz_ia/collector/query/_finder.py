"""Finding the lines that hold one of a few byte strings, at ``memchr`` speed when they have a rare byte."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

__all__ = ["Data", "Finder"]

Data = bytes | bytearray
_SAMPLE: Final = 1 << 16
_RARE: Final = 2048
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
                # Checking a candidate costs as much as the plain search (all in C) spends on about
                # 2,000 bytes: with no rarer byte, the plain search is faster.
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
