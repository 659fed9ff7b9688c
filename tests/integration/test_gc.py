"""`gz-ia gc` through the running collector (which never deletes a session it is writing, and applies
its own retention settings), `--vacuum-size`/`--vacuum-time`, and `gz-ia disk-usage`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gz_ia.client import build_event

_DAY = 86_400.0


def _age(root: Path, prefix: str, days: float) -> None:
    """Make every file of a session look last written ``days`` ago."""
    then = time.time() - days * _DAY
    for path in [*root.glob(f"sessions/{prefix}.*"), *root.glob(f"state/{prefix}.*")]:
        os.utime(path, (then, then))


def _send(collector: Any, session_id: str, count: int = 1, **fields: Any) -> list[int]:
    client = collector.client()
    try:
        return [
            client.send(
                build_event(session_id=session_id, action=f"a{n}", stage="READ", agent="t", **fields), timeout=20
            ).seq
            for n in range(count)
        ]
    finally:
        client.close()


@pytest.mark.shards(1, 2)
def test_gc_through_the_collector_keeps_a_session_it_is_writing(make_collector: Any) -> None:
    """A live session whose files look 40 days old is kept (the collector knows it wrote it); the
    next event is written after seq 1, on disk; a session the collector does not hold is removed."""
    collector = make_collector(env={"GZ_IA_RETENTION_MAX_ARCHIVES": "3"})
    assert _send(collector, "old") == [1]
    collector.restart()  # "old" is no longer held in memory: idle by every measure
    assert _send(collector, "gca") == [1]
    _age(collector.root, "gca", 40)
    _age(collector.root, "old", 40)
    text = collector.gz_ia("gc", "--older-than", "30d")
    assert text.returncode == 0, text.stderr + collector.log()
    assert not collector.session_file("old").exists()
    assert not (collector.root / "state" / "old.session.json").exists()
    assert _send(collector, "gca") == [2]
    assert [line["seq"] for line in collector.session_lines("gca")] == [1, 2], "the accepted event is on disk"
    assert "kept session gca: the collector is writing it" in text.stdout
    assert "by the collector" in text.stdout and "max_archives 3" in text.stdout
    _age(collector.root, "gca", 40)
    result = collector.gz_ia("gc", "--older-than", "30d", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["by"] == "collector"
    assert report["sessions_kept_live"] == ["gca"]
    assert report["retention"]["max_archives"] == 3, "the running collector's settings, not the defaults"
    assert (report["sessions_removed"], report["sessions_removed_count"]) == ([], 0)


def test_gc_vacuum_size_and_time_delete_the_oldest_archives(make_collector: Any) -> None:
    collector = make_collector(env={"GZ_IA_ROTATION_MAX_EVENTS": "2", "GZ_IA_ROTATION_COMPRESS": "false"})
    _send(collector, "big", 12)
    sessions = collector.root / "sessions"
    archives = sorted(path.name for path in sessions.glob("big.events.0*"))
    assert len(archives) >= 5
    _age(collector.root, "big.events.000001", 10)  # one archive closed ten days ago
    dry = collector.gz_ia("gc", "--vacuum-time", "5d", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert [item[1] for item in report["deleted"]] == [archives[0]] and report["dry_run"] is True
    assert sorted(path.name for path in sessions.glob("big.events.0*")) == archives
    assert collector.gz_ia("gc", "--vacuum-time", "5d").returncode == 0
    assert sorted(path.name for path in sessions.glob("big.events.0*")) == archives[1:]
    done = collector.gz_ia("gc", "--vacuum-size", "1", "--json")  # less than the active file alone
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {item[3] for item in report["deleted"]} == {"max_root_bytes"}
    assert report["retention"]["max_root_bytes"] == 1
    assert not list(sessions.glob("big.events.0*")), "every archive goes (an active file never would)"
    assert _send(collector, "big") == [13]
    usage = json.loads(collector.gz_ia("disk-usage", "--json").stdout)
    assert usage["sessions"][0]["archives"] == 0
    bad = collector.gz_ia("gc", "--vacuum-size", "lots")
    assert bad.returncode == 2 and "--vacuum-size" in bad.stderr


def test_gc_without_a_collector_runs_by_itself(make_collector: Any) -> None:
    collector = make_collector()
    _send(collector, "old")
    collector.stop()
    _age(collector.root, "old", 40)
    result = collector.gz_ia("gc", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["by"] == "gz-ia" and report["sessions_removed"] == ["old"]
    assert not collector.session_file("old").exists()


def test_gc_by_itself_never_deletes_in_a_root_another_collector_writes(make_collector: Any, short_tmp: Path) -> None:
    """Asked on a socket where nothing answers, gz-ia deletes by itself only in a root no collector
    writes: the root's lock names the collector that does, and nothing is deleted."""
    collector = make_collector()
    _send(collector, "old")
    collector.restart()
    assert _send(collector, "live") == [1]
    _age(collector.root, "old", 40)
    result = collector.gz_ia("--socket", str(short_tmp / "nobody.sock"), "gc", "--older-than", "30d")
    assert result.returncode == 69, result.stdout + result.stderr
    assert "another collector writes" in result.stderr and str(collector.socket) in result.stderr
    assert collector.session_file("old").exists(), "nothing was deleted"
    assert _send(collector, "live") == [2]


def test_disk_usage_per_root_and_per_session(make_collector: Any, tmp_path: Path) -> None:
    collector = make_collector()
    _send(collector, "small", 1)
    _send(collector, "large", 5, attrs={"pad": "x" * 500})
    # Sessions and rejects count; the layout file and the writer's lock files are not data.
    files = [
        path
        for path in collector.root.rglob("*")
        if path.is_file() and path.name != "layout.json" and not path.name.endswith(".lock")
    ]
    result = collector.gz_ia("disk-usage", "--json")
    assert result.returncode == 0, result.stderr
    usage = json.loads(result.stdout)
    assert usage["root"] == str(collector.root)
    assert usage["bytes"] == sum(path.stat().st_size for path in files)
    assert [session["session_id"] for session in usage["sessions"]] == ["large", "small"]
    large = usage["sessions"][0]
    assert large["active_bytes"] == collector.session_file("large").stat().st_size
    assert large["bytes"] == large["active_bytes"] + large["archived_bytes"] + large["other_bytes"]
    assert large["last_write"].endswith("Z")
    text = collector.gz_ia("disk-usage", "-n", "1")
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"Sessions and rejects under {collector.root} take up ")
    assert lines[-1].endswith("  large") and len(lines) == 3
    missing = collector.gz_ia("--root", str(tmp_path / "nowhere" / ".harness"), "disk-usage")
    assert missing.returncode == 1 and "gz-ia:" in missing.stderr
