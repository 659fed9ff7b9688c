"""`gz-ia status` against a real collector: readable text, --json, and exit 69 when none runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CollectorProcess

from gz_ia.client import EventRejected, build_event
from gz_ia.collector.cli._common import EXIT_UNAVAILABLE, version
from gz_ia.collector.metrics import root_id

# The write and delivery path: run against one process and against a sharded collector.
pytestmark = pytest.mark.shards(1, 2)


def _proc(collector: CollectorProcess) -> subprocess.Popen[bytes]:
    assert collector.proc is not None, "the collector was never started"
    return collector.proc


@pytest.fixture(name="busy")
def _busy(collector: CollectorProcess) -> CollectorProcess:
    """A collector that has written three events (one session left open) and rejected one."""
    client = collector.client()
    try:
        for stage in ("READ", "PENDING"):
            client.send(build_event(session_id="st-1", action="work", stage=stage, agent="test"), timeout=20)
        client.send(build_event(session_id="st-2", action="open", stage="READ", agent="test"), timeout=20)
        with pytest.raises(EventRejected):
            client.send(build_event(session_id="st-3", action="x", stage="FINISH", agent="test"), timeout=20)
    finally:
        client.close()
    return collector


def test_status_json_reports_health_version_roots_and_counters(busy: CollectorProcess) -> None:
    """gz-ia status --json reports health, version, pid, uptime, the root served, sessions and counters."""
    result = busy.gz_ia("status", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["healthy"] is True
    assert report["version"] == version()
    assert report["pid"] == _proc(busy).pid
    assert report["uptime_seconds"] >= 0
    assert report["roots"] == [
        {"path": str(busy.root), "id": root_id(busy.root), "sessions_loaded": 3, "open_sessions": 2}
    ]
    counters = report["counters"]
    assert (counters["received"], counters["written"], counters["rejected"]) == (4, 3, 1)
    assert counters["rejected_by_reason"] == {"finish_without_start": 1}
    assert (counters["duplicates"], counters["write_errors"]) == (0, 0)
    assert report["config"]["durability"] == report["durability"] == "os"


def test_status_text_is_readable(busy: CollectorProcess) -> None:
    """gz-ia status prints one readable line each for health, connections, roots and counters."""
    result = busy.gz_ia("status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"gz-ia collector {version()}: healthy, pid {_proc(busy).pid}, up ")
    assert lines[0].endswith("durability os")
    assert f"root {busy.root} (id {root_id(busy.root)}): 3 sessions loaded, 2 with open actions" in lines
    assert "events: received 4, written 3, rejected 1, duplicates 0, write_errors 0, redacted 0" in lines
    assert "  rejected finish_without_start: 1" in lines
    shares = [line for line in lines if line.startswith("shares: ")]
    if busy.shards > 1:  # the shares' pids are theirs, the front's is on the first line
        (line,) = shares
        assert line.startswith(f"shares: {busy.shards}, restarts 0, pids ")
        assert str(_proc(busy).pid) not in line.split("pids ")[1].split(", ")
    else:
        assert shares == []


def test_status_without_collector_exits_69(short_tmp: Path, collector: CollectorProcess) -> None:
    """With nothing listening on the socket, gz-ia status (text or --json) and gz-ia ui exit 69, say
    so, and say both ways to start a collector, as gz-ia session log does."""
    missing = short_tmp / "nobody-here.sock"
    for command in (
        ("status",),
        ("status", "--json"),
        ("ui", "--no-browser"),
        ("session", "log", "s", "--action", "a", "--stage", "READ", "--agent", "a"),
    ):
        result = collector.gz_ia("--socket", str(missing), *command)
        assert result.returncode in (EXIT_UNAVAILABLE, 75), (command, result.stderr)
        assert result.stdout == ""
        assert f"no collector is reachable at {missing}" in result.stderr
        assert "Start one with `gz-ia-collector` or `systemctl --user start gz-ia-collector.socket`." in result.stderr


def test_a_fresh_empty_root_has_no_sessions_for_every_command(short_tmp: Path, collector: CollectorProcess) -> None:
    """``mkdir .harness`` (as the guide suggests) is a root with no sessions: nothing fails on it, and
    disk-usage into a closed pipe ends quietly, as the readers do."""
    root = short_tmp / "fresh" / ".harness"
    root.mkdir(parents=True)
    env = {**collector.env, "GZ_IA_ROOT": str(root), "GZ_IA_SOCKET": str(short_tmp / "nobody-here.sock")}
    for command in (["disk-usage"], ["disk-usage", "--json"], ["gc", "--dry-run"], ["sessions"], ["logs"]):
        result = collector.gz_ia(*command, env=env)
        assert result.returncode == 0, (command, result.stderr)
        assert "cannot open" not in result.stderr
    assert "0 session(s)" in collector.gz_ia("disk-usage", env=env).stdout


def test_disk_usage_into_a_closed_pipe_ends_quietly(collector: CollectorProcess) -> None:
    """``gz-ia disk-usage | head -1`` exits 0 with no traceback, as the readers do (more sessions
    than a pipe's buffer holds, so the write meets the closed pipe)."""
    from tests.conftest import send_events

    events = [build_event(session_id=f"s{index:05d}", action="a", stage="READ", agent="a") for index in range(1500)]
    send_events(collector, events)
    command = f"{sys.executable} -c 'from gz_ia.collector.cli import main; main()' disk-usage | head -1"
    piped = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        env=collector.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    assert "Traceback" not in piped.stderr


def test_status_after_collector_stopped_exits_69(collector: CollectorProcess) -> None:
    """Once the collector has exited, gz-ia status on its socket exits 69."""
    assert collector.stop() == 0
    result = collector.gz_ia("status")
    assert result.returncode == EXIT_UNAVAILABLE
    assert "no collector is reachable" in result.stderr


def test_status_shows_the_limits_in_effect(make_collector: Any) -> None:
    """Under ``ulimit -n 256`` the collector lowers max_open_files to 192; gz-ia status shows 192 (and
    the descriptor limit), not the configured 65536."""
    collector: CollectorProcess = make_collector(start=False)
    collector.prefix = ["prlimit", "--nofile=256", "--"]
    collector.start()
    report = json.loads(collector.gz_ia("status", "--json").stdout)
    assert report["config"]["max_open_files"] == 65536
    assert report["limits"]["max_open_files"] == 192
    assert report["limits"]["descriptor_limit"] == 256
    text = collector.gz_ia("status").stdout.splitlines()
    (line,) = [line for line in text if line.startswith("limits: ")]
    assert "max_open_files 192, descriptor_limit 256" in line
    assert f"metrics: http://127.0.0.1:{collector.metrics_port}/metrics" in text
