"""Pages both ways across segments: exact stored lines, seeking by seq, torn tails, filters, time runs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.collector.reading.support import page_all, seqs
from tests.collector.storage.test_rotation import Harness

from gz_ia.client.schema import Stage, Status
from gz_ia.collector import reading as reader


def test_pages_cover_every_segment_in_both_directions(harness: Any) -> None:
    """Forward and reverse paging over many segments see every event once, in order."""
    for _ in range(40):
        harness.emit("s1", 5)
    assert harness.rotated >= 5
    assert page_all(harness.root, "s1", reverse=False, limit=7) == list(range(1, 201))
    assert page_all(harness.root, "s1", reverse=True, limit=9) == list(range(200, 0, -1))


def test_entries_carry_the_exact_stored_line(harness: Any) -> None:
    """Entry.line is the stored JSON line byte for byte (what --json prints)."""
    harness.emit("s1", 3)
    stored = (harness.sessions_dir() / "s1.events.jsonl").read_text().splitlines()
    page = reader.read_page(harness.root, "s1")
    assert [entry.line for entry in page.entries] == stored


def test_last_page_does_not_read_older_segments(harness: Any) -> None:
    """The newest page is read from the end: wrecking every older archive leaves it complete."""
    for _ in range(60):
        harness.emit("s1", 5)
    names = sorted(name for name in harness.names() if name.startswith("s1.events.0"))
    for name in names[:-1]:
        path = harness.sessions_dir() / name
        path.unlink()
        path.mkdir()  # unreadable if anyone tried
    page = reader.read_page(harness.root, "s1", limit=10, reverse=True)
    assert seqs(page.entries) == list(range(300, 290, -1))
    assert not page.incomplete


def test_event_at_finds_each_seq_and_reads_no_older_segment(harness: Any) -> None:
    """One event by its seq, across rotations; none past the end or deleted; older archives never read."""
    for _ in range(60):
        harness.emit("s1", 5)
    assert harness.rotated >= 8
    found = [reader.event_at(harness.root, "s1", seq) for seq in range(1, 301)]
    assert [entry.event.seq if entry else None for entry in found] == list(range(1, 301))
    assert reader.event_at(harness.root, "s1", 301) is None
    assert reader.event_at(harness.root, "s1", 0) is None
    names = sorted(name for name in harness.names() if name.startswith("s1.events.0"))
    for name in names[:-1]:
        path = harness.sessions_dir() / name
        path.unlink()
        path.mkdir()  # unreadable if anyone tried
    newest = reader.read_page(harness.root, "s1", limit=1000, reverse=True).entries[-1].event.seq
    assert newest > 1
    assert reader.event_at(harness.root, "s1", 1) is None
    newest_entry = reader.event_at(harness.root, "s1", newest)
    assert newest_entry is not None and newest_entry.event.seq == newest
    last = reader.event_at(harness.root, "s1", 300)
    assert last is not None and last.event.seq == 300


def test_time_runs_split_a_session_where_its_clock_goes_back(tmp_path: Path) -> None:
    """time_runs gives one run per stretch of rising timestamps, with cursors that resume exactly there."""
    harness = Harness(tmp_path)
    harness.emit("s1", 3)
    harness.now -= 60  # the clock steps back a minute
    harness.emit("s1", 3)
    harness.writer.close()
    runs = reader.time_runs(harness.root, "s1")
    assert [last for _cursor, last in runs] == [3, None]
    assert runs[0][0] is None
    second = runs[1][0]
    assert second is not None
    assert seqs(reader.read_page(harness.root, "s1", cursor=second).entries) == [4, 5, 6]


def test_a_torn_last_line_is_held_back_until_complete(harness: Any) -> None:
    """A last line without its newline is never shown; once completed it appears once."""
    harness.emit("s1", 3)
    active = harness.sessions_dir() / "s1.events.jsonl"
    template = json.loads(active.read_text().splitlines()[-1])
    template.update(seq=4, action="late", stage="READ")
    line = json.dumps(template, separators=(",", ":")).encode()
    with active.open("ab") as file:
        file.write(line[:20])
    first = reader.read_page(harness.root, "s1", limit=100)
    assert seqs(first.entries) == [1, 2, 3]
    assert seqs(reader.read_page(harness.root, "s1", limit=100, reverse=True).entries) == [3, 2, 1]
    with active.open("ab") as file:
        file.write(line[20:] + b"\n")
    assert seqs(reader.read_page(harness.root, "s1", cursor=first.next_cursor).entries) == [4]


def test_copy_lines_is_the_stored_bytes_without_a_torn_tail(harness: Any) -> None:
    """The undecoded copy (session logs --json) is every retained line in order, the torn tail held back."""
    harness.emit("s1", 40)
    expected = [entry.line for entry in reader.iter_events(harness.root, "s1")]
    with (harness.sessions_dir() / "s1.events.jsonl").open("ab") as file:
        file.write(b'{"timestamp":"2026-')
    copied = b"".join(reader.copy_lines(harness.root, "s1", chunk_size=100)).decode()
    assert copied.splitlines() == expected
    assert copied.endswith("\n")
    with pytest.raises(reader.SessionNotFound):
        list(reader.copy_lines(harness.root, "nope"))


def test_filters_or_within_a_field_and_and_across_fields(harness: Any) -> None:
    """Stage values OR together; stage and status AND; time range is [since, until)."""
    harness.emit("s1", 9, failed=True)
    pending_or_finish = reader.Filters(stages=frozenset({Stage.PENDING, Stage.FINISH}))
    page = reader.read_page(harness.root, "s1", filters=pending_or_finish)
    assert {entry.event.stage for entry in page.entries} == {Stage.PENDING, Stage.FINISH}
    assert len(page.entries) == 6
    failed_finish = reader.Filters(stages=frozenset({Stage.FINISH}), statuses=frozenset({Status.FAILED}))
    assert len(reader.read_page(harness.root, "s1", filters=failed_finish).entries) == 3
    start = datetime.fromtimestamp(harness.now, UTC)
    window = reader.Filters(since=start + timedelta(milliseconds=2), until=start + timedelta(milliseconds=5))
    assert seqs(reader.read_page(harness.root, "s1", filters=window).entries) == [3, 4, 5]
    nobody = reader.Filters(agents=frozenset({"nobody"}))
    empty = reader.read_page(harness.root, "s1", filters=nobody)
    assert empty.entries == []
    assert empty.end


def test_failed_read_right_after_a_rotation_starts_past_the_checkpoint(harness: Any) -> None:
    """A checkpoint taken as the session rotated (no active file yet) still answers "no failure"."""
    while harness.rotated < 3:
        harness.emit("s1", 1)
    harness.writer.close()
    assert not (harness.sessions_dir() / "s1.events.jsonl").exists()
    for name in harness.names():
        if name.startswith("s1.events.0"):
            path = harness.sessions_dir() / name
            path.unlink()
            path.mkdir()  # unreadable if anyone tried
    only_failed = reader.Filters(statuses=frozenset({Status.FAILED}))
    for reverse in (False, True):
        page = reader.read_page(harness.root, "s1", filters=only_failed, reverse=reverse)
        assert (page.entries, page.incomplete, page.end) == ([], False, True)
