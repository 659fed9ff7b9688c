"""Rotation in the writer: rename-only, numbered segments, checkpoints, compression, cheap recovery."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.collector import reading as reader
from gz_ia.collector.config import CollectorConfig, RetentionConfig, RotationConfig
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.ingest.validation import DecodedBatch
from gz_ia.collector.sharding.wire import rejects_stem
from gz_ia.collector.storage.writer import Writer

_CYCLE = (Stage.READ, Stage.PENDING, Stage.FINISH)


class Harness:
    """A writer with an injected clock on a temporary root, fed through the real ingest path."""

    def __init__(self, base: Path, *, background: bool = False, share: int = 0, **limits: Any) -> None:
        self.limits = limits
        self.share = share
        self.root = base / ".harness"
        self.root.mkdir(parents=True, exist_ok=True)
        self.now = 1_800_000_000.0
        self.rotated = 0
        self.deleted: list[tuple[int, int]] = []
        self.writer = Writer(
            config=config(**limits),
            clock=lambda: self.now,
            background=background,
            on_rotated=self._count_rotation,
            on_deleted=lambda files, nbytes: self.deleted.append((files, nbytes)),
            rejects_stem=rejects_stem(share),
        )
        self.ingest = Ingest(self.writer, clock=lambda: self.now)
        self.store = self.writer.root(self.root, owner=os.getuid())
        self.numbers: dict[str, int] = {}
        self.written: dict[str, int] = {}

    def _count_rotation(self) -> None:
        self.rotated += 1

    def emit(self, session_id: str, count: int = 1, *, failed: bool = False, parent: str | None = None) -> None:
        """Send ``count`` events (READ/PENDING/FINISH cycles) through ingest, then flush."""
        self.stage(session_id, count, failed=failed, parent=parent)
        self.writer.flush()

    def stage(self, session_id: str, count: int = 1, *, failed: bool = False, parent: str | None = None) -> None:
        """Send ``count`` events through ingest, leaving them staged for the next write pass."""
        events: list[LogEvent | None] = []
        for _ in range(count):
            index = self.written.get(session_id, 0)
            self.written[session_id] = index + 1
            stage = _CYCLE[index % 3]
            is_failed = failed and stage is Stage.FINISH
            events.append(
                LogEvent(
                    timestamp=datetime.fromtimestamp(self.now + index / 1000, UTC),
                    session_id=session_id,
                    parent_session_id=parent,
                    action=f"task-{index // 3}",
                    stage=stage,
                    status=Status.FAILED if is_failed else Status.OK,
                    error="boom" if is_failed else None,
                    agent="claude",
                    duration_ms=5 if stage is Stage.FINISH else None,
                )
            )
        first = self.numbers.get(session_id, 0) + 1
        self.numbers[session_id] = first + count - 1
        self.ingest.apply(self.store, "ab12", DecodedBatch(first, True, events, {}, {}))

    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    def names(self) -> list[str]:
        return sorted(os.listdir(self.sessions_dir()))

    def restart(self) -> Writer:
        """Close the writer and open a fresh one on the same root (a collector restart)."""
        self.writer.close()
        self.writer = Writer(
            config=config(**self.limits),
            clock=lambda: self.now,
            background=False,
            on_rotated=self._count_rotation,
            rejects_stem=rejects_stem(self.share),
        )
        self.ingest = Ingest(self.writer, clock=lambda: self.now)
        self.store = self.writer.root(self.root, owner=os.getuid())
        return self.writer


def config(
    *,
    max_bytes: int = 4096,
    max_events: int = 0,
    daily: bool = False,
    compress: bool = False,
    max_archives: int = 0,
    max_age_days: float = 0,
    max_root_bytes: int = 0,
) -> CollectorConfig:
    """A collector config with the given rotation and retention limits."""
    return CollectorConfig(
        rotation=RotationConfig(max_bytes=max_bytes, max_events=max_events, daily=daily, compress=compress),
        retention=RetentionConfig(max_archives=max_archives, max_age_days=max_age_days, max_root_bytes=max_root_bytes),
    )


def all_lines(root: Path, session_id: str) -> list[str]:
    """Every stored line of a session, read straight from the files in segment order."""
    directory = root / "sessions"
    lines: list[str] = []
    archives = sorted(
        (int(name.split(".events.")[1].split(".")[0]), name)
        for name in os.listdir(directory)
        if name.startswith(session_id + ".events.0")
    )
    for _number, name in archives:
        data = (directory / name).read_bytes()
        lines += (gzip.decompress(data) if name.endswith(".gz") else data).decode().splitlines()
    active = directory / f"{session_id}.events.jsonl"
    if active.exists():
        lines += active.read_text().splitlines()
    return lines


@pytest.fixture(name="harness")
def _harness(tmp_path: Path) -> Any:
    """A synchronous writer rotating at 4 KiB, no compression, no retention."""
    made = Harness(tmp_path)
    yield made
    made.writer.close()


def test_size_limit_renames_the_active_file_into_numbered_archives(harness: Harness, schema_validator: Any) -> None:
    """Reaching max_bytes renames the active file to <id>.events.<n>.jsonl; numbers grow, lines stay valid."""
    for _ in range(40):
        harness.emit("s1", 5)
    names = harness.names()
    archives = [name for name in names if name.startswith("s1.events.0")]
    assert len(archives) == harness.rotated >= 5
    assert archives == [f"s1.events.{n:06d}.jsonl" for n in range(1, len(archives) + 1)]
    assert "s1.events.jsonl" in names
    for name in archives:
        assert (harness.sessions_dir() / name).stat().st_size >= 4096
    lines = all_lines(harness.root, "s1")
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, 201))
    for line in lines:
        schema_validator.validate(json.loads(line))


def test_rotation_is_a_rename_so_an_open_descriptor_keeps_the_whole_segment(harness: Harness) -> None:
    """A reader holding the active file's descriptor sees the archive's complete content (no truncation)."""
    harness.emit("s1", 3)
    held = os.open(harness.sessions_dir() / "s1.events.jsonl", os.O_RDONLY)
    try:
        inode = os.fstat(held).st_ino
        while harness.rotated == 0:
            harness.emit("s1", 5)
        archive = harness.sessions_dir() / "s1.events.000001.jsonl"
        assert archive.stat().st_ino == inode
        assert os.pread(held, 1 << 20, 0) == archive.read_bytes()
    finally:
        os.close(held)


def test_event_count_limit_rotates_every_n_events(tmp_path: Path) -> None:
    """max_events rotates a segment after that many events, whatever its size."""
    harness = Harness(tmp_path, max_bytes=1 << 20, max_events=10)
    for _ in range(10):
        harness.emit("s1", 5)
    harness.writer.close()
    assert harness.rotated == 5
    first = (harness.sessions_dir() / "s1.events.000001.jsonl").read_text().splitlines()
    assert len(first) == 10


def test_daily_rotation_closes_a_segment_after_utc_midnight(tmp_path: Path) -> None:
    """With daily, the first write on a new UTC day closes the previous day's segment (injected clock)."""
    harness = Harness(tmp_path, max_bytes=1 << 20, daily=True)
    harness.now = 1_800_000_000.0 - (1_800_000_000.0 % 86_400) + 86_000  # 23:53 UTC
    harness.emit("s1", 3)
    assert harness.rotated == 0
    harness.now += 600  # 00:03 the next day
    harness.emit("s1", 3)
    assert harness.rotated == 1
    harness.emit("s1", 3)
    assert harness.rotated == 1
    harness.writer.close()


