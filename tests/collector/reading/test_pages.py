"""The rotation-safe reader: pages both ways, cursors across rotations, follow, damaged and hostile files."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gz_ia.client.schema import Stage, Status
from gz_ia.collector import reading as reader
from gz_ia.collector.storage.roots import LayoutTooNew

_spec = importlib.util.spec_from_file_location("rotation_harness", Path(__file__).with_name("test_rotation.py"))
assert _spec is not None and _spec.loader is not None
_rotation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rotation)
Harness = _rotation.Harness


@pytest.fixture(name="harness")
def _harness(tmp_path: Path) -> Any:
    """A synchronous writer rotating at 4 KiB (about 25 events per segment)."""
    made = Harness(tmp_path)
    yield made
    made.writer.close()


def _seqs(entries: list[reader.Entry]) -> list[int]:
    return [entry.event.seq for entry in entries]


def _polling(started: threading.Event, stop: threading.Event) -> Any:
    """A ``stop`` callable that also signals that follow has started polling."""

    def check() -> bool:
        started.set()
        return stop.is_set()

    return check


def _page_all(root: Path, session_id: str, *, reverse: bool, limit: int) -> list[int]:
    seen: list[int] = []
    cursor = None
    while True:
        page = reader.read_page(root, session_id, cursor=cursor, limit=limit, reverse=reverse)
        seen += _seqs(page.entries)
        cursor = page.next_cursor
        if page.end:
            return seen


def test_reader_imports_only_the_standard_library_msgspec_and_the_client() -> None:
    """Importing the reader loads neither uvloop, click nor prometheus_client (nor the daemon modules)."""
    code = "import sys, json, gz_ia.collector.reading\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = set(json.loads(result.stdout))
    assert (
        not {"uvloop", "click", "prometheus_client", "gz_ia.collector.service.server", "gz_ia.collector.config"}
        & modules
    )


def test_storage_imports_nothing_of_the_reading_package() -> None:
    """Reading sits above storage: every storage module loads without any module of ``reading``."""
    storage = Path(__file__).parents[2] / "collector/src/gz_ia/collector/storage"
    names = sorted(f"gz_ia.collector.storage.{path.stem}" for path in storage.glob("*.py") if path.stem != "__init__")
    code = f"import sys, json\nfor name in {names!r}: __import__(name)\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(result.stdout)
    assert len(names) >= 5
    assert [name for name in loaded if name.startswith("gz_ia.collector.reading")] == []


def test_pages_cover_every_segment_in_both_directions(harness: Any) -> None:
    """Forward and reverse paging over many segments see every event once, in order."""
    for _ in range(40):
        harness.emit("s1", 5)
    assert harness.rotated >= 5
    assert _page_all(harness.root, "s1", reverse=False, limit=7) == list(range(1, 201))
    assert _page_all(harness.root, "s1", reverse=True, limit=9) == list(range(200, 0, -1))


def test_entries_carry_the_exact_stored_line(harness: Any) -> None:
    """Entry.line is the stored JSON line byte for byte (what --json prints)."""
    harness.emit("s1", 3)
    stored = (harness.sessions_dir() / "s1.events.jsonl").read_text().splitlines()
    page = reader.read_page(harness.root, "s1")
    assert [entry.line for entry in page.entries] == stored


def test_a_cursor_survives_any_number_of_rotations(harness: Any) -> None:
    """A cursor taken before many rotations resumes exactly after its event, both ways."""
    harness.emit("s1", 10)
    middle = reader.read_page(harness.root, "s1", limit=4).entries[-1].cursor
    for _ in range(60):
        harness.emit("s1", 5)
    assert harness.rotated >= 8
    after = reader.read_page(harness.root, "s1", cursor=middle, limit=3)
    before = reader.read_page(harness.root, "s1", cursor=middle, limit=3, reverse=True)
    assert _seqs(after.entries) == [5, 6, 7]
    assert _seqs(before.entries) == [4, 3, 2]


def test_reverse_read_from_an_entry_cursor_includes_that_entry(harness: Any) -> None:
    """An entry's cursor is the boundary after it: forward continues after it, reverse starts with it."""
    harness.emit("s1", 6)
    entry = reader.read_page(harness.root, "s1", limit=3).entries[-1]
    assert _seqs(reader.read_page(harness.root, "s1", cursor=entry.cursor, reverse=True, limit=10).entries) == [3, 2, 1]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    script=st.lists(
        st.tuples(st.integers(1, 6), st.booleans(), st.integers(1, 9), st.integers(1, 9)),
        min_size=5,
        max_size=40,
    ),
    compress=st.booleans(),
)
def test_random_rotations_never_make_pager_or_follower_skip_or_repeat(
    script: list[tuple[int, bool, int, int]], compress: bool
) -> None:
    """Property: with rotations at random points, a forward pager, a backward pager and a follower each
    see every event exactly once and in order."""
    base = Path(tempfile.mkdtemp(prefix="gzp", dir="/tmp"))
    harness = Harness(base, max_bytes=1 << 20, compress=compress, background=True)
    stop = threading.Event()
    followed: list[int] = []
    follower_error: list[BaseException] = []
    harness.emit("s1", 1)
    cursor = reader.end_cursor(harness.root, "s1")
    followed.append(1)

    def run_follower() -> None:
        try:
            for entry in reader.follow(harness.root, ["s1"], cursor=cursor, poll_interval=0.001, stop=stop.is_set):
                followed.append(entry.event.seq)
        except BaseException as exc:
            follower_error.append(exc)

    follower = threading.Thread(target=run_follower)
    follower.start()
    forward: list[int] = []
    forward_cursor: str | None = None
    backward: list[int] = []
    backward_cursor: str | None = None
    backward_done = False
    try:
        for count, rotate, forward_limit, backward_limit in script:
            # A rotation right after this write: the event-count limit is met by construction.
            harness.writer.configure(
                _rotation.config(max_bytes=1 << 20, max_events=1 if rotate else 0, compress=compress)
            )
            harness.emit("s1", count)
            page = reader.read_page(harness.root, "s1", cursor=forward_cursor, limit=forward_limit)
            forward += _seqs(page.entries)
            forward_cursor = page.next_cursor
            if backward_cursor is None:
                backward_cursor = reader.end_cursor(harness.root, "s1")
                backward_top = reader.cursor_seq(backward_cursor, "s1")
            elif not backward_done:
                back = reader.read_page(harness.root, "s1", cursor=backward_cursor, limit=backward_limit, reverse=True)
                backward += _seqs(back.entries)
                backward_cursor = back.next_cursor
                backward_done = back.end
        total = harness.store.sessions["s1"].seq
        while True:
            page = reader.read_page(harness.root, "s1", cursor=forward_cursor, limit=5)
            forward += _seqs(page.entries)
            forward_cursor = page.next_cursor
            if page.end:
                break
        while not backward_done:
            back = reader.read_page(harness.root, "s1", cursor=backward_cursor, limit=5, reverse=True)
            backward += _seqs(back.entries)
            backward_cursor = back.next_cursor
            backward_done = back.end
        harness.writer.wait_idle()
        for _ in range(2000):  # the follower polls every millisecond; this is a safety bound only
            if len(followed) >= total or follower_error:
                break
            threading.Event().wait(0.005)
    finally:
        stop.set()
        follower.join()
        harness.writer.close()
        shutil.rmtree(base, ignore_errors=True)
    assert not follower_error
    assert forward == list(range(1, total + 1))
    assert backward == list(range(backward_top, 0, -1))
    assert followed == list(range(1, total + 1))


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
    assert _seqs(page.entries) == list(range(300, 290, -1))
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


