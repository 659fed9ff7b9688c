"""Following live sessions through real processes: rotation, collector restarts, new sessions, pipes, Ctrl-C."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
from typing import Any

import pytest
from tests.conftest import Follower, send_events

from gz_ia.client import build_event

ROTATING = {"GZ_IA_ROTATION_MAX_BYTES": "4096", "GZ_IA_ROTATION_COMPRESS": "true"}
_BOUND = 30.0
"""Safety bound (seconds) on waiting for output; a passing run needs a fraction of it."""


def _send(collector: Any, session_id: str, first: int, count: int) -> None:
    """Send events ``first`` to ``first + count - 1`` of a session in one batch; wait for every verdict."""
    send_events(
        collector,
        [
            build_event(session_id=session_id, action=f"task-{index // 3}", stage=stage, agent="claude")
            for index in range(first, first + count)
            for stage in [("READ", "PENDING", "FINISH")[index % 3]]
        ],
        per_batch=10,  # the collector rotates at most once per batch: keep rotating every few batches
    )


def _ready(follower: Follower, collector: Any, session_id: str, first: int) -> int:
    """Send one event at a time until the follower shows one (it is then following); return the next index.

    Events sent before the follower took its starting point are never shown; every later one is.
    """
    index = first
    while True:
        _send(collector, session_id, index, 1)
        index += 1
        try:
            shown = json.loads(follower.lines.get(timeout=0.5))
        except queue.Empty:
            if index - first > 60:
                follower.finish()
                pytest.fail("the follower never showed an event")
            continue
        follower.take(index - shown["seq"])  # events sent after the first shown one
        return index


def test_follow_survives_rotation_and_a_collector_restart(make_collector: Any, follow: Any) -> None:
    """session logs -f sees every event once, in order, across many rotations and a collector restart."""
    collector = make_collector(env=ROTATING)
    _send(collector, "s1", 0, 30)
    follower = follow(collector, "session", "logs", "s1", "-f", "--json", "-n", "5")
    head = follower.take(5)
    assert [record["seq"] for record in head] == [26, 27, 28, 29, 30]
    _send(collector, "s1", 30, 60)
    collector.restart()
    _send(collector, "s1", 90, 60)
    records = follower.take(120)
    assert [record["seq"] for record in records] == list(range(31, 151))
    archives = [path for path in (collector.root / "sessions").iterdir() if path.name.startswith("s1.events.0")]
    assert len(archives) >= 4
    code, stderr = follower.interrupt()
    assert code == 0
    assert "Traceback" not in stderr
    assert follower.lines.empty()


def test_follow_after_a_crash_holds_back_nothing_twice(make_collector: Any, follow: Any) -> None:
    """A SIGKILLed collector restarted mid-follow: the follower neither repeats nor loses events."""
    collector = make_collector(env=ROTATING)
    _send(collector, "s1", 0, 10)
    follower = follow(collector, "session", "logs", "s1", "-f", "--json", "-n", "all")
    assert [record["seq"] for record in follower.take(10)] == list(range(1, 11))
    collector.kill()
    collector.start()
    _send(collector, "s1", 10, 40)
    assert [record["seq"] for record in follower.take(40)] == list(range(11, 51))
    follower.interrupt()


def test_logs_follow_picks_up_a_new_session(make_collector: Any, follow: Any) -> None:
    """gz-ia logs -f shows a session that starts after it, from its first event, plus the old ones."""
    collector = make_collector(env=ROTATING)
    _send(collector, "old", 0, 3)
    follower = follow(collector, "logs", "-f", "--json", "-n", "0")
    index = _ready(follower, collector, "old", 3)
    _send(collector, "brand-new", 0, 40)
    _send(collector, "old", index, 2)
    records = follower.take(42)
    new = [record["seq"] for record in records if record["session_id"] == "brand-new"]
    old = [record["seq"] for record in records if record["session_id"] == "old"]
    assert new == list(range(1, 41))
    assert old == [index + 1, index + 2]
    follower.interrupt()


def test_tree_follow_adds_subagents_that_start_later(make_collector: Any, follow: Any) -> None:
    """session logs --tree -f includes a subagent session created after the follow started."""
    collector = make_collector()
    _send(collector, "boss", 0, 3)
    follower = follow(collector, "session", "logs", "boss", "--tree", "-f", "--json", "-n", "0")
    index = _ready(follower, collector, "boss", 3)
    client = collector.client()
    try:
        for stage in ("READ", "FINISH"):
            client.send(build_event(session_id="helper", parent_session_id="boss", action="x", stage=stage,
                                    agent="claude"), timeout=10)  # fmt: skip
        client.send(build_event(session_id="stranger", action="x", stage="READ", agent="claude"), timeout=10)
        client.send(build_event(session_id="boss", action="late", stage="READ", agent="claude"), timeout=10)
    finally:
        client.close()
    records = follower.take(3)
    assert sorted((record["session_id"], record["seq"]) for record in records) == [
        ("boss", index + 1), ("helper", 1), ("helper", 2),
    ]  # fmt: skip
    follower.interrupt()


def test_tree_follow_adds_subagents_of_a_middle_session_that_never_logged(make_collector: Any, follow: Any) -> None:
    """session logs --tree -f from the root includes a subagent whose parent never logged: its events
    name the root of their tree."""
    collector = make_collector()
    _send(collector, "boss", 0, 3)
    follower = follow(collector, "session", "logs", "boss", "--tree", "-f", "--json", "-n", "0")
    _ready(follower, collector, "boss", 3)
    client = collector.client()
    try:
        for stage in ("READ", "FINISH"):
            client.send(build_event(session_id="grandchild", parent_session_id="middle", root_session_id="boss",
                                    action="x", stage=stage, agent="claude"), timeout=10)  # fmt: skip
        client.send(build_event(session_id="stranger", parent_session_id="middle", root_session_id="other",
                                action="x", stage="READ", agent="claude"), timeout=10)  # fmt: skip
    finally:
        client.close()
    records = follower.take(2)
    assert [(record["session_id"], record["seq"]) for record in records] == [("grandchild", 1), ("grandchild", 2)]
    follower.interrupt()


def test_follow_into_a_closed_pipe_ends_quietly(make_collector: Any) -> None:
    """gz-ia logs -f | head -n 1 ends without a traceback once head has gone and an event arrives."""
    collector = make_collector()
    _send(collector, "s1", 0, 3)
    command = [sys.executable, "-c", "from gz_ia.collector.cli import main; main()"]
    gz = subprocess.Popen(
        [*command, "session", "logs", "s1", "-f", "-n", "1"],
        env=collector.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    head = subprocess.Popen(["head", "-n", "1"], stdin=gz.stdout, stdout=subprocess.PIPE)
    assert gz.stdout is not None
    gz.stdout.close()
    first = head.communicate(timeout=_BOUND)[0]
    assert b"FINISH" in first
    _send(collector, "s1", 3, 3)  # the next write meets the closed pipe
    try:
        code = gz.wait(_BOUND)
    except subprocess.TimeoutExpired:
        gz.kill()
        pytest.fail("gz-ia kept running after its reader went away")
    assert gz.stderr is not None
    stderr = gz.stderr.read().decode()
    gz.stderr.close()
    assert code == 0
    assert "Traceback" not in stderr
    assert "BrokenPipe" not in stderr


def test_reading_into_a_closed_pipe_ends_quietly(make_collector: Any) -> None:
    """gz-ia session logs | head -n 2 on a long session ends quietly (exit 0, no traceback)."""
    collector = make_collector()
    _send(collector, "s1", 0, 300)
    pipeline = subprocess.run(  # noqa: S602 - a fixed test pipeline: bash gives PIPESTATUS
        f"'{sys.executable}' -c 'from gz_ia.collector.cli import main; main()' session logs s1 --json 2>err.txt"
        " | head -n 2; echo \"${PIPESTATUS[0]}\" > status.txt",
        shell=True, executable="/bin/bash", cwd=collector.base, env=collector.env,
        capture_output=True, text=True, timeout=_BOUND, check=True,
    )  # fmt: skip
    assert len(pipeline.stdout.splitlines()) == 2
    assert (collector.base / "status.txt").read_text().strip() == "0"
    assert "Traceback" not in (collector.base / "err.txt").read_text()


def test_ctrl_c_stops_a_follower_of_a_suite_started_with_sigint_ignored(make_collector: Any, follow: Any) -> None:
    """A suite started with ``&`` from a script runs with SIGINT ignored: the follow fixture gives its
    followers SIGINT's default action back, as a terminal would, so Ctrl-C still stops them."""
    import signal

    collector = make_collector()
    _send(collector, "s1", 0, 3)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        follower = follow(collector, "session", "logs", "s1", "-f", "--json", "-n", "1")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert follower.take(1)[0]["seq"] == 3
    code, stderr = follower.interrupt()
    assert code == 0, stderr