def test_compressed_archives_are_read_transparently(tmp_path: Path, schema_validator: Any) -> None:
    """Compressed archives (gzip in the worker thread) read back as the same stream, in order."""
    harness = Harness(tmp_path, compress=True, background=True)
    for _ in range(30):
        harness.emit("s1", 5)
    harness.writer.wait_idle()
    names = harness.names()
    assert any(name.endswith(".jsonl.gz") for name in names)
    assert not any(name.startswith("s1.events.0") and name.endswith(".jsonl") for name in names)
    seqs = [entry.event.seq for entry in reader.iter_events(harness.root, "s1", page_size=7)]
    assert seqs == list(range(1, 151))
    for line in all_lines(harness.root, "s1"):
        schema_validator.validate(json.loads(line))
    harness.writer.close()


def test_plain_and_compressed_copies_of_a_segment_are_read_once(tmp_path: Path) -> None:
    """While compression is in flight both <n>.jsonl and <n>.jsonl.gz exist: events are not repeated."""
    harness = Harness(tmp_path, compress=True)
    for _ in range(20):
        harness.emit("s1", 5)
    harness.writer.close()
    directory = harness.sessions_dir()
    packed = directory / "s1.events.000001.jsonl.gz"
    (directory / "s1.events.000001.jsonl").write_bytes(gzip.decompress(packed.read_bytes()))
    forward = [entry.event.seq for entry in reader.iter_events(harness.root, "s1", page_size=4)]
    backward = [entry.event.seq for entry in reader.iter_events(harness.root, "s1", page_size=4, reverse=True)]
    assert forward == list(range(1, 101))
    assert backward == list(range(100, 0, -1))


