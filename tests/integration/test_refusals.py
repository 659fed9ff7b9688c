"""Refusals at ingest are answered, counted and recorded: never passed off as duplicates or accepted.

Each test drives a real collector process over its real socket, with raw protocol frames where no
well-behaved client would send what is needed.
"""

from __future__ import annotations

import socket
from typing import Any

import msgspec
import pytest
from tests.conftest import CollectorProcess, first_reply
from tests.integration.fault_harness import metric_value

from gz_ia.client import EventRejected, RejectReason, build_event
from gz_ia.client.protocol import (
    PROTOCOL_VERSION,
    Batch,
    Error,
    FrameReader,
    Hello,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
)

_PRODUCER = "abcdef01"


def _connect(collector: CollectorProcess) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(15)
    sock.connect(str(collector.socket))
    sock.sendall(encode_frame(Hello(proto=PROTOCOL_VERSION, producer=_PRODUCER, pid=1, root=str(collector.root))))
    assert isinstance(first_reply(sock), Welcome)
    return sock


def _body(session: str, action: str, stage: str, **fields: Any) -> msgspec.Raw:
    event = build_event(session_id=session, action=action, stage=stage, agent="agy", **fields)
    return msgspec.Raw(msgspec.msgpack.encode(event))


def test_a_rejection_the_rejects_file_cannot_record_is_answered_counted_and_logged(collector: CollectorProcess) -> None:
    """rejects.jsonl cannot be written (a directory stands in its place): a batch of a refused event and
    a good one is answered at once, the refusal with its reason, instead of failing the batch, whose
    resend would pass the refused event, under the good one's watermark, for a duplicate."""
    (collector.root / "rejects.jsonl").mkdir()
    sock = _connect(collector)
    events = [_body("s", "never started", "FINISH"), _body("s", "a", "READ")]
    sock.sendall(encode_frame(Batch(first=1, events=events, verdicts=True)))
    verdicts = first_reply(sock)
    sock.close()
    assert isinstance(verdicts, Verdicts), verdicts
    assert verdicts.seqs == [0, 1]
    (rejection,) = verdicts.rejected
    assert (rejection.index, rejection.reason) == (0, RejectReason.FINISH_WITHOUT_START)
    assert "not recorded" in rejection.detail
    text = collector.metrics()
    assert metric_value(text, "gzia_rejects_unrecorded_total") == 1
    assert metric_value(text, "gzia_events_rejected_total", {"reason": "finish_without_start"}) == 1
    assert metric_value(text, "gzia_events_duplicate_total") == 0
    assert collector.log_lines("not recorded in the rejects file")
    assert [line["action"] for line in collector.session_lines("s")] == ["a"]


@pytest.mark.parametrize("first", [0, -5, 2**63 - 1])
def test_a_batch_numbered_outside_1_to_2_63_is_refused_not_taken_for_duplicates(
    collector: CollectorProcess, first: int
) -> None:
    """Numbers below 1 would all pass for duplicates of events already written, and never be written."""
    sock = _connect(collector)
    events = [_body("numbered", "a", "READ"), _body("numbered", "b", "READ")]
    sock.sendall(encode_frame(Batch(first=first, events=events, verdicts=True)))
    verdicts = first_reply(sock)
    sock.close()
    assert isinstance(verdicts, Verdicts), verdicts
    assert verdicts.seqs == [0, 0]
    assert [(item.index, item.reason) for item in verdicts.rejected] == [
        (0, RejectReason.INVALID_EVENT_NUMBER),
        (1, RejectReason.INVALID_EVENT_NUMBER),
    ]
    assert str(first) in verdicts.rejected[0].detail
    text = collector.metrics()
    assert metric_value(text, "gzia_events_rejected_total", {"reason": "invalid_event_number"}) == 2
    assert metric_value(text, "gzia_events_duplicate_total") == 0
    assert [record["reason"] for record in collector.rejects()] == ["invalid_event_number"] * 2
    assert not collector.session_file("numbered").exists()


def test_a_batch_ending_at_2_63_minus_1_is_written(collector: CollectorProcess) -> None:
    """The last number a producer may use is 2^63-1."""
    sock = _connect(collector)
    events = [_body("last", "a", "READ"), _body("last", "b", "READ")]
    sock.sendall(encode_frame(Batch(first=2**63 - 2, events=events, verdicts=True)))
    verdicts = first_reply(sock)
    sock.close()
    assert isinstance(verdicts, Verdicts), verdicts
    assert (verdicts.seqs, verdicts.rejected) == ([1, 2], [])
    assert [line["delivery"] for line in collector.session_lines("last")] == [
        f"{_PRODUCER}:{2**63 - 2}",
        f"{_PRODUCER}:{2**63 - 1}",
    ]