def test_an_unreadable_segment_is_skipped_and_the_page_says_incomplete(tmp_path: Path) -> None:
    """A corrupt gzip archive is skipped; the other segments are read and the page is incomplete."""
    harness = Harness(tmp_path, compress=True)
    for _ in range(20):
        harness.emit("s1", 5)
    harness.writer.close()
    second = harness.sessions_dir() / "s1.events.000002.jsonl.gz"
    lost = {json.loads(line)["seq"] for line in gzip.decompress(second.read_bytes()).splitlines()}
    second.write_bytes(b"\x1f\x8b\x08\x00garbage-not-deflate")
    page = reader.read_page(harness.root, "s1", limit=1000)
    assert page.incomplete
    assert _seqs(page.entries) == [seq for seq in range(1, 101) if seq not in lost]
    reverse = reader.read_page(harness.root, "s1", limit=1000, reverse=True)
    assert reverse.incomplete
    assert _seqs(reverse.entries) == [seq for seq in range(100, 0, -1) if seq not in lost]
    for read in (page, reverse):
        [gap] = read.gaps
        assert (gap.session_id, gap.first, gap.last, gap.lagged) == ("s1", min(lost), max(lost), False)
        assert "s1.events.000002.jsonl.gz" in gap.reason
    met: list[reader.Gap] = []
    copied = b"".join(reader.copy_lines(harness.root, "s1", on_gap=met.append))
    assert [json.loads(line)["seq"] for line in copied.splitlines()] == _seqs(page.entries)
    assert [(gap.first, gap.last) for gap in met] == [(min(lost), max(lost))]


