"""One client connection, in process (``gz_ia.collector.testing``): the handshake, batches and verdicts,
the frames that close it.

The collector here is the real one on a real Unix socket, served on the test's own event loop, so a
test can look at its connections and ingest while the raw protocol goes to and fro.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from gz_ia.client.protocol import (
    PROTOCOL_VERSION,
    Batch,
    Error,
    Hello,
    Query,
    RejectReason,
    Report,
    Route,
    Verdicts,
)
from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.collector.testing import running_collector

_encoder = msgspec.msgpack.Encoder()


def _event(action: str, stage: Stage = Stage.READ, *, session: str = "s1", status: Status = Status.OK) -> bytes:
    error = "it broke" if status is Status.FAILED else None
    return _encoder.encode(
        LogEvent(
            timestamp=datetime.now(UTC),
            session_id=session,
            action=action,
            stage=stage,
            status=status,
            agent="test",
            error=error,
        )
    )


def _lines(root: Path, session: str = "s1") -> list[dict[str, object]]:
    path = root / "sessions" / f"{session}.events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_welcomed_batch_is_written_then_answered_with_its_seqs(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        peer = await running.connect()
        assert len(running.collector.connections) == 1
        await peer.send_batch(1, [_event("a"), _event("a", Stage.FINISH), _event("b")])
        verdicts = await peer.next()
        assert verdicts == Verdicts(first=1, count=3, seqs=[1, 2, 3])
        # Answered only once written: the lines are on disk by the time the verdicts arrive.
        assert [(line["action"], line["seq"]) for line in _lines(running.root)] == [("a", 1), ("a", 2), ("b", 3)]


async def test_a_resent_batch_is_answered_as_duplicates_and_not_written_again(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        first = await running.connect("aa")
        await first.send_batch(1, [_event("a"), _event("b")])
        assert await first.next() == Verdicts(first=1, count=2, seqs=[1, 2])
        again = await running.connect("aa")  # the same producer after a reconnect resends its window
        await again.send_batch(1, [_event("a"), _event("b")])
        assert await again.next() == Verdicts(first=1, count=2, seqs=[-1, -1])
        assert len(_lines(running.root)) == 2


async def test_a_bad_event_is_rejected_alone_with_its_reason(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        peer = await running.connect()
        await peer.send_batch(1, [_event("a"), _event("never-started", Stage.FINISH, status=Status.FAILED)])
        verdicts = await peer.next()
        assert isinstance(verdicts, Verdicts)
        assert verdicts.seqs == [1, 0]
        assert [(r.index, r.reason) for r in verdicts.rejected] == [(1, RejectReason.FINISH_WITHOUT_START)]


async def test_a_batch_before_the_hello_is_refused_and_the_connection_closed(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        peer = await running.open()
        await peer.send(Batch(first=1, events=[msgspec.Raw(_event("a"))]))
        (error,) = await peer.rest()
        assert isinstance(error, Error)
        assert (error.reason, error.fatal) == (RejectReason.HANDSHAKE_REQUIRED, True)


async def test_another_protocol_version_is_refused(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        peer = await running.open()
        await peer.send(Hello(proto=PROTOCOL_VERSION + 1, producer="ab", pid=1, root=str(running.root)))
        (error,) = await peer.rest()
        assert isinstance(error, Error)
        assert error.reason is RejectReason.UNSUPPORTED_VERSION


async def test_a_second_hello_and_an_unasked_route_close_the_connection(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        for frame in (Hello(proto=PROTOCOL_VERSION, producer="ab", pid=1, root=str(running.root)), Route(share=0)):
            peer = await running.connect()
            await peer.send(frame)
            (error,) = await peer.rest()
            assert isinstance(error, Error)
            assert (error.reason, error.fatal) == (RejectReason.MALFORMED, True)


async def test_a_relative_root_is_not_allowed(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        peer = await running.open()
        await peer.send(Hello(proto=PROTOCOL_VERSION, producer="ab", pid=1, root="relative/.harness"))
        (error,) = await peer.rest()
        assert isinstance(error, Error)
        assert error.reason is RejectReason.ROOT_NOT_ALLOWED


async def test_an_undecodable_frame_is_answered_and_the_connection_goes_on(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        peer = await running.open()
        await peer.send_bytes(b"\x00\x00\x00\x01\xc1")  # one byte, 0xc1: never used in MessagePack
        error = await peer.next()
        assert isinstance(error, Error)
        assert (error.reason, error.fatal) == (RejectReason.MALFORMED, False)
        await peer.send(Query())
        report = await peer.next()
        assert isinstance(report, Report)
        assert "version" in report.data


async def test_an_oversized_frame_header_is_refused(tmp_path: Path) -> None:
    async with running_collector(tmp_path) as running:
        peer = await running.connect()
        await peer.send_bytes((1 << 30).to_bytes(4, "big"))  # a header alone, announcing 1 GiB
        (error,) = await peer.rest()
        assert isinstance(error, Error)
        assert error.reason is RejectReason.FRAME_TOO_LARGE
