"""What ``gz-ia sessions --verify`` finds inside the files: the ``seq`` sequence, line by line.

The collector numbers a session's events 1, 2, 3... without gaps and writes them in that order, so
every line read in file order must carry the next number. A line deleted by hand shows as a jump,
one pasted twice as a number seen before, lines swapped as a number going back; each is named with
the file that holds it. The first retained segment starting past 1 is retention's doing only when
older segments were deleted; and the checkpoint's ``seq`` (written only after its lines) says how
far the files must reach.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SeqCheck"]

_MAX_REPORTED = 20
"""Findings kept per session: enough to act on, bounded for a file rewritten wholesale."""
_MAX_SKIPPED = 1000
"""Skipped ranges tracked per session (each a few numbers): bounded, whatever the files hold."""


class SeqCheck:
    """Collects the anomalies of one session's ``seq`` sequence, observed line by line.

    Memory stays small: every number up to the highest seen was seen, except those in the ranges
    skipped so far; so a number below the next expected one is either one of those (out of order)
    or a second copy.
    """

    def __init__(self, name_of: Callable[[int], str], *, starts_at_one: bool) -> None:
        """``name_of(segment number)`` names a segment's file; ``starts_at_one``: no older segment
        was deleted, so the first line must be seq 1."""
        self._name_of = name_of
        self.expected: int | None = 1 if starts_at_one else None
        self._skipped: list[tuple[int, int, str]] = []
        """Ranges of numbers jumped over (first, last, the file where the jump is), not seen since."""
        self.findings: list[str] = []
        self.more = 0

    def _say(self, text: str) -> None:
        if len(self.findings) < _MAX_REPORTED:
            self.findings.append(text)
        else:
            self.more += 1

    def __call__(self, seq: int, segment: int) -> None:
        """Observe the next line's ``seq``, read from ``segment``."""
        expected = seq if self.expected is None else self.expected
        if seq >= expected:
            if seq > expected and len(self._skipped) < _MAX_SKIPPED:
                self._skipped.append((expected, seq - 1, self._name_of(segment)))
            self.expected = seq + 1
            return
        for index, (first, last, where) in enumerate(self._skipped):
            if first <= seq <= last:
                self._say(f"seq {seq} out of order in {self._name_of(segment)}")
                parts = [(first, seq - 1, where), (seq + 1, last, where)]
                self._skipped[index : index + 1] = [part for part in parts if part[0] <= part[1]]
                return
        self._say(f"seq {seq} appears twice (again in {self._name_of(segment)})")

    def finish(self, written: int) -> list[str]:
        """The findings, with the events after the last line that the checkpoint says were written."""
        for first, last, where in self._skipped:
            self._say(f"{_seqs(first, last)} missing (before the next line of {where})")
        if self.expected is not None and written >= self.expected:
            self._say(
                f"{_seqs(self.expected, written)} missing at the end (the checkpoint says seq {written} was written)"
            )
        elif self.expected is None and written:
            self._say(f"{_seqs(1, written)} missing (the checkpoint says seq {written} was written)")
        return self.findings + ([f"and {self.more} more"] if self.more else [])


def _seqs(first: int, last: int) -> str:
    return f"seq {first}" if first == last else f"seq {first}-{last}"
