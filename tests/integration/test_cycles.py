"""Runs of one action open at once: each action scope is its own cycle and keeps its own outcome."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import msgspec
import pytest

from gz_ia.client import AsyncClient, Client, EventRejected, RejectReason, Status, build_event, session
from gz_ia.client.schema import StoredEvent
from gz_ia.collector.views.timeline import build_session

# The stage protocol's key and its checkpoints are the write path's: one process and shards alike.
pytestmark = pytest.mark.shards(1, 2)


def _outcomes(lines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(line["stage"], line["status"], line.get("error", "")) for line in lines]


def test_two_asyncio_tasks_in_one_action_name_both_keep_their_outcome(collector: Any) -> None:
    """Two tasks run ``async with s.action("Run tests")``; the slower one raises: both FINISH lines
    are stored, each with its scope's cycle, and ``--failed`` shows the failure."""

    async def main() -> None:
        client = AsyncClient(collector.client())
        both_started = asyncio.Event()
        first_done = asyncio.Event()
        entered = 0

        async def run(fails: bool) -> None:
            nonlocal entered
            async with s.action("Run tests"):
                entered += 1
                if entered == 2:
                    both_started.set()
                await both_started.wait()
                if fails:
                    await first_done.wait()
                    raise RuntimeError("3 tests failed")
            first_done.set()

        async with session("par", agent="agy", client=client) as s:
            results = await asyncio.gather(run(False), run(True), return_exceptions=True)
        assert isinstance(results[1], RuntimeError)
        await client.aclose()

    asyncio.run(main())
    lines = collector.session_lines("par")
    assert _outcomes(lines) == [
        ("READ", "OK", ""),
        ("READ", "OK", ""),
        ("FINISH", "OK", ""),
        ("FINISH", "FAILED", "RuntimeError: 3 tests failed"),
    ]
    first, second = lines[0]["cycle"], lines[1]["cycle"]
    assert first != second
    assert [line["cycle"] for line in lines[2:]] == [first, second]
    assert collector.rejects() == []
    failed = collector.gz_ia("logs", "--failed", "-o", "json", "-n", "all")
    assert failed.returncode == 0, failed.stderr
    assert "3 tests failed" in failed.stdout
    stored = [
        msgspec.json.decode(line, type=StoredEvent) for line in collector.session_file("par").read_bytes().splitlines()
    ]
    spans = build_session("par", stored).actions
    assert [(span.status, span.first_seq, span.last_seq) for span in spans] == [
        (Status.OK, 1, 3),
        (Status.FAILED, 2, 4),
    ]


def test_threads_running_one_action_name_each_keep_their_outcome(collector: Any) -> None:
    """Eight threads each run the same action name at once, half of them failing: every outcome is stored."""
    client = collector.client()
    barrier = threading.Barrier(8)
    with session("threads", agent="agy", client=client) as s:

        def run(index: int) -> None:
            with s.action("Run tests") as act:
                barrier.wait(timeout=30)
                if index % 2:
                    act.fail(f"thread {index} failed")

        workers = [threading.Thread(target=run, args=(index,)) for index in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    client.close()
    lines = collector.session_lines("threads")
    finishes = [line for line in lines if line["stage"] == "FINISH"]
    assert sorted(line.get("error", "") for line in finishes) == [""] * 4 + [
        f"thread {index} failed" for index in (1, 3, 5, 7)
    ]
    assert len({line["cycle"] for line in lines}) == 8
    assert collector.rejects() == []


def test_an_open_cycle_survives_a_restart_and_a_rotation_by_its_id(make_collector: Any) -> None:
    """Two runs of one action are open when the collector rotates and restarts: each FINISH still finds
    its own cycle, and a FINISH naming a cycle that is not open is refused."""
    collector = make_collector()
    collector.write_config("[rotation]\nmax_events = 2\n")
    collector.restart()
    client = collector.client()

    def send(stage: str, cycle: str | None, **fields: Any) -> int:
        event = build_event(session_id="rot", action="Run tests", stage=stage, agent="agy", cycle=cycle, **fields)
        return int(client.send(event).seq)

    assert send("READ", "one") == 1
    assert send("READ", "two") == 2
    assert send("PENDING", "one") == 3  # the first segment rotated after seq 2
    client.close()
    collector.stop()  # its last checkpoint covers the whole file: `sessions` reads it alone
    listed = collector.gz_ia("sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    (summary,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert summary["open_actions"] == 2
    collector.start()
    client = collector.client()
    assert send("FINISH", "two", status="FAILED", error="boom") == 4
    with pytest.raises(EventRejected) as caught:
        send("FINISH", "two")
    assert caught.value.reason is RejectReason.FINISH_WITHOUT_START
    with pytest.raises(EventRejected) as caught:
        send("READ", "one")  # one is PENDING: its own cycle cannot go back
    assert caught.value.reason is RejectReason.BACKWARD_TRANSITION
    assert send("FINISH", "one") == 5
    client.close()
    segments = [path.name for path in (collector.root / "sessions").iterdir() if path.name.startswith("rot.")]
    assert len(segments) > 1, segments  # it did rotate


def test_events_without_a_cycle_keep_one_cycle_per_action_name(collector: Any) -> None:
    """Without ``cycle`` the rules are as before: a second READ joins the open cycle, one FINISH closes it."""
    client: Client = collector.client()

    def send(stage: str, cycle: str | None = None) -> int:
        return client.send(build_event(session_id="plain", action="a", stage=stage, agent="agy", cycle=cycle)).seq

    assert send("READ") == 1
    assert send("READ") == 2
    assert send("FINISH") == 3
    with pytest.raises(EventRejected) as caught:
        send("FINISH")
    assert caught.value.reason is RejectReason.FINISH_WITHOUT_START
    assert send("READ", "c1") == 4  # a cycle with an id is another cycle than the unnamed one
    with pytest.raises(EventRejected) as caught:
        send("FINISH")
    assert caught.value.reason is RejectReason.FINISH_WITHOUT_START
    assert send("FINISH", "c1") == 5
    client.close()
