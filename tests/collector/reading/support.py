"""Helpers of the reader's tests: sequence numbers of entries, paging to the end, what a follower accounted for."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from gz_ia.collector import reading as reader


def seqs(entries: list[reader.Entry]) -> list[int]:
    return [entry.event.seq for entry in entries]


def polling(started: threading.Event, stop: threading.Event) -> Any:
    """A ``stop`` callable that also signals that follow has started polling."""

    def check() -> bool:
        started.set()
        return stop.is_set()

    return check


def page_all(root: Path, session_id: str, *, reverse: bool, limit: int) -> list[int]:
    seen: list[int] = []
    cursor = None
    while True:
        page = reader.read_page(root, session_id, cursor=cursor, limit=limit, reverse=reverse)
        seen += seqs(page.entries)
        cursor = page.next_cursor
        if page.end:
            return seen


def covered(entries: list[reader.Entry], gaps: list[reader.Gap], first: int, last: int) -> list[tuple[int, int]]:
    """Return what a follower accounted for, in order: (seq, seq) per event, (first, last) per gap notice.

    Coverage of ``first..last`` with no hole and no overlap means it never hid a gap.
    """
    seen: list[tuple[int, int, int]] = [(e.event.seq, e.event.seq, index) for index, e in enumerate(entries)]
    assert all(gap.first is not None and gap.last is not None for gap in gaps), gaps
    seen += [(gap.first or 0, gap.last or 0, -1) for gap in gaps]
    ranges = [(low, high) for low, high, _ in sorted(seen)]
    assert seqs(entries) == sorted(seqs(entries))
    expected = first
    for low, high in ranges:
        assert low == expected, f"seq {expected}..{low - 1} neither shown nor reported: {ranges}"
        expected = high + 1
    assert expected == last + 1
    return ranges


def archives_of(harness: Any, session_id: str) -> list[Path]:
    return sorted(harness.sessions_dir().glob(f"{session_id}.events.0*"))


class RetentionMidRead(reader.Filters, frozen=True):
    """Matches every event; when the reader reaches ``seq``, deletes ``archives`` as retention would.

    The only way to act at an exact point inside one read: the reader calls ``match`` between lines.
    """

    seq: int = 0
    archives: tuple[Path, ...] = ()

    def match(self, event: Any) -> bool:
        if event.seq == self.seq:
            for archive in self.archives:
                archive.unlink(missing_ok=True)
        return True
