"""Retention: archive count and age, the root's disk budget, idle sessions, and cursors it invalidates."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gz_ia.collector import reading as reader
from gz_ia.collector.cli import main
from gz_ia.collector.config import RetentionConfig
from gz_ia.collector.storage.retention import RetentionPolicy, RetentionReport, apply_retention, collect_idle
from gz_ia.collector.storage.roots import open_root

_spec = importlib.util.spec_from_file_location("rotation_harness", Path(__file__).with_name("test_rotation.py"))
assert _spec is not None and _spec.loader is not None
_rotation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rotation)
Harness = _rotation.Harness

_DAY = 86_400.0


def _archives(harness: Any, session_id: str) -> list[str]:
    return sorted(name for name in harness.names() if name.startswith(session_id + ".events.0"))


def _age(path: Path, seconds_ago: float, now: float) -> None:
    os.utime(path, (now - seconds_ago, now - seconds_ago))


def test_max_archives_keeps_only_the_newest_archives(tmp_path: Path) -> None:
    """After each rotation a session keeps at most max_archives archives, the newest ones."""
    harness = Harness(tmp_path, max_archives=3)
    for _ in range(40):
        harness.emit("s1", 5)
    harness.writer.close()
    names = _archives(harness, "s1")
    assert len(names) == 3
    newest = harness.rotated
    assert names == [f"s1.events.{n:06d}.jsonl" for n in range(newest - 2, newest + 1)]
    seqs = [entry.event.seq for entry in reader.iter_events(harness.root, "s1")]
    assert seqs == list(range(seqs[0], 201))
    assert seqs[0] > 1


def test_max_age_deletes_archives_older_than_the_limit(tmp_path: Path) -> None:
    """Archives whose mtime is older than max_age_days go at the next rotation (injected clock)."""
    harness = Harness(tmp_path, max_age_days=1)
    harness.now = time.time()  # archive ages are file mtimes, which the file system stamps
    for _ in range(20):
        harness.emit("s1", 5)
    before = _archives(harness, "s1")
    harness.now = os.stat(harness.sessions_dir() / before[-1]).st_mtime
    for name in before[:2]:
        _age(harness.sessions_dir() / name, 2 * _DAY, harness.now)
    rotations = harness.rotated
    while harness.rotated == rotations:
        harness.emit("s1", 5)
    harness.writer.close()
    after = _archives(harness, "s1")
    assert before[0] not in after
    assert before[1] not in after
    assert set(before[2:]) <= set(after)


def test_disk_budget_takes_the_oldest_segments_of_the_least_recently_active_session_first(tmp_path: Path) -> None:
    """Over max_root_bytes, the least recently active session loses its oldest archives first."""
    harness = Harness(tmp_path)
    for _ in range(20):
        harness.emit("quiet", 5)
    for _ in range(20):
        harness.emit("busy", 5)
    harness.writer.close()
    now = harness.now
    for name in harness.names():
        _age(harness.sessions_dir() / name, 3600 if name.startswith("quiet") else 60, now)
    quiet_before = _archives(harness, "quiet")
    busy_before = _archives(harness, "busy")
    total = sum(path.stat().st_size for path in harness.root.rglob("*") if path.is_file())
    budget = total - 2 * 4096
    with open_root(harness.root, owner=None, create=False) as dirs:
        report = apply_retention(dirs, RetentionPolicy(RetentionConfig(max_archives=0, max_root_bytes=budget)), now=now)
    assert report.bytes >= 2 * 4096
    assert {item.name for item in report.deleted} == set(quiet_before[: len(report.deleted)])
    assert _archives(harness, "busy") == busy_before
    assert sum(path.stat().st_size for path in harness.root.rglob("*") if path.is_file()) <= budget


def test_retention_deletes_only_names_the_collector_generates(tmp_path: Path) -> None:
    """Foreign files, look-alike names, a symlink and a directory with an archive name survive retention."""
    harness = Harness(tmp_path)
    for _ in range(20):
        harness.emit("s1", 5)
    harness.writer.close()
    sessions = harness.sessions_dir()
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me\n")
    planted = {
        "notes.txt": "mine",
        "s1.events.1.jsonl": "too few digits",
        "s1.events.000001.jsonl.bak": "backup",
        "..events.000001.jsonl": "unsafe id",
    }
    for name, text in planted.items():
        (sessions / name).write_text(text)
    (sessions / "s1.events.000000.jsonl").mkdir()
    (sessions / "s9.events.000001.jsonl").symlink_to(outside)
    (harness.root / "rejects.notes").write_text("mine")
    with open_root(harness.root, owner=None, create=False) as dirs:
        apply_retention(dirs, RetentionPolicy(RetentionConfig(max_archives=1)), now=harness.now)
        collect_idle(dirs, 0, now=harness.now + 10 * _DAY)
    for name in planted:
        assert (sessions / name).exists(), name
    assert (sessions / "s1.events.000000.jsonl").is_dir()
    assert (sessions / "s9.events.000001.jsonl").is_symlink()
    assert outside.read_text() == "keep me\n"
    assert (harness.root / "rejects.notes").exists()
    assert not (sessions / "s1.events.jsonl").exists()


def test_retention_removing_the_cursors_segment_ends_the_history(tmp_path: Path) -> None:
    """A cursor whose segment retention deleted gives an empty, expired page: it never jumps ahead."""
    harness = Harness(tmp_path)
    for _ in range(10):
        harness.emit("s1", 5)
    early = reader.read_page(harness.root, "s1", limit=3)
    assert [entry.event.seq for entry in early.entries] == [1, 2, 3]
    harness.writer.configure(_rotation.config(max_archives=1))
    rotations = harness.rotated
    while harness.rotated == rotations:
        harness.emit("s1", 5)
    harness.writer.close()
    assert not (harness.sessions_dir() / "s1.events.000001.jsonl").exists()
    forward = reader.read_page(harness.root, "s1", cursor=early.next_cursor)
    assert forward.entries == []
    assert forward.expired
    assert forward.end
    backward = reader.read_page(harness.root, "s1", cursor=early.next_cursor, reverse=True)
    assert backward.entries == []
    assert backward.expired


def test_a_cursor_at_a_deleted_segments_end_continues_without_a_gap(tmp_path: Path) -> None:
    """If the deleted segment held nothing after the cursor, reading continues at the next segment."""
    harness = Harness(tmp_path, max_events=5, max_bytes=1 << 20)
    harness.emit("s1", 5)
    cursor = reader.end_cursor(harness.root, "s1")
    harness.emit("s1", 5)
    (harness.sessions_dir() / "s1.events.000001.jsonl").unlink()
    page = reader.read_page(harness.root, "s1", cursor=cursor)
    assert [entry.event.seq for entry in page.entries] == [6, 7, 8, 9, 10]
    assert not page.expired
    harness.writer.close()


def test_gc_removes_idle_sessions_and_dry_run_only_reports(tmp_path: Path) -> None:
    """gz-ia gc --older-than removes sessions idle that long (all their files); --dry-run removes nothing."""
    harness = Harness(tmp_path)
    harness.now = time.time()  # gz-ia gc compares file mtimes with the real clock
    for _ in range(10):
        harness.emit("idle", 5)
    harness.emit("fresh", 3)
    harness.writer.close()
    for path in harness.root.rglob("idle*"):
        _age(path, 40 * _DAY, harness.now)
    runner = CliRunner()
    env = {
        "GZ_IA_ROOT": str(harness.root),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "GZ_IA_SOCKET": str(tmp_path / "no-collector.sock"),  # gz-ia gc deletes by itself
    }
    dry = runner.invoke(main, ["gc", "--older-than", "30d", "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    assert "would remove 1 idle session(s)" in dry.output
    assert any(name.startswith("idle") for name in harness.names())
    done = runner.invoke(main, ["gc", "--older-than", "30d"], env=env)
    assert done.exit_code == 0, done.output
    assert "removed 1 idle session(s)" in done.output
    assert not any(name.startswith("idle") for name in harness.names())
    assert not (harness.root / "state" / "idle.session.json").exists()
    assert [item.session_id for item in reader.list_sessions(harness.root)] == ["fresh"]
    bad = runner.invoke(main, ["gc", "--older-than", "soon"], env=env)
    assert bad.exit_code == 2
    # "fresh" was written just now: a collector may still hold it open.
    too_recent = runner.invoke(main, ["gc", "--older-than", "5m"], env=env)
    assert too_recent.exit_code == 2
    assert "too recent" in too_recent.output
    assert [item.session_id for item in reader.list_sessions(harness.root)] == ["fresh"]


def test_gc_cannot_remove_a_session_between_the_collectors_check_and_its_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer checks that a long-idle file still exists, then appends to it. A gz-ia gc run at
    that exact moment (played here from inside the check, against the same files) leaves the session
    alone, so the new line lands in the session file instead of in a deleted one."""
    harness = Harness(tmp_path)
    harness.now = time.time()
    harness.emit("s1", 3)
    for path in harness.root.rglob("s1*"):
        _age(path, 40 * _DAY, harness.now)
    harness.now += 3600  # idle for the writer too: it checks the file before its next write
    harness.stage("s1", 1)
    state = harness.store.sessions["s1"]
    real_fstat = os.fstat
    reports: list[RetentionReport] = []

    def fstat_then_gc(fd: int) -> os.stat_result:
        result = real_fstat(fd)
        if fd == state.fd and not reports:
            reports.append(collect_idle(harness.store.dirs, 30 * _DAY, now=time.time()))
        return result

    monkeypatch.setattr(os, "fstat", fstat_then_gc)
    harness.writer.flush()
    monkeypatch.undo()
    assert reports and reports[0].sessions_removed == []
    assert len((harness.sessions_dir() / "s1.events.jsonl").read_text().splitlines()) == 4
    # Once the write is done, the lock is released: a later gc (the session idle again) removes it.
    assert collect_idle(harness.store.dirs, 0, now=time.time() + 1).sessions_removed == ["s1"]
    harness.writer.close()


@pytest.mark.parametrize(("compress", "share"), [(False, 0), (True, 0), (True, 1)])
def test_rejects_archives_are_retained_like_sessions(tmp_path: Path, compress: bool, share: int) -> None:
    """The rejects file's archives obey max_archives too (each share's, in a sharded collector)."""
    from datetime import UTC, datetime

    from gz_ia.client.schema import LogEvent, Stage, Status
    from gz_ia.collector.ingest.validation import DecodedBatch

    harness = Harness(tmp_path, max_archives=2, compress=compress, share=share)
    stem = "rejects" if share == 0 else f"rejects-{share}"
    bad = LogEvent(
        timestamp=datetime.now(UTC), session_id="s1", action="never-opened", stage=Stage.FINISH,
        status=Status.OK, agent="claude",
    )  # fmt: skip
    for number in range(1, 120):
        harness.ingest.apply(harness.store, "ab12", DecodedBatch(number, True, [bad], {}, {}))
        harness.writer.flush()
    harness.writer.close()
    archives = sorted(name for name in os.listdir(harness.root) if name.startswith(f"{stem}.0"))
    assert len(archives) == 2
    assert harness.rotated > 2
