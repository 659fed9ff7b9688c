"""Bad events get precise reasons; good batches take the one-call fast path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gz_ia.client.protocol import Batch, RejectReason, encode_frame
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.ingest.validation import checked_batch, checked_batches, decode_batch
from gz_ia.collector.storage.writer import Writer

GOOD: dict[str, Any] = {
    "timestamp": "2026-01-01T00:00:00Z",
    "session_id": "s1",
    "action": "a",
    "stage": "READ",
    "status": "OK",
    "agent": "agy",
}


def _body(*events: object) -> bytes:
    frame = encode_frame(Batch(first=10, events=[msgspec.Raw(msgspec.msgpack.encode(e)) for e in events]))
    return frame[4:]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"session_id": "x" * 129}, RejectReason.INVALID_SESSION_ID),
        ({"session_id": "../x", "duration_ms": -1}, RejectReason.INVALID_SESSION_ID),
        ({"root_session_id": "x" * 129}, RejectReason.INVALID_SESSION_ID),
        ({"timestamp": "yesterday"}, RejectReason.INVALID_TIMESTAMP),
        ({"timestamp": "2026-01-01T00:00:00"}, RejectReason.INVALID_TIMESTAMP),
        ({"duration_ms": -1}, RejectReason.INVALID_DURATION),
        ({"duration_ms": 1.5}, RejectReason.INVALID_DURATION),
        ({"duration_ms": True}, RejectReason.INVALID_DURATION),
        ({"stage": "WRITING"}, RejectReason.INVALID_FIELD),
        ({"status": "MAYBE"}, RejectReason.INVALID_FIELD),
        ({"status": "FAILED"}, RejectReason.ERROR_REQUIRED),
        ({"status": "FAILED", "error": ""}, RejectReason.ERROR_REQUIRED),
        ({"action": "x" * 513}, RejectReason.FIELD_TOO_LONG),
        ({"error": "x" * (16 * 1024 + 1)}, RejectReason.FIELD_TOO_LONG),
        ({"action": ""}, RejectReason.INVALID_FIELD),
        ({"agent": 7}, RejectReason.INVALID_FIELD),
        ({"attrs": {f"k{i}": i for i in range(33)}}, RejectReason.ATTRS_TOO_LARGE),
        ({"attrs": {"k": [1, 2]}}, RejectReason.ATTRS_TOO_LARGE),
        ({"attrs": {"k": "x" * 1025}}, RejectReason.ATTRS_TOO_LARGE),
    ],
)
def test_each_problem_gets_its_reason_and_the_others_pass(change: dict[str, Any], reason: RejectReason) -> None:
    """One bad event among good ones is rejected with its reason; its neighbours decode."""
    decoded = decode_batch(_body(GOOD, {**GOOD, **change}, GOOD))
    assert decoded.first == 10
    assert decoded.events[0] is not None and decoded.events[2] is not None
    assert decoded.events[1] is None
    assert decoded.rejections[1].reason is reason, decoded.rejections[1].detail
    assert decoded.raw[1]


@pytest.mark.parametrize(
    "change",
    [
        {"session_id": "../x"},
        {"session_id": ".h"},
        {"session_id": "ok\n"},
        {"parent_session_id": "a/b"},
        {"root_session_id": "a/b"},
    ],
)
def test_unsafe_ids_in_an_otherwise_valid_batch_are_rejected_by_ingest(harness: Path, change: dict[str, Any]) -> None:
    """The fast decode only length-checks ids; Ingest refuses an unsafe one before it can become a path."""
    writer = Writer()
    store = writer.root(harness, owner=os.getuid())
    decoded = decode_batch(_body(GOOD, {**GOOD, **change}))
    assert not decoded.rejections, "the whole batch took the fast path"
    outcome = Ingest(writer).apply(store, "ab", decoded)
    assert [(r.index, r.reason) for r in outcome.rejections] == [(1, RejectReason.INVALID_SESSION_ID)]
    writer.flush()
    writer.close()
    assert sorted(p.name for p in (harness / "sessions").iterdir()) == ["s1.events.jsonl"]


def test_a_missing_field_is_named() -> None:
    """A missing required field is reported by name."""
    event = dict(GOOD)
    del event["agent"]
    decoded = decode_batch(_body(event))
    assert decoded.rejections[0].reason is RejectReason.MISSING_FIELD
    assert "'agent'" in decoded.rejections[0].detail


def test_an_event_that_is_not_a_map_is_malformed() -> None:
    """A list or a number in place of an event is refused as malformed."""
    decoded = decode_batch(_body([1, 2], 5))
    assert [r.reason for r in decoded.rejections.values()] == [RejectReason.MALFORMED] * 2


def test_offsets_are_kept_and_unknown_fields_ignored() -> None:
    """Extra fields (schema allows them) do not reject an event; offset timestamps decode with their zone."""
    decoded = decode_batch(_body({**GOOD, "timestamp": "2026-01-01T02:00:00+02:00", "extra": 1}))
    event = decoded.events[0]
    assert event is not None
    assert event.timestamp.utcoffset() is not None
    assert not decoded.rejections


def test_the_delivery_field_escapes_any_producer_id(harness: Path) -> None:
    """Adopted spools name their producer after a file: quotes, backslashes and "%" stay valid JSON."""
    writer = Writer()
    store = writer.root(harness, owner=os.getuid())
    ingest = Ingest(writer)
    for producer in ("ab12", 'we"ird%d\\'):
        outcome = ingest.apply(store, producer, decode_batch(_body(GOOD)))
        assert not outcome.rejections
    writer.flush()
    writer.close()
    lines = [msgspec.json.decode(line) for line in (harness / "sessions" / "s1.events.jsonl").read_bytes().splitlines()]
    assert [(line["delivery"], line["seq"]) for line in lines] == [("ab12:10", 1), ('we"ird%d\\:10', 2)]


def test_written_events_are_counted_per_stage_and_status(harness: Path) -> None:
    """A batch's written counts split each stage by status, FAILED ones included; refused events count nowhere."""
    writer = Writer()
    store = writer.root(harness, owner=os.getuid())
    failed = {"status": "FAILED", "error": "boom"}
    events = [
        {**GOOD, "action": "a"},
        {**GOOD, "action": "b", **failed},
        {**GOOD, "action": "c", "stage": "PENDING"},
        {**GOOD, "action": "a", "stage": "FINISH", **failed},
        {**GOOD, "action": "c", "stage": "FINISH", **failed},
        {**GOOD, "action": "d", "stage": "FINISH"},  # no open cycle: refused
    ]
    outcome = Ingest(writer).apply(store, "ab", decode_batch(_body(*events)))
    assert [r.reason for r in outcome.rejections] == [RejectReason.FINISH_WITHOUT_START]
    assert {key: count for key, count in outcome.written.items() if count} == {
        ("READ", "OK"): 1,
        ("READ", "FAILED"): 1,
        ("PENDING", "OK"): 1,
        ("FINISH", "FAILED"): 2,
    }
    writer.close()


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"session_id": "../x"},
        {"session_id": "x" * 129},
        {"timestamp": "yesterday"},
        {"duration_ms": -1},
        {"stage": "WRITING"},
        {"status": "FAILED"},
        {"action": "x" * 513},
        {"agent": 7},
        {"attrs": {"k": [1, 2]}},
    ],
)
def test_events_made_in_the_collector_are_checked_as_a_clients_frame_is(change: dict[str, Any]) -> None:
    """A receiver's events (a hook's, an export's) get from checked_batch the very events and
    reasons the socket's decode gives the same fields, without being encoded first."""
    events = [GOOD, {**GOOD, **change}, GOOD]
    checked = checked_batch(10, [dict(event) for event in events])
    decoded = decode_batch(_body(*events))
    assert checked.first == decoded.first
    assert msgspec.to_builtins(checked.events) == msgspec.to_builtins(decoded.events)
    assert checked.rejections == decoded.rejections
    assert checked.raw.keys() == decoded.raw.keys()


def test_an_exports_items_are_checked_together_and_a_bad_one_alone() -> None:
    """checked_batches converts an export's items in one call; one bad event there is rejected in its
    own item with the reason checked_batch gives it, and every other item is whole."""
    good = [[dict(GOOD)], [dict(GOOD), {**GOOD, "stage": "FINISH"}]]
    assert [len(batch.events) for batch in checked_batches(good)] == [1, 2]
    assert all(batch.rejections == {} and batch.first == 1 for batch in checked_batches(good))
    bad = [[dict(GOOD)], [dict(GOOD), {**GOOD, "session_id": "x" * 129}], [dict(GOOD)]]
    checked = checked_batches(bad)
    assert [batch.rejections for batch in checked] == [{}, checked_batch(1, bad[1]).rejections, {}]
    assert checked[1].rejections[1].reason is RejectReason.INVALID_SESSION_ID
    assert checked[1].events[0] is not None and checked[1].events[1] is None