def test_recovery_uses_the_checkpoint_and_scans_only_the_active_segment(harness: Harness) -> None:
    """After a restart, seq, open actions and watermarks come from the checkpoint; archives are not read."""
    for _ in range(30):
        harness.emit("s1", 4)
    harness.emit("s1", 1)  # leaves one action open
    before = harness.store.sessions["s1"]
    expected = (before.seq, dict(before.open_actions), dict(before.marks), before.segment)
    assert harness.rotated >= 3
    harness.writer.close()
    # Wreck every archive: a recovery that read them would lose the state.
    for name in harness.names():
        if name.startswith("s1.events.0"):
            (harness.sessions_dir() / name).write_bytes(b"garbage\n")
    writer = harness.restart()
    state = writer.session(harness.store, "s1")
    assert (state.seq, state.open_actions, state.marks, state.segment) == expected
    # A resent event (same producer number) is still recognised as a duplicate.
    harness.numbers["s1"] -= 1
    harness.written["s1"] -= 1
    harness.emit("s1", 1)
    assert writer.session(harness.store, "s1").seq == expected[0]


def test_crash_between_rename_and_checkpoint_is_recovered(harness: Harness) -> None:
    """A checkpoint older than the newest archive (crash mid-rotation) is caught up by replaying that archive."""
    harness.emit("s1", 2)
    harness.writer.close()
    state_file = harness.root / "state" / "s1.session.json"
    harness.restart()
    harness.emit("s1", 1)
    stale = state_file.read_bytes()
    while harness.rotated == 0:
        harness.emit("s1", 2)
    harness.rotated = 0
    expected = harness.store.sessions["s1"].seq
    open_actions = dict(harness.store.sessions["s1"].open_actions)
    harness.writer.close()
    state_file.write_bytes(stale)  # as if the new checkpoint never reached the disk
    writer = harness.restart()
    state = writer.session(harness.store, "s1")
    assert state.seq == expected
    assert state.open_actions == open_actions
    assert state.segment == 2
    assert [entry.event.seq for entry in reader.iter_events(harness.root, "s1")] == list(range(1, expected + 1))


@pytest.mark.parametrize("due", ["interval", "rotation"])
def test_a_checkpoint_never_covers_lines_staged_while_a_pass_is_in_flight(tmp_path: Path, due: str) -> None:
    """Lines staged during a write pass are not in the checkpoint that pass writes; lost by a crash,
    their resends are written, not dropped as duplicates of lines the file never held."""
    harness = Harness(tmp_path, max_bytes=1 << 20, max_events=4 if due == "rotation" else 0)
    harness.emit("s1", 3)
    harness.now += 60  # past the checkpoint interval
    harness.stage("s1", 1)
    job = harness.writer.take()
    harness.stage("s1", 2)  # arrives while the pass is in flight
    harness.writer.finish(job, *harness.writer.write(job, durable=False))
    assert harness.rotated == (1 if due == "rotation" else 0)
    checkpoint = json.loads((harness.root / "state" / "s1.session.json").read_bytes())
    assert (checkpoint["seq"], checkpoint["marks"]) == (4, {"ab12": 4})
    # The collector dies before the next pass: the two staged events were never acknowledged.
    harness.writer.close()
    writer = harness.restart()
    assert (writer.session(harness.store, "s1").seq, writer.session(harness.store, "s1").marks) == (4, {"ab12": 4})
    harness.numbers["s1"] -= 2
    harness.written["s1"] -= 2
    harness.emit("s1", 2)  # the client resends them
    assert [json.loads(line)["seq"] for line in all_lines(harness.root, "s1")] == [1, 2, 3, 4, 5, 6]


def test_a_damaged_checkpoint_falls_back_to_the_segments(harness: Harness) -> None:
    """A zero-length or garbled checkpoint is ignored and the state is rebuilt from every segment."""
    for _ in range(20):
        harness.emit("s1", 4)
    seq = harness.store.sessions["s1"].seq
    harness.writer.close()
    (harness.root / "state" / "s1.session.json").write_bytes(b"")
    writer = harness.restart()
    assert writer.session(harness.store, "s1").seq == seq