def test_an_expired_cursor_is_a_gap_and_iteration_goes_on_with_on_gap(harness: Any) -> None:
    """Retention under a cursor: read_page names the deleted range; iter_events(on_gap=...) goes on after it."""
    for _ in range(20):
        harness.emit("s1", 5)
    cursor = reader.read_page(harness.root, "s1", limit=3).next_cursor
    assert cursor is not None
    for archive in sorted(harness.sessions_dir().glob("s1.events.00000[12].*")):
        archive.unlink()
    oldest = _seqs(reader.read_page(harness.root, "s1", limit=1).entries)[0]
    page = reader.read_page(harness.root, "s1", cursor=cursor)
    assert page.expired and not page.entries
    assert [(gap.first, gap.last, gap.lagged) for gap in page.gaps] == [(4, oldest - 1, True)]
    met: list[reader.Gap] = []
    rest = list(reader.iter_events(harness.root, "s1", cursor=cursor, on_gap=met.append))
    assert _seqs(rest) == list(range(oldest, 101))
    assert [(gap.first, gap.last) for gap in met] == [(4, oldest - 1)]
    assert list(reader.iter_events(harness.root, "s1", cursor=cursor)) == []  # without on_gap: as before


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
    assert _seqs(reader.read_page(harness.root, "s1", cursor=second).entries) == [4, 5, 6]


def test_a_cursor_of_another_root_is_refused(tmp_path: Path) -> None:
    """Cursors carry the root's epoch: the same session id under a rebuilt root refuses them."""
    first = Harness(tmp_path / "a")
    first.emit("s1", 5)
    first.writer.close()
    cursor = reader.end_cursor(first.root, "s1")
    shutil.rmtree(first.root)
    second = Harness(tmp_path / "a")
    second.emit("s1", 9)
    second.writer.close()
    with pytest.raises(reader.InvalidCursor, match="another session root"):
        reader.read_page(second.root, "s1", cursor=cursor)
    with pytest.raises(reader.InvalidCursor, match="another session root"):
        reader.check_cursor(second.root, cursor)
    assert _seqs(reader.read_page(second.root, "s1", cursor=reader.end_cursor(second.root, "s1")).entries) == []


def test_a_directory_in_place_of_a_segment_is_skipped(harness: Any) -> None:
    """A directory where an archive should be is unreadable: skipped, incomplete, no crash."""
    for _ in range(20):
        harness.emit("s1", 5)
    path = harness.sessions_dir() / "s1.events.000002.jsonl"
    path.unlink()
    path.mkdir()
    page = reader.read_page(harness.root, "s1", limit=1000)
    assert page.incomplete
    assert _seqs(page.entries)[0] == 1
    assert _seqs(page.entries)[-1] == 100


def test_planted_symlinks_are_refused_never_followed(harness: Any, tmp_path: Path) -> None:
    """A symlink planted as an archive or as the active file is not followed; its target never shows."""
    for _ in range(20):
        harness.emit("s1", 5)
    outside = tmp_path / "outside.jsonl"
    forged = json.loads((harness.sessions_dir() / "s1.events.000001.jsonl").read_text().splitlines()[0])
    forged["action"] = "FORGED"
    outside.write_text(json.dumps(forged) + "\n")
    archive = harness.sessions_dir() / "s1.events.000002.jsonl"
    archive.unlink()
    archive.symlink_to(outside)
    page = reader.read_page(harness.root, "s1", limit=1000)
    assert page.incomplete
    assert all(entry.event.action != "FORGED" for entry in page.entries)
    active = harness.sessions_dir() / "s1.events.jsonl"
    active.unlink()
    active.symlink_to(outside)
    page = reader.read_page(harness.root, "s1", limit=1000, reverse=True)
    assert page.incomplete
    assert all(entry.event.action != "FORGED" for entry in page.entries)


