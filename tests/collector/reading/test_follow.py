"""Following sessions as they are written: across rotations, into new sessions, past what retention deletes."""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.collector.reading.support import RetentionMidRead, archives_of, covered, polling, seqs
from tests.collector.storage.test_rotation import Harness
from tests.collector.storage.test_rotation import config as rotation_config

from gz_ia.collector import reading as reader


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
                rotation_config(max_bytes=1 << 20, max_events=1 if rotate else 0, compress=compress)
            )
            harness.emit("s1", count)
            page = reader.read_page(harness.root, "s1", cursor=forward_cursor, limit=forward_limit)
            forward += seqs(page.entries)
            forward_cursor = page.next_cursor
            if backward_cursor is None:
                backward_cursor = reader.end_cursor(harness.root, "s1")
                backward_top = reader.cursor_seq(backward_cursor, "s1")
            elif not backward_done:
                back = reader.read_page(harness.root, "s1", cursor=backward_cursor, limit=backward_limit, reverse=True)
                backward += seqs(back.entries)
                backward_cursor = back.next_cursor
                backward_done = back.end
        total = harness.store.sessions["s1"].seq
        while True:
            page = reader.read_page(harness.root, "s1", cursor=forward_cursor, limit=5)
            forward += seqs(page.entries)
            forward_cursor = page.next_cursor
            if page.end:
                break
        while not backward_done:
            back = reader.read_page(harness.root, "s1", cursor=backward_cursor, limit=5, reverse=True)
            backward += seqs(back.entries)
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


def test_follow_waits_for_a_session_that_does_not_exist_yet(harness: Any) -> None:
    """Following a session before its first event yields its events once it appears (tail -F)."""
    stop = threading.Event()
    started = threading.Event()
    seen: list[int] = []

    def run() -> None:
        for entry in reader.follow(harness.root, ["late"], poll_interval=0.001, stop=polling(started, stop)):
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
        for entry in reader.follow(harness.root, None, poll_interval=0.001, stop=polling(started, stop)):
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


def test_a_follower_that_lags_while_retention_goes_on_reports_every_deleted_range(harness: Any) -> None:
    """Retention deletes the follower's archive, then (while the follower says so) the next ones too: every
    later event is shown or inside a lagged notice, in order; the follower never jumps over events silently."""
    for _ in range(30):
        harness.emit("s1", 5)
    cursor = reader.read_page(harness.root, "s1", limit=3).next_cursor
    archives = archives_of(harness, "s1")
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
    covered(entries, gaps, 4, 150)
    # The archives it had already opened may still be read; whatever was not is a lagged notice.
    assert gaps and all(gap.lagged and gap.reason == "deleted by retention before they were read" for gap in gaps)


def test_a_follower_whose_next_archives_are_deleted_mid_read_reports_them_as_lagged(harness: Any) -> None:
    """The follower is reading its archive when retention deletes it and the next two: it finishes the one it
    has open, then reports the deleted range as lagged (not as damage) and goes on, in order."""
    for _ in range(30):
        harness.emit("s1", 5)
    cursor = reader.read_page(harness.root, "s1", limit=3).next_cursor
    archives = archives_of(harness, "s1")
    gaps: list[reader.Gap] = []
    entries: list[reader.Entry] = []
    follower = reader.follow(
        harness.root,
        ["s1"],
        cursor=cursor,
        on_gap=gaps.append,
        filters=RetentionMidRead(seq=4, archives=tuple(archives[:3])),
    )
    for entry in follower:
        entries.append(entry)
        if entry.event.seq == 150:
            break
    covered(entries, gaps, 4, 150)
    assert [(gap.lagged, gap.reason) for gap in gaps] == [(True, "deleted by retention before they were read")]
    assert seqs(entries)[0] == 4  # the open archive is read to its end


def test_a_history_read_that_lags_while_retention_goes_on_never_skips_silently(harness: Any) -> None:
    """iter_events(on_gap=...) from an expired cursor, with retention deleting more while it says so: every
    later event is shown or inside a lagged notice, in order."""
    for _ in range(30):
        harness.emit("s1", 5)
    cursor = reader.read_page(harness.root, "s1", limit=3).next_cursor
    archives = archives_of(harness, "s1")
    archives[0].unlink()
    gaps: list[reader.Gap] = []

    def retention_goes_on(gap: reader.Gap) -> None:
        gaps.append(gap)
        for archive in archives[1:3]:
            archive.unlink(missing_ok=True)

    entries = list(reader.iter_events(harness.root, "s1", cursor=cursor, on_gap=retention_goes_on, page_size=10))
    covered(entries, gaps, 4, 150)
    assert [(gap.first, gap.lagged) for gap in gaps][:1] == [(4, True)]
    assert all(gap.reason == "deleted by retention before they were read" for gap in gaps)
