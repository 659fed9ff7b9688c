"""Typical uses of the collector's public reading API, checked by mypy --strict, never run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import assert_type

from gz_ia.client.schema import Stage, StoredEvent
from gz_ia.collector import reading


def pages(root: Path) -> Iterator[StoredEvent]:
    page = reading.read_page(root, "s1", limit=50, reverse=True)
    assert_type(page, reading.Page)
    assert_type(page.next_cursor, str | None)
    assert_type(page.gaps, tuple[reading.Gap, ...])
    for entry in page.entries:
        assert_type(entry.event, StoredEvent)
        assert_type(entry.event.seq, int)
        assert_type(entry.cursor, str)
        if entry.event.stage is Stage.FINISH:
            yield entry.event
    assert_type(reading.end_cursor(root, "s1"), str)


def following(root: Path, cursor: str, stop: Callable[[], bool]) -> int:
    count = 0
    for entry in reading.follow(root, ["s1", "s2"], cursor=cursor, stop=stop):
        assert_type(entry, reading.Entry)
        count += 1
    for entry in reading.iter_events(root, "s1", on_gap=lambda gap: print(gap.reason)):
        count += entry.event.seq
    return count


def sessions(root: Path) -> list[str]:
    summaries = reading.list_sessions(root)
    assert_type(summaries, list[reading.SessionSummary])
    assert_type(summaries[0].last_time, datetime | None)
    tree = reading.session_tree(root, summaries[0].session_id)
    assert_type(tree.children, list[reading.TreeNode])
    return [child.session_id for child in tree.children]