_STAMPS = {
    "0001-01-01T00:00:00Z": False,
    "0001-01-01T03:00:00+05:00": False,  # 0000-12-31T22:00Z: before year 1 in UTC
    "1969-12-31T23:59:59.999999Z": False,
    "1970-01-01T00:00:00Z": True,
    "2099-12-31T23:59:59.999999Z": True,
    "2100-01-01T08:59:00+09:00": True,  # 2099-12-31T23:59Z
    "2100-01-01T00:00:00Z": False,
    "9999-12-31T23:59:59Z": False,
    "9999-12-31T20:00:00-05:00": False,  # past year 9999 in UTC
}


def test_timestamps_are_bounded_to_1970_up_to_2100(collector: CollectorProcess) -> None:
    """Outside [1970-01-01T00:00:00Z, 2100-01-01T00:00:00Z) an event is refused ``timestamp_out_of_range``;
    offsets are judged in UTC, even where UTC would fall outside the years 1 to 9999."""
    sock = _connect(collector)
    events = [
        msgspec.Raw(
            msgspec.msgpack.encode(
                {
                    "timestamp": stamp,
                    "session_id": "when",
                    "action": stamp,
                    "stage": "READ",
                    "status": "OK",
                    "agent": "a",
                }
            )
        )
        for stamp in _STAMPS
    ]
    sock.sendall(encode_frame(Batch(first=1, events=events, verdicts=True)))
    verdicts = first_reply(sock)
    sock.close()
    assert isinstance(verdicts, Verdicts), verdicts
    refused = {list(_STAMPS)[item.index]: item for item in verdicts.rejected}
    assert sorted(refused) == sorted(stamp for stamp, inside in _STAMPS.items() if not inside)
    assert {item.reason for item in refused.values()} == {RejectReason.TIMESTAMP_OUT_OF_RANGE}
    assert all("1970-01-01T00:00:00Z" in item.detail for item in refused.values())
    assert [line["timestamp"] for line in collector.session_lines("when")] == [
        "1970-01-01T00:00:00Z",
        "2099-12-31T23:59:59.999999Z",
        "2099-12-31T23:59:00Z",
    ]
    assert metric_value(collector.metrics(), "gzia_events_rejected_total", {"reason": "timestamp_out_of_range"}) == 6


def test_open_actions_past_the_collector_wide_bound_are_refused(make_collector: Any) -> None:
    """``max_open_actions_total`` bounds the open cycles of all sessions together: past it a new cycle
    is refused ``too_many_open_actions_total`` (counted), and a FINISH makes room again."""
    collector: CollectorProcess = make_collector(start=False)
    collector.write_config("max_open_actions_total = 3\n")
    collector.start()
    client = collector.client()

    def send(session: str, action: str, stage: str) -> int:
        return int(client.send(build_event(session_id=session, action=action, stage=stage, agent="agy")).seq)

    send("one", "a", "READ")
    send("one", "b", "READ")
    send("two", "a", "PENDING")
    with pytest.raises(EventRejected) as caught:
        send("three", "a", "READ")
    assert caught.value.reason is RejectReason.TOO_MANY_OPEN_ACTIONS_TOTAL
    assert "max_open_actions_total" in caught.value.detail
    assert send("one", "a", "PENDING") == 3  # moving an open cycle on opens nothing
    assert send("two", "a", "FINISH") == 2
    assert send("three", "a", "READ") == 1
    client.close()
    text = collector.metrics()
    assert metric_value(text, "gzia_events_rejected_total", {"reason": "too_many_open_actions_total"}) == 1
    assert [record["reason"] for record in collector.rejects()] == ["too_many_open_actions_total"]


@pytest.mark.parametrize(
    ("hellos", "reason"),
    [
        ([{"proto": 99}], "unsupported_version"),
        ([{"producer": "Not-Hex"}], "malformed"),
        ([{}, {}], "malformed"),
    ],
    ids=["unknown-protocol", "bad-producer", "second-hello"],
)
def test_a_refused_hello_is_counted_like_every_refused_frame(
    collector: CollectorProcess, hellos: list[dict[str, Any]], reason: str
) -> None:
    """An operator sees a client speaking another protocol, or speaking it wrong, in the rejections."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(15)
    sock.connect(str(collector.socket))
    with sock:
        for fields in hellos:
            hello: dict[str, Any] = {
                "proto": PROTOCOL_VERSION,
                "producer": _PRODUCER,
                "pid": 1,
                "root": str(collector.root),
            }
            hello |= fields
            sock.sendall(encode_frame(Hello(**hello)))
        reader = FrameReader()
        bodies: list[bytes] = []
        while data := sock.recv(1 << 16):  # the collector closes the connection after a fatal error
            bodies += reader.feed(data)
    replies = [collector_message_decoder.decode(body) for body in bodies]
    assert len(replies) == len(hellos)
    assert isinstance(replies[-1], Error) and replies[-1].fatal
    assert replies[-1].reason.value == reason
    assert metric_value(collector.metrics(), "gzia_events_rejected_total", {"reason": reason}) == 1