def test_a_symlinked_root_or_an_unsafe_id_is_refused(harness: Any, tmp_path: Path) -> None:
    """The root itself may not be a symlink, and ids that could leave the root are not sessions."""
    harness.emit("s1", 3)
    link = tmp_path / "link-root"
    link.symlink_to(harness.root)
    with pytest.raises(reader.LayoutError, match="symlink"):
        reader.read_page(link, "s1")
    for unsafe in ("../s1", ".hidden", "a/b", ""):
        with pytest.raises(reader.SessionNotFound):
            reader.read_page(harness.root, unsafe)


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
    assert _seqs(first.entries) == [1, 2, 3]
    assert _seqs(reader.read_page(harness.root, "s1", limit=100, reverse=True).entries) == [3, 2, 1]
    with active.open("ab") as file:
        file.write(line[20:] + b"\n")
    assert _seqs(reader.read_page(harness.root, "s1", cursor=first.next_cursor).entries) == [4]


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


def test_a_newer_layout_is_reported_clearly(harness: Any) -> None:
    """A root written by a newer gz-ia raises LayoutTooNew naming both versions."""
    harness.emit("s1", 1)
    (harness.root / "layout.json").write_text('{"layout": 99}\n')
    with pytest.raises(LayoutTooNew, match="layout 99, newer than this gz-ia knows"):
        reader.read_page(harness.root, "s1")
    with pytest.raises(LayoutTooNew):
        reader.list_sessions(harness.root)


def test_foreign_cursors_are_rejected(harness: Any) -> None:
    """A cursor that is garbage or belongs to another session is an InvalidCursor (a usage error)."""
    harness.emit("s1", 3)
    harness.emit("s2", 3)
    other = reader.read_page(harness.root, "s2").entries[0].cursor
    for bad in ("nonsense", "", other):
        with pytest.raises(reader.InvalidCursor):
            reader.read_page(harness.root, "s1", cursor=bad)


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
    assert _seqs(reader.read_page(harness.root, "s1", filters=window).entries) == [3, 4, 5]
    nobody = reader.Filters(agents=frozenset({"nobody"}))
    empty = reader.read_page(harness.root, "s1", filters=nobody)
    assert empty.entries == []
    assert empty.end


def test_list_sessions_and_tree_summarise_parents_failures_and_open_actions(harness: Any) -> None:
    """list_sessions reports agent, counts and parents; session_tree nests subagents under their parent."""
    harness.emit("root", 6)
    harness.emit("child", 3, failed=True, parent="root")
    harness.emit("grandchild", 2, parent="child")
    harness.emit("other", 3)
    harness.writer.close()
    summaries = {item.session_id: item for item in reader.list_sessions(harness.root)}
    assert set(summaries) == {"root", "child", "grandchild", "other"}
    assert summaries["child"].failures == 1
    assert summaries["child"].parent_session_id == "root"
    assert summaries["grandchild"].open_actions == 1
    assert summaries["root"].events == 6
    assert summaries["root"].agent == "claude"
    tree = reader.session_tree(harness.root, "root")
    assert [(depth, node.session_id) for depth, node in tree.walk()] == [(0, "root"), (1, "child"), (2, "grandchild")]
    assert tree.children[0].status == "failed"
    assert tree.children[0].children[0].status == "running"
    with pytest.raises(reader.SessionNotFound):
        reader.session_tree(harness.root, "missing")


def test_list_sessions_counts_across_rotations_without_rescanning_archives(harness: Any) -> None:
    """Summaries come from the checkpoint plus the active tail: wrecked archives do not change them."""
    for _ in range(30):
        harness.emit("s1", 5, failed=True)
    harness.writer.close()
    for name in harness.names():
        if name.startswith("s1.events.0"):
            (harness.sessions_dir() / name).write_bytes(b"x\n")
    (summary,) = reader.list_sessions(harness.root)
    assert summary.events == 150
    assert summary.failures == 150 // 3
    assert summary.segments == harness.rotated + 1


