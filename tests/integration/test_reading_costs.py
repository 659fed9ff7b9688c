"""What a read costs must not grow with the session when the answer does not: ``--seq`` seeks, a
``--failed`` the checkpoint answers reads only what follows it, and a reader keeps few archives.

Segments a read must not touch are replaced by directories: a reader that opened one would say it is
unreadable (a gap, exit 3), so the exit code and stderr tell which path the read took.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import increasing_timestamps, send_events

from gz_ia.client import build_event
from gz_ia.client.schema import Status
from gz_ia.collector import reading as reader
from gz_ia.collector.storage import gzip_cache

ROTATING = {"GZ_IA_ROTATION_MAX_BYTES": "4096", "GZ_IA_ROTATION_COMPRESS": "true"}
_CLOCK = increasing_timestamps()


def _cycles(session_id: str, count: int, *, fail_at: int | None = None) -> list[Any]:
    events = []
    for index in range(count):
        stage = ("READ", "PENDING", "FINISH")[index % 3]
        failed = fail_at is not None and index >= fail_at and stage == "FINISH" and index < fail_at + 3
        events.append(
            build_event(
                session_id=session_id,
                action=f"task-{index // 3}",
                stage=stage,
                status="FAILED" if failed else "OK",
                error="exit 1" if failed else None,
                agent="claude",
                timestamp=next(_CLOCK),
            )
        )
    return events


def _archives(root: Path, session_id: str) -> dict[int, tuple[Path, list[int]]]:
    """Each archive of the session by number: its path and the seqs it holds."""
    found: dict[int, tuple[Path, list[int]]] = {}
    for path in (root / "sessions").glob(f"{session_id}.events.0*"):
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        found[int(path.name.split(".")[2])] = (path, [json.loads(line)["seq"] for line in data.splitlines()])
    return found


def _unreadable(path: Path) -> None:
    """Put a directory where the segment was: reading it would be a gap."""
    path.unlink()
    path.mkdir()


def _seqs(result: Any) -> list[int]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line)["seq"] for line in result.stdout.splitlines()]


@pytest.fixture(name="stored")
def _stored(make_collector: Any) -> Any:
    """A stopped collector's root: ``calm`` (155 events, never failed) and ``stormy`` (150, its seq 6
    FAILED), both rotated into compressed archives every 30 events or so, checkpoints written at exit."""
    collector = make_collector(env=ROTATING)
    send_events(collector, [*_cycles("calm", 155), *_cycles("stormy", 150, fail_at=3)], per_batch=10)
    assert len(_archives(collector.root, "calm")) >= 4
    collector.stop()
    return collector


def test_seq_reads_only_the_segments_from_the_one_holding_it(stored: Any) -> None:
    """--seq N and N..M find the events by number: older archives are never opened."""
    archives = _archives(stored.root, "calm")
    # Near the end of the next-to-newest archive: a range of four runs into the next segment and
    # stays within what is written, wherever rotation fell.
    target = sorted(seqs[-1] for _path, seqs in archives.values())[-2] - 1
    for path, seqs in archives.values():
        if seqs[-1] < target - 1:
            _unreadable(path)
    assert _seqs(stored.gz_ia("session", "logs", "calm", "--seq", str(target), "--json")) == [target]
    span = stored.gz_ia("session", "logs", "calm", "--seq", f"{target}..{target + 3}", "--json")
    assert _seqs(span) == list(range(target, target + 4))  # into the next segment
    assert span.stderr == ""
    newest_first = stored.gz_ia("session", "logs", "calm", "--seq", f"{target}..{target + 3}", "-r", "--json")
    assert _seqs(newest_first) == list(range(target + 3, target - 1, -1))
    last = stored.gz_ia("session", "logs", "calm", "--seq", f"{target}..{target + 3}", "-n", "1", "--json")
    assert [json.loads(line)["seq"] for line in last.stdout.splitlines()] == [target + 3]
    human = stored.gz_ia("session", "logs", "calm", "--seq", str(target + 1), "--color", "never")
    assert human.returncode == 0, human.stderr
    assert f"task-{target // 3}" in human.stdout
    beyond = stored.gz_ia("session", "logs", "calm", "--seq", "154..157", "--json")
    assert beyond.returncode == 1
    assert [json.loads(line)["seq"] for line in beyond.stdout.splitlines()] == [154, 155]
    assert "seq 156..157 not written yet (newest: seq 155)" in beyond.stderr


def test_seq_older_than_every_retained_event_reads_from_the_oldest(stored: Any) -> None:
    """A range that begins before the oldest retained event shows what is left of it and names the rest."""
    archives = _archives(stored.root, "calm")
    oldest = min(archives)
    archives[oldest][0].unlink()  # retention's work: the history now starts later
    first = archives[min(number for number in archives if number != oldest)][1][0]
    result = stored.gz_ia("session", "logs", "calm", "--seq", f"1..{first + 1}", "--json")
    assert result.returncode == 1
    assert [json.loads(line)["seq"] for line in result.stdout.splitlines()] == [first, first + 1]
    assert f"seq 1..{first - 1} not retained" in result.stderr


def test_failed_on_a_session_that_never_failed_reads_only_past_its_checkpoint(stored: Any) -> None:
    """The checkpoint says 0 failures: no archive is read, yet a failure written after it is shown."""
    for path, _seqs_held in _archives(stored.root, "calm").values():
        _unreadable(path)
    none = stored.gz_ia("session", "logs", "calm", "--failed", "--json")
    assert (none.returncode, none.stdout, none.stderr) == (0, "", "")
    assert stored.gz_ia("session", "logs", "calm", "--failed", "-n", "3", "--json").returncode == 0
    # A collector that died right after a write leaves lines its checkpoint does not cover.
    active = stored.root / "sessions" / "calm.events.jsonl"
    lines = active.read_bytes().splitlines()
    record = json.loads(lines[-1])
    record.update(seq=record["seq"] + 1, stage="FINISH", status="FAILED", error="late")
    late = json.dumps(record, separators=(",", ":")).encode()
    with active.open("ab") as file:
        file.write(late + b"\n")
    for args in (("--failed",), ("--failed", "-n", "5"), ("--failed", "-r"), ("--status", "FAILED")):
        shown = stored.gz_ia("session", "logs", "calm", *args, "--json")
        assert (shown.returncode, shown.stdout.encode(), shown.stderr) == (0, late + b"\n", ""), args


def test_failed_with_failures_still_reads_every_segment(stored: Any) -> None:
    """A session whose checkpoint counts failures is read in full: the early failure is found."""
    shown = stored.gz_ia("session", "logs", "stormy", "--failed", "--json")
    assert _seqs(shown) == [6]
    calm_and_failed = stored.gz_ia("session", "logs", "calm", "--status", "FAILED", "--status", "OK", "--json")
    assert len(_seqs(calm_and_failed)) == 155


def test_failed_pages_of_the_reader_skip_what_the_checkpoint_covers(stored: Any) -> None:
    """read_page and a follower's pages take the same path: an unreadable archive is not even noticed."""
    for path, _seqs_held in _archives(stored.root, "calm").values():
        _unreadable(path)
    only_failed = reader.Filters(statuses=frozenset({Status.FAILED}))
    for reverse in (False, True):
        page = reader.read_page(stored.root, "calm", filters=only_failed, reverse=reverse)
        assert (page.entries, page.incomplete, page.end) == ([], False, True)
    everything = reader.read_page(stored.root, "calm", limit=1000)
    assert everything.incomplete  # the archives are unreadable for any other question


def test_a_reader_keeps_at_most_two_decompressed_archives(stored: Any) -> None:
    """Reading a whole session of many compressed archives holds no more than two of them afterwards."""
    assert len(_archives(stored.root, "calm")) >= 4
    seen = [entry.event.seq for entry in reader.iter_events(stored.root, "calm", page_size=7)]
    assert seen == list(range(1, 156))
    assert gzip_cache.cached() <= 2
    assert reader.event_at(stored.root, "calm", 1) is not None
    assert gzip_cache.cached() <= 2
