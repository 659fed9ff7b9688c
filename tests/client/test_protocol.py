"""Framing and message codec: property tests and golden frames from earlier versions."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gz_ia.client.protocol import (
    MAX_FRAME,
    Batch,
    FrameReader,
    FrameTooLarge,
    Hello,
    Route,
    Verdicts,
    Welcome,
    client_message_decoder,
    collector_message_decoder,
    encode_frame,
    owner_of,
)
from gz_ia.client.schema import LogEvent, Stage, Status

FRAMES = Path(__file__).resolve().parents[1] / "fixtures" / "frames"
event_decoder = msgspec.msgpack.Decoder(LogEvent)

ids = st.from_regex(r"\A[A-Za-z0-9_-][A-Za-z0-9_.-]{0,20}\Z")
texts = st.text(min_size=1, max_size=40)
events = st.builds(
    LogEvent,
    timestamp=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)),
    session_id=ids,
    parent_session_id=st.none() | ids,
    action=texts,
    stage=st.sampled_from(Stage),
    status=st.just(Status.OK),
    agent=texts,
    role=st.none() | st.text(max_size=20),
    duration_ms=st.none() | st.integers(min_value=0, max_value=2**53),
    error=st.none() | st.text(max_size=40),
    attrs=st.none()
    | st.dictionaries(
        st.text(min_size=1, max_size=10),
        st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.booleans(),
        max_size=5,
    ),
)


@given(st.lists(events, min_size=1, max_size=20), st.integers(min_value=1, max_value=2**40))
def test_a_batch_round_trips_through_raw_and_typed_decoding(batch: list[LogEvent], first: int) -> None:
    """Events pre-encoded by the client decode, typed, into equal LogEvents on the collector side."""
    encoder = msgspec.msgpack.Encoder()
    frame = encode_frame(Batch(first=first, events=[msgspec.Raw(encoder.encode(e)) for e in batch]))
    (body,) = FrameReader().feed(frame)
    decoded = client_message_decoder.decode(body)
    assert isinstance(decoded, Batch)
    assert decoded.first == first
    assert [event_decoder.decode(raw) for raw in decoded.events] == batch


@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_any_chunking_of_the_stream_yields_the_same_frames(bodies: list[bytes], data: st.DataObject) -> None:
    """However the bytes arrive, the reader returns exactly the frames that were sent, in order."""
    stream = b"".join(struct.pack(">I", len(body)) + body for body in bodies)
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=10)))
    reader = FrameReader()
    received: list[bytes] = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        received += reader.feed(stream[previous:cut])
        previous = cut
    assert received == bodies
    assert reader.buffered == 0


def test_a_length_prefix_over_the_limit_is_refused_before_buffering() -> None:
    """A hostile length prefix raises at once instead of making the reader wait for 4 GiB."""
    with pytest.raises(FrameTooLarge):
        FrameReader().feed(struct.pack(">I", MAX_FRAME + 1) + b"x")


def test_encoding_an_oversized_message_is_refused() -> None:
    """The sender never produces a frame the collector would refuse."""
    big = Batch(first=1, events=[msgspec.Raw(msgspec.msgpack.encode("x" * (MAX_FRAME + 10)))])
    with pytest.raises(FrameTooLarge):
        encode_frame(big)


def _golden_event() -> LogEvent:
    return LogEvent(
        timestamp=datetime(2026, 9, 24, 18, 15, 22, 104000, tzinfo=UTC),
        session_id="3f9a12c8",
        action="Analizar interfaz de base de datos",
        stage=Stage.READ,
        status=Status.OK,
        agent="agy",
        role="code-analyst",
        duration_ms=340,
    )


def test_golden_frames_from_protocol_version_1_still_decode() -> None:
    """Frames recorded with protocol 1 keep decoding to the same messages."""
    hello_body = (FRAMES / "v1-hello.bin").read_bytes()[4:]
    batch_body = (FRAMES / "v1-batch.bin").read_bytes()[4:]
    verdicts_body = (FRAMES / "v1-verdicts.bin").read_bytes()[4:]
    hello = client_message_decoder.decode(hello_body)
    assert hello == Hello(proto=1, producer="00112233aabbccdd", pid=4242, root="/w/.harness", program="agent")
    batch = client_message_decoder.decode(batch_body)
    assert isinstance(batch, Batch)
    assert batch.first == 1 and [event_decoder.decode(raw) for raw in batch.events] == [_golden_event()]
    verdicts = collector_message_decoder.decode(verdicts_body)
    assert verdicts == Verdicts(first=1, count=1, seqs=[1], rejected=[])


def test_routing_fields_default_to_what_a_peer_without_them_means() -> None:
    """A hello without ``routes`` does not route; a welcome without ``shares`` is one process."""
    hello = client_message_decoder.decode(
        msgspec.msgpack.encode({"type": "hello", "proto": 1, "producer": "ab", "pid": 1, "root": "/r"})
    )
    welcome = collector_message_decoder.decode(msgspec.msgpack.encode({"type": "welcome", "proto": 1, "version": "0"}))
    assert isinstance(hello, Hello) and hello.routes is False
    assert isinstance(welcome, Welcome) and welcome.shares == 1
    assert client_message_decoder.decode(encode_frame(Route(share=1))[4:]) == Route(share=1)


def test_the_owner_of_a_session_never_changes() -> None:
    """Clients and collectors of different releases must agree on each session's share: the hash is
    pinned (CRC-32 of the UTF-8 id)."""
    assert [owner_of(s, 2) for s in ("a", "b", "session-1", "sess-2")] == [1, 1, 0, 1]
    assert [owner_of(s, 3) for s in ("a", "b", "session-1", "sess-2")] == [0, 2, 1, 1]
    assert all(owner_of(s, 1) == 0 for s in ("a", "b", "é"))


if __name__ == "__main__":  # pragma: no cover - regenerates the golden files on purpose only
    FRAMES.mkdir(parents=True, exist_ok=True)
    (FRAMES / "v1-hello.bin").write_bytes(
        encode_frame(Hello(proto=1, producer="00112233aabbccdd", pid=4242, root="/w/.harness", program="agent"))
    )
    encoded = msgspec.msgpack.encode(_golden_event())
    (FRAMES / "v1-batch.bin").write_bytes(encode_frame(Batch(first=1, events=[msgspec.Raw(encoded)])))
    (FRAMES / "v1-verdicts.bin").write_bytes(encode_frame(Verdicts(first=1, count=1, seqs=[1])))
