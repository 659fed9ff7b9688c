"""Damaged and hostile files: unreadable segments, directories and symlinks planted in a root, a newer layout."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from tests.collector.reading.support import seqs
from tests.collector.storage.test_rotation import Harness

from gz_ia.collector import reading as reader
from gz_ia.collector.storage.roots import LayoutTooNew


def test_a_directory_in_place_of_a_segment_is_skipped(harness: Any) -> None:
    """A directory where an archive should be is unreadable: skipped, incomplete, no crash."""
    for _ in range(20):
        harness.emit("s1", 5)
    path = harness.sessions_dir() / "s1.events.000002.jsonl"
    path.unlink()
    path.mkdir()
    page = reader.read_page(harness.root, "s1", limit=1000)
    assert page.incomplete
    assert seqs(page.entries)[0] == 1
    assert seqs(page.entries)[-1] == 100


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


def test_a_newer_layout_is_reported_clearly(harness: Any) -> None:
    """A root written by a newer gz-ia raises LayoutTooNew naming both versions."""
    harness.emit("s1", 1)
    (harness.root / "layout.json").write_text('{"layout": 99}\n')
    with pytest.raises(LayoutTooNew, match="layout 99, newer than this gz-ia knows"):
        reader.read_page(harness.root, "s1")
    with pytest.raises(LayoutTooNew):
        reader.list_sessions(harness.root)


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
    assert seqs(page.entries) == [seq for seq in range(1, 101) if seq not in lost]
    reverse = reader.read_page(harness.root, "s1", limit=1000, reverse=True)
    assert reverse.incomplete
    assert seqs(reverse.entries) == [seq for seq in range(100, 0, -1) if seq not in lost]
    for read in (page, reverse):
        [gap] = read.gaps
        assert (gap.session_id, gap.first, gap.last, gap.lagged) == ("s1", min(lost), max(lost), False)
        assert "s1.events.000002.jsonl.gz" in gap.reason
    met: list[reader.Gap] = []
    copied = b"".join(reader.copy_lines(harness.root, "s1", on_gap=met.append))
    assert [json.loads(line)["seq"] for line in copied.splitlines()] == seqs(page.entries)
    assert [(gap.first, gap.last) for gap in met] == [(min(lost), max(lost))]
