"""``gz-ia logs -f`` through the collector's stream and through the files: the same output.

Two followers of the same real agent: one whose ``GZ_IA_SOCKET`` names the running collector (it
subscribes, which the collector's status shows) and one whose socket names nothing (it polls the
files). Both must print exactly the same lines, history and live, in the same order.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Follower, send_events, wait_for
from tests.integration.live_agents import Agent

from gz_ia.client import build_event


@pytest.fixture(name="agent")
def _agent(collector: Any) -> Any:
    started = Agent(collector, "live-top")
    yield started
    started.close()


def _subscribers(collector: Any) -> int:
    report = json.loads(collector.gz_ia("status", "--json").stdout)
    return int(report["live"]["subscribers"])


@pytest.mark.parametrize(
    "args",
    [("logs", "-f", "-o", "json"), ("session", "logs", "live-top", "--tree", "-f", "-o", "json")],
    ids=["all", "tree"],
)
def test_stream_and_files_print_the_same(collector: Any, agent: Any, args: tuple[str, ...], short_tmp: Path) -> None:
    """A follower on the stream and one on the files print the same lines, history then live."""
    files_only = types.SimpleNamespace(env={**collector.env, "GZ_IA_SOCKET": str(short_tmp / "nothing.sock")})
    streamed = Follower(collector, *args)
    polled = Follower(files_only, *args)
    try:
        history = [streamed.take(5), polled.take(5)]
        assert history[0] == history[1]
        wait_for(lambda: _subscribers(collector) == 1, message="the streamed follower's subscription")
        for command in ("step look", "fail build", "burst 40", "finish"):
            agent.do(command)
        live = [streamed.take(45), polled.take(45)]
        assert live[0] == live[1]
        assert [record["action"] for record in live[0][:4]] == ["look", "look", "build", "build"]
        assert live[0][3]["status"] == "FAILED" and live[0][-1]["action"] == "deploy"
    finally:
        streamed.finish()
        polled.finish()


def test_a_follower_that_lagged_reads_the_gap_from_the_files(collector: Any) -> None:
    """A subscriber that does not read while 6,000 events are written (past the ring's 2,048) gets a
    lagged notice; the follower fills it from the files: every event once, in seq order."""
    from gz_ia.client.live import Gap, Subscriber
    from gz_ia.collector import reading
    from gz_ia.collector.live.follow import follow_live

    send_events(collector, [build_event(session_id="lag", action="a", stage="READ", agent="t")])
    cursor = reading.end_cursor(collector.root, "lag")
    probe = Subscriber(collector.root, socket_path=collector.socket)
    live = Subscriber(collector.root, socket_path=collector.socket)
    send_events(collector, [build_event(session_id="lag", action="a", stage="READ", agent="t") for _ in range(6000)])
    probe.settimeout(30)
    seen: list[Any] = []
    while not any(isinstance(item, Gap) for item in seen):
        seen += probe.receive()  # the same pace as ``live``: it lagged too
    probe.close()
    entries = follow_live(live, collector.root, ["lag"], cursor=cursor)
    seqs = [next(entries).event.seq for _ in range(6000)]
    entries.close()
    assert seqs == list(range(2, 6002))
    assert collector.metric("gzia_live_evicted_frames_total") == 6000 - 2048  # kept from the first subscription on
