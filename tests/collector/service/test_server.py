"""One collector process, in process (``gz_ia.collector.testing``): its connections, its status, its stop.

What the daemon does between its listening socket and its connections, seen from the objects
themselves; the same collector as a separate process is in ``tests/integration/``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from gz_ia.client.protocol import Query, Report, Verdicts
from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.collector.testing import running_collector

_encoder = msgspec.msgpack.Encoder()


def _event(action: str, session: str = "s1") -> bytes:
    return _encoder.encode(
        LogEvent(
            timestamp=datetime.now(UTC),
            session_id=session,
            action=action,
            stage=Stage.READ,
            status=Status.OK,
            agent="t",
        )
    )


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in 10 s")


async def test_connections_are_tracked_until_their_peer_hangs_up(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        first = await running.connect("aa")
        second = await running.connect("bb")
        assert len(running.collector.connections) == 2
        first.close()
        await _until(lambda: len(running.collector.connections) == 1)
        second.close()
        await _until(lambda: not running.collector.connections)


async def test_status_names_the_roots_served_and_the_connections(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        peer = await running.connect()
        await peer.send_batch(1, [_event("a"), _event("b", session="s2")])
        assert isinstance(await peer.next(), Verdicts)
        await peer.send(Query())
        report = await peer.next()
        assert isinstance(report, Report)
        assert report.data["connections"] == 1
        roots = report.data["roots"]
        assert isinstance(roots, list)
        assert [(root["path"], root["sessions_loaded"]) for root in roots] == [(str(running.root), 2)]


async def test_a_stop_answers_what_was_received_before_it_closes_the_connections(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        peer = await running.connect()
        await peer.send_batch(1, [_event("a"), _event("b")])
        session_file = running.root / "sessions" / "s1.events.jsonl"
        # Read by the collector: staged (awaiting its verdicts) or already written.
        await _until(lambda: session_file.exists() or any(c.awaiting for c in running.collector.connections))
        running.collector.stop()
        assert await peer.rest() == [Verdicts(first=1, count=2, seqs=[1, 2])]
        assert session_file.read_text().count("\n") == 2


async def test_the_known_roots_file_is_the_collectors_own(tmp_path: Path) -> None:
    """The in-process collector keeps its state in its own directory, never the user's default."""
    async with running_collector(tmp_path) as running:
        peer = await running.connect()
        await peer.send_batch(1, [_event("a")])
        assert isinstance(await peer.next(), Verdicts)
    assert list((tmp_path / "state").iterdir())
