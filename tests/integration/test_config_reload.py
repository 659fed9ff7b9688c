"""SIGHUP reload of a real collector: new limits apply, bad files are refused, nothing is dropped."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
from tests.conftest import CollectorProcess, wait_for

from gz_ia.client import EventRejected, RejectReason, build_event

# The write and delivery path: run against one process and against a sharded collector.
pytestmark = pytest.mark.shards(1, 2)


def _proc(collector: CollectorProcess) -> subprocess.Popen[bytes]:
    assert collector.proc is not None, "the collector was never started"
    return collector.proc


def _reload(collector: CollectorProcess, expect: str) -> None:
    """Send SIGHUP and wait for one more line of the collector's own log containing ``expect`` (a
    sharded collector's shares each log their own "configuration reloaded" before the front)."""
    before = len(collector.log_lines(expect))
    _proc(collector).send_signal(signal.SIGHUP)
    wait_for(lambda: len(collector.log_lines(expect)) > before, timeout=20, message=f"{expect!r} in the collector log")
    assert _proc(collector).poll() is None, collector.log()


def _status(collector: CollectorProcess) -> dict[str, Any]:
    result = collector.gz_ia("status", "--json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def _open(client: Any, session_id: str, action: str) -> None:
    client.send(build_event(session_id=session_id, action=action, stage="READ", agent="test"), timeout=20)


def _metric(collector: CollectorProcess, name: str) -> float:
    for line in collector.metrics().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


@pytest.fixture(name="limited")
def _limited(make_collector: Any) -> CollectorProcess:
    """A real collector started from a config file allowing two open actions per session."""
    collector: CollectorProcess = make_collector(start=False)
    collector.write_config("max_open_actions = 2\n")
    collector.start()
    return collector


def test_sighup_applies_new_limits_on_the_same_connection(limited: CollectorProcess) -> None:
    """After SIGHUP a raised max_open_actions applies at once, on a connection that stayed up."""
    client = limited.client()
    try:
        _open(client, "s", "a1")
        _open(client, "s", "a2")
        with pytest.raises(EventRejected) as info:
            _open(client, "s", "a3")
        assert info.value.reason == RejectReason.TOO_MANY_OPEN_ACTIONS
        limited.write_config('max_open_actions = 5\nmax_backlog_batches = 8\nlog_level = "debug"\n')
        _reload(limited, "configuration reloaded")
        _open(client, "s", "a3")
        assert client.stats().reconnects == 0
        assert client.stats().connected
    finally:
        client.close()
    config = _status(limited)["config"]
    assert (config["max_open_actions"], config["max_backlog_batches"], config["log_level"]) == (5, 8, "debug")
    assert [line["action"] for line in limited.session_lines("s")] == ["a1", "a2", "a3"]
    assert _metric(limited, 'gzia_config_reloads_total{result="applied"}') == 1
    assert _metric(limited, "gzia_config_last_reload_successful") == 1


def test_flags_and_environment_keep_winning_after_reload(make_collector: Any) -> None:
    """A reload re-reads the file but start-up flags and GZ_IA_* variables still override it."""
    collector = make_collector(
        "--durability", "fsync", "--max-open-files", "16", start=False, env={"GZ_IA_MAX_BACKLOG_BATCHES": "3"}
    )
    collector.write_config("max_open_actions = 2\n")
    collector.start()
    collector.write_config(
        'durability = "os"\nmax_open_files = 100\nmax_backlog_batches = 50\nmax_open_actions = 7\n'
        "[rotation]\nmax_bytes = 1048576\n[retention]\nmax_archives = 4\n",
    )
    _reload(collector, "configuration reloaded")
    config = _status(collector)["config"]
    assert config["durability"] == "fsync"  # flag
    assert config["max_open_files"] == 16  # flag
    assert config["max_backlog_batches"] == 3  # environment
    assert config["max_open_actions"] == 7  # file
    assert config["rotation"]["max_bytes"] == 1048576
    assert config["retention"]["max_archives"] == 4


def test_bad_config_is_refused_and_the_old_one_kept(limited: CollectorProcess) -> None:
    """A reload with an unknown key logs a clear refusal and keeps serving with the old limits."""
    client = limited.client()
    try:
        _open(client, "s", "a1")
        limited.write_config("max_open_actions = 50\nmax_open_action = 60\n")
        _reload(limited, "reload refused")
        refusal = next(line for line in limited.log().splitlines() if "reload refused" in line)
        assert "unknown key 'max_open_action'" in refusal
        assert "did you mean 'max_open_actions'?" in refusal
        assert "keeping the running configuration" in refusal
        # gz-ia status shows the refusal (text and JSON) until a reload succeeds.
        assert "unknown key 'max_open_action'" in _status(limited)["config_reload_refused"]
        shown = limited.gz_ia("status")
        assert "config reload refused" in shown.stdout and "max_open_action'" in shown.stdout, shown.stdout
        _open(client, "s", "a2")  # the connection is still up and events still land
        with pytest.raises(EventRejected):
            _open(client, "s", "a3")  # the old limit of 2 still holds
        assert _metric(limited, "gzia_config_last_reload_successful") == 0
        assert _metric(limited, 'gzia_config_reloads_total{result="refused"}') == 1

        limited.write_config('max_open_actions = "many"\n')
        _reload(limited, "reload refused")
        assert "bad value for max_open_actions" in limited.log().splitlines()[-1]

        limited.write_config("max_open_actions = 3\n")
        _reload(limited, "configuration reloaded")
        _open(client, "s", "a3")
        assert client.stats().reconnects == 0
    finally:
        client.close()
    assert _status(limited)["config"]["max_open_actions"] == 3
    assert _status(limited)["config_reload_refused"] is None
    assert "config reload refused" not in limited.gz_ia("status").stdout
    assert _metric(limited, "gzia_config_last_reload_successful") == 1


def test_reloads_under_load_drop_no_event(make_collector: Any) -> None:
    """Events sent while the collector reloads five times all land, in order, without a reconnect."""
    collector = make_collector()
    client = collector.client()
    stop = threading.Event()
    sent: list[int] = []

    def produce() -> None:
        index = 0
        while not stop.is_set():
            client.log(session_id="load", action=f"a{index}", stage="PENDING", agent="test")
            sent.append(index)
            index += 1
            if index % 20 == 0:
                time.sleep(0.002)  # pacing only: keep the stream going across every reload

    def landed() -> int:
        # Complete lines only: the collector may be mid-write while the test looks.
        path = collector.session_file("load")
        return path.read_bytes().count(b"\n") if path.exists() else 0

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_for(lambda: landed() > 0, timeout=20, message="the first events to land")
        before = landed()
        for round_ in range(5):
            collector.write_config(f"max_open_actions = {100_000 + round_}\nmax_backlog_batches = {10 + round_}\n")
            _reload(collector, "configuration reloaded")
        # The stream really overlapped the reloads: still running, and events landed meanwhile.
        assert producer.is_alive()
        assert landed() > before
    finally:
        stop.set()
        producer.join(30)
    try:
        assert client.flush(30)
        stats = client.stats()
    finally:
        client.close()
    total = len(sent)
    assert (stats.accepted, stats.rejected, stats.dropped, stats.reconnects) == (total, 0, 0, 0)
    lines = collector.session_lines("load")
    assert [line["action"] for line in lines] == [f"a{index}" for index in range(total)]
    assert [line["seq"] for line in lines] == list(range(1, total + 1))


def test_reload_hands_rotation_settings_to_the_writer(make_collector: Any) -> None:
    """A reload that lowers rotation.max_bytes makes the session file rotate on the following writes."""
    collector = make_collector()
    client = collector.client()
    try:
        padding = "x" * 200
        for index in range(5):
            client.send(
                build_event(session_id="rot", action=f"{padding}{index}", stage="PENDING", agent="test"), timeout=20
            )
        assert _metric(collector, "gzia_rotations_total") == 0
        collector.write_config("[rotation]\nmax_bytes = 4096\n")
        _reload(collector, "configuration reloaded")
        for index in range(5, 60):
            client.send(
                build_event(session_id="rot", action=f"{padding}{index}", stage="PENDING", agent="test"), timeout=20
            )
    finally:
        client.close()
    wait_for(lambda: _metric(collector, "gzia_rotations_total") >= 1, timeout=20, message="a rotation after the reload")
    assert _status(collector)["config"]["rotation"]["max_bytes"] == 4096


@pytest.mark.shards(1, 2)
def test_sighup_applies_new_redaction_rules(make_collector: Any) -> None:
    """A rule added to [redaction] and a default rule disabled apply to the next event after SIGHUP."""
    collector: CollectorProcess = make_collector(start=False)
    collector.write_config("")
    collector.start()
    client = collector.client()
    text = "itk_0123abcd with ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    try:
        _open(client, "r", f"before {text}")
        collector.write_config(
            '[redaction]\npatterns = [{name = "internal-token", pattern = "itk_[0-9a-f]{8}"}]\n'
            'disable = ["github-token"]\n'
        )
        _reload(collector, "configuration reloaded")
        _open(client, "r", f"after {text}")
    finally:
        client.close()
    assert [line["action"] for line in collector.session_lines("r")] == [
        "before itk_0123abcd with ghp_[REDACTED:github-token]",
        "after [REDACTED:internal-token] with ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    ]
    assert _metric(collector, 'gzia_redactions_total{pattern="internal-token"}') == 1
