"""Cursors: they survive rotations, resume follows, refuse other roots and foreign bytes, and have a stable format."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.collector.reading.support import seqs
from tests.collector.storage.test_rotation import Harness

from gz_ia.collector import reading as reader


def test_a_cursor_survives_any_number_of_rotations(harness: Any) -> None:
    """A cursor taken before many rotations resumes exactly after its event, both ways."""
    harness.emit("s1", 10)
    middle = reader.read_page(harness.root, "s1", limit=4).entries[-1].cursor
    for _ in range(60):
        harness.emit("s1", 5)
    assert harness.rotated >= 8
    after = reader.read_page(harness.root, "s1", cursor=middle, limit=3)
    before = reader.read_page(harness.root, "s1", cursor=middle, limit=3, reverse=True)
    assert seqs(after.entries) == [5, 6, 7]
    assert seqs(before.entries) == [4, 3, 2]


def test_reverse_read_from_an_entry_cursor_includes_that_entry(harness: Any) -> None:
    """An entry's cursor is the boundary after it: forward continues after it, reverse starts with it."""
    harness.emit("s1", 6)
    entry = reader.read_page(harness.root, "s1", limit=3).entries[-1]
    assert seqs(reader.read_page(harness.root, "s1", cursor=entry.cursor, reverse=True, limit=10).entries) == [3, 2, 1]


def test_an_expired_cursor_is_a_gap_and_iteration_goes_on_with_on_gap(harness: Any) -> None:
    """Retention under a cursor: read_page names the deleted range; iter_events(on_gap=...) goes on after it."""
    for _ in range(20):
        harness.emit("s1", 5)
    cursor = reader.read_page(harness.root, "s1", limit=3).next_cursor
    assert cursor is not None
    for archive in sorted(harness.sessions_dir().glob("s1.events.00000[12].*")):
        archive.unlink()
    oldest = seqs(reader.read_page(harness.root, "s1", limit=1).entries)[0]
    page = reader.read_page(harness.root, "s1", cursor=cursor)
    assert page.expired and not page.entries
    assert [(gap.first, gap.last, gap.lagged) for gap in page.gaps] == [(4, oldest - 1, True)]
    met: list[reader.Gap] = []
    rest = list(reader.iter_events(harness.root, "s1", cursor=cursor, on_gap=met.append))
    assert seqs(rest) == list(range(oldest, 101))
    assert [(gap.first, gap.last) for gap in met] == [(4, oldest - 1)]
    assert list(reader.iter_events(harness.root, "s1", cursor=cursor)) == []  # without on_gap: as before


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
    assert seqs(reader.read_page(second.root, "s1", cursor=reader.end_cursor(second.root, "s1")).entries) == []


def test_foreign_cursors_are_rejected(harness: Any) -> None:
    """A cursor that is garbage or belongs to another session is an InvalidCursor (a usage error)."""
    harness.emit("s1", 3)
    harness.emit("s2", 3)
    other = reader.read_page(harness.root, "s2").entries[0].cursor
    for bad in ("nonsense", "", other):
        with pytest.raises(reader.InvalidCursor):
            reader.read_page(harness.root, "s1", cursor=bad)


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