def test_follow_waits_for_a_session_that_does_not_exist_yet(harness: Any) -> None:
    """Following a session before its first event yields its events once it appears (tail -F)."""
    stop = threading.Event()
    started = threading.Event()
    seen: list[int] = []

    def run() -> None:
        for entry in reader.follow(harness.root, ["late"], poll_interval=0.001, stop=_polling(started, stop)):
            seen.append(entry.event.seq)
            if len(seen) == 4:
                stop.set()

    thread = threading.Thread(target=run)
    thread.start()
    started.wait(10)
    harness.emit("late", 2)
    harness.emit("late", 2)
    thread.join(timeout=30)
    stop.set()
    assert seen == [1, 2, 3, 4]


def test_follow_of_a_root_includes_new_sessions_from_their_first_event(harness: Any) -> None:
    """A root-wide follow picks up sessions that appear later, from their first event."""
    harness.emit("old", 3)
    stop = threading.Event()
    seen: list[tuple[str, int]] = []
    started = threading.Event()

    def run() -> None:
        for entry in reader.follow(harness.root, None, poll_interval=0.001, stop=_polling(started, stop)):
            seen.append((entry.session_id, entry.event.seq))
            if len(seen) == 5:
                stop.set()

    thread = threading.Thread(target=run)
    thread.start()
    started.wait(10)
    harness.emit("new", 3)
    harness.emit("old", 2)
    thread.join(timeout=30)
    stop.set()
    assert sorted(item for item in seen if item[0] == "new") == [("new", 1), ("new", 2), ("new", 3)]
    assert [item for item in seen if item[0] == "old"] == [("old", 4), ("old", 5)]


def test_combined_cursor_resumes_a_multi_session_follow(harness: Any) -> None:
    """combine_cursors keeps one boundary per session; following from it yields only later events."""
    harness.emit("a", 3)
    harness.emit("b", 3)
    cursor = reader.combine_cursors([reader.end_cursor(harness.root, "a"), reader.end_cursor(harness.root, "b")])
    assert reader.cursor_sessions(cursor) == ["a", "b"]
    harness.emit("a", 1)
    harness.emit("b", 2)
    harness.emit("c", 1)
    seen: list[tuple[str, int]] = []
    for entry in reader.follow(harness.root, None, cursor=cursor, poll_interval=0.001, stop=lambda: len(seen) >= 4):
        seen.append((entry.session_id, entry.event.seq))
    assert sorted(seen) == [("a", 4), ("b", 4), ("b", 5), ("c", 1)]


def _covered(entries: list[reader.Entry], gaps: list[reader.Gap], first: int, last: int) -> list[tuple[int, int]]:
    """Return what a follower accounted for, in order: (seq, seq) per event, (first, last) per gap notice.

    Coverage of ``first..last`` with no hole and no overlap means it never hid a gap.
    """
    seen: list[tuple[int, int, int]] = [(e.event.seq, e.event.seq, index) for index, e in enumerate(entries)]
    assert all(gap.first is not None and gap.last is not None for gap in gaps), gaps
    seen += [(gap.first or 0, gap.last or 0, -1) for gap in gaps]
    ranges = [(low, high) for low, high, _ in sorted(seen)]
    assert _seqs(entries) == sorted(_seqs(entries))
    expected = first
    for low, high in ranges:
        assert low == expected, f"seq {expected}..{low - 1} neither shown nor reported: {ranges}"
        expected = high + 1
    assert expected == last + 1
    return ranges


def _archives(harness: Any, session_id: str) -> list[Path]:
    return sorted(harness.sessions_dir().glob(f"{session_id}.events.0*"))