@pytest.mark.parametrize(("share", "stem"), [(0, "rejects"), (1, "rejects-1")])
def test_rejects_file_rotates_into_numbered_archives(tmp_path: Path, share: int, stem: str) -> None:
    """The rejects file rotates by rename like a session (rejects.<n>.jsonl), keeping every record;
    share k of a sharded collector has its own (rejects-k.jsonl), with its own archives and state."""
    harness = Harness(tmp_path, share=share)
    bad = LogEvent(
        timestamp=datetime.now(UTC), session_id="s1", action="never-opened", stage=Stage.FINISH,
        status=Status.OK, agent="claude",
    )  # fmt: skip
    for number in range(1, 60):
        harness.ingest.apply(harness.store, "ab12", DecodedBatch(number, True, [bad], {}, {}))
        harness.writer.flush()
    harness.writer.close()
    names = sorted(os.listdir(harness.root))
    archives = [name for name in names if name.startswith(f"{stem}.0")]
    assert archives and archives[0] == f"{stem}.000001.jsonl"
    assert [name for name in names if name.startswith("rejects")] == [*archives, f"{stem}.jsonl"]
    assert [name for name in os.listdir(harness.root / "state") if name.startswith("rejects")] == [f"{stem}.state.json"]
    writer = harness.restart()  # the next segment number is found again, in this share's names
    assert writer.root(harness.root, owner=os.getuid()).rejects.segment == len(archives) + 1
    records = []
    for name in [*archives, f"{stem}.jsonl"]:
        path = harness.root / name
        if path.exists():
            records += [json.loads(line) for line in path.read_text().splitlines()]
    assert [record["delivery"] for record in records] == [f"ab12:{n}" for n in range(1, 60)]


def test_rotations_and_deletions_are_reported_through_callbacks(tmp_path: Path) -> None:
    """The writer reports rotations and retention deletions to the server (which counts them in metrics)."""
    harness = Harness(tmp_path, max_archives=2)
    for _ in range(40):
        harness.emit("s1", 5)
    harness.writer.close()
    assert harness.rotated == harness.writer.rotations >= 4
    assert sum(files for files, _ in harness.deleted) == harness.rotated - 2
    assert sum(nbytes for _, nbytes in harness.deleted) == harness.writer.deleted_bytes > 0


def test_configure_changes_the_limits_of_a_running_writer(harness: Harness) -> None:
    """configure() (called on SIGHUP reload) applies new rotation limits from the next write."""
    harness.writer.configure(config(max_bytes=1 << 20))
    for _ in range(20):
        harness.emit("s1", 5)
    assert harness.rotated == 0
    harness.writer.configure(config(max_bytes=1 << 20, max_events=3))
    harness.emit("s1", 3)
    assert harness.rotated == 1


def test_a_session_removed_by_gc_while_idle_starts_again(harness: Harness) -> None:
    """If gz-ia gc deletes an idle session whose file is still open, the next write recreates it."""
    harness.emit("s1", 3)
    (harness.sessions_dir() / "s1.events.jsonl").unlink()
    harness.now += 3600
    harness.emit("s1", 1)
    state = harness.store.sessions["s1"]
    assert state.fd is not None
    assert os.fstat(state.fd).st_nlink == 1
    assert len((harness.sessions_dir() / "s1.events.jsonl").read_text().splitlines()) == 1


def test_writer_does_not_import_prometheus() -> None:
    """The storage package stays free of prometheus_client (the server binds metrics through callbacks)."""
    code = (
        "import sys, gz_ia.collector.storage.writer, gz_ia.collector.storage.retention\n"
        "print('prometheus_client' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("below", [3, 80])
def test_archives_under_a_hole_made_by_hand_are_still_read(tmp_path: Path, below: int) -> None:
    """An archive removed by hand with ``below`` older ones kept (found one by one, or past a few
    dozen in one listing): the reader starts at archive 1 and names the hole's events."""
    harness = Harness(tmp_path, max_bytes=4096, max_events=3)
    for _ in range(below + 3):
        harness.emit("s1", 3)
    harness.writer.close()
    hole = harness.sessions_dir() / f"s1.events.{below + 1:06d}.jsonl"
    hole.unlink()
    page = reader.read_page(harness.root, "s1", limit=10_000)
    seqs = [entry.event.seq for entry in page.entries]
    held = [3 * below + 1, 3 * below + 2, 3 * below + 3]
    assert seqs == [seq for seq in range(1, 3 * (below + 3) + 1) if seq not in held]
    assert [(gap.first, gap.last) for gap in page.gaps] == [(held[0], held[-1])]
    assert f"s1.events.{below + 1:06d}.jsonl) is missing" in page.gaps[0].reason