def test_a_follower_that_lags_while_retention_goes_on_reports_every_deleted_range(harness: Any) -> None:
    """Retention deletes the follower's archive, then (while the follower says so) the next ones too: every
    later event is shown or inside a lagged notice, in order; the follower never jumps over events silently."""
    for _ in range(30):
        harness.emit("s1", 5)
    cursor = reader.read_page(harness.root, "s1", limit=3).next_cursor
    archives = _archives(harness, "s1")
    assert len(archives) >= 4
    archives[0].unlink()
    gaps: list[reader.Gap] = []

    def retention_goes_on(gap: reader.Gap) -> None:
        gaps.append(gap)
        if len(gaps) == 1:
            for archive in archives[1:3]:  # between the lagged notice and the read of the oldest archive
                archive.unlink()

    entries: list[reader.Entry] = []
    for entry in reader.follow(harness.root, ["s1"], cursor=cursor, on_gap=retention_goes_on):
        entries.append(entry)
        if entry.event.seq == 150:
            break
    _covered(entries, gaps, 4, 150)
    # The archives it had already opened may still be read; whatever was not is a lagged notice.
    assert gaps and all(gap.lagged and gap.reason == "deleted by retention before they were read" for gap in gaps)


class _RetentionMidRead(reader.Filters, frozen=True):
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


def test_a_follower_whose_next_archives_are_deleted_mid_read_reports_them_as_lagged(harness: Any) -> None:
    """The follower is reading its archive when retention deletes it and the next two: it finishes the one it
    has open, then reports the deleted range as lagged (not as damage) and goes on, in order."""
    for _ in range(30):
        harness.emit("s1", 5)
    cursor = reader.read_page(harness.root, "s1", limit=3).next_cursor
    archives = _archives(harness, "s1")
    gaps: list[reader.Gap] = []
    entries: list[reader.Entry] = []
    follower = reader.follow(
        harness.root,
        ["s1"],
        cursor=cursor,
        on_gap=gaps.append,
        filters=_RetentionMidRead(seq=4, archives=tuple(archives[:3])),
    )
    for entry in follower:
        entries.append(entry)
        if entry.event.seq == 150:
            break
    _covered(entries, gaps, 4, 150)
    assert [(gap.lagged, gap.reason) for gap in gaps] == [(True, "deleted by retention before they were read")]
    assert _seqs(entries)[0] == 4  # the open archive is read to its end


def test_a_history_read_that_lags_while_retention_goes_on_never_skips_silently(harness: Any) -> None:
    """iter_events(on_gap=...) from an expired cursor, with retention deleting more while it says so: every
    later event is shown or inside a lagged notice, in order."""
    for _ in range(30):
        harness.emit("s1", 5)
    cursor = reader.read_page(harness.root, "s1", limit=3).next_cursor
    archives = _archives(harness, "s1")
    archives[0].unlink()
    gaps: list[reader.Gap] = []

    def retention_goes_on(gap: reader.Gap) -> None:
        gaps.append(gap)
        for archive in archives[1:3]:
            archive.unlink(missing_ok=True)

    entries = list(reader.iter_events(harness.root, "s1", cursor=cursor, on_gap=retention_goes_on, page_size=10))
    _covered(entries, gaps, 4, 150)
    assert [(gap.first, gap.lagged) for gap in gaps][:1] == [(4, True)]
    assert all(gap.reason == "deleted by retention before they were read" for gap in gaps)


@given(
    session_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", fullmatch=True),
    segment=st.integers(1, 2**31),
    offset=st.integers(0, 2**48),
    seq=st.integers(0, 2**63 - 1),
    epoch=st.sampled_from(["", "0123456789abcdef"]),
)
def test_a_cursor_is_msgpack_in_unpadded_url_safe_base64_and_reads_back(
    session_id: str, segment: int, offset: int, seq: int, epoch: str
) -> None:
    """Cursors users hold keep their spelling: ``[tag, session, segment, offset, seq(, epoch)]``."""
    import base64

    import msgspec

    from gz_ia.collector.reading.cursor import Position, decode_cursor_epoch, encode_position

    fields: list[object] = ["c2" if epoch else "c1", session_id, segment, offset, seq]
    if epoch:
        fields.append(epoch)
    spelled = base64.urlsafe_b64encode(msgspec.msgpack.encode(fields)).decode().rstrip("=")
    assert encode_position(session_id, segment, offset, seq, epoch) == spelled
    assert Position(session_id, segment, offset, seq).encode(epoch) == spelled
    assert decode_cursor_epoch(spelled) == ({session_id: Position(session_id, segment, offset, seq)}, epoch)


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
