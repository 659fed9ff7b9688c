"""A sharded collector's pieces in process: each share takes its own events; replies merge into one."""

from __future__ import annotations

import platform
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gz_ia.client.protocol import (
    Batch,
    Error,
    FrameReader,
    Owners,
    Rejection,
    RejectReason,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
    owner_of,
)
from gz_ia.client.schema import Stage, Status
from gz_ia.collector.front import _Client, _ShareLink, merge_replies
from gz_ia.collector.merged_metrics import merge_reports, merged_exposition
from gz_ia.collector.metrics import Metrics
from gz_ia.collector.shares import restart_delay
from gz_ia.collector.validation import decode_batch, decode_share

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


@pytest.mark.parametrize("shares", [2, 3])
def test_every_event_belongs_to_exactly_one_share_and_decodes_there_as_alone(shares: int) -> None:
    events = [{**GOOD, "session_id": f"session-{index % 37}", "action": f"a{index}"} for index in range(200)]
    body = _body(*events)
    whole = decode_batch(body)
    taken = [decode_share(body, share, Owners(shares)) for share in range(shares)]
    for index in range(len(events)):
        owners = [share for share, part in enumerate(taken) if part.events[index] is not None]
        assert owners == [owner_of(events[index]["session_id"], shares)]
        assert taken[owners[0]].events[index] == whole.events[index]
    for part in taken:
        assert part.first == 10 and part.rejections == {}
    # Every share gets some of 37 sessions: the hash spreads them.
    assert all(any(event is not None for event in part.events) for part in taken)


def test_an_invalid_event_is_rejected_by_its_owner_only() -> None:
    bad = {**GOOD, "session_id": "s2", "stage": "WRITING"}
    body = _body(GOOD, bad)
    owner = owner_of("s2", 2)
    taken = [decode_share(body, share, Owners(2)) for share in range(2)]
    assert taken[owner].rejections[1].reason is RejectReason.INVALID_FIELD
    assert 1 not in taken[1 - owner].rejections and taken[1 - owner].events[1] is None


@pytest.mark.parametrize("unreadable", [{"action": "no session id"}, {**GOOD, "session_id": 7}, "not a map"])
def test_an_event_without_a_readable_session_id_goes_to_share_zero(unreadable: object) -> None:
    body = _body(GOOD, unreadable)
    first, second = decode_share(body, 0, Owners(2)), decode_share(body, 1, Owners(2))
    assert 1 in first.rejections and 1 not in second.rejections
    assert second.events[1] is None
    assert (first.events[0] is None) != (second.events[0] is None)  # the good one has one owner


def test_verdicts_merge_each_seq_from_its_owner_and_every_rejection_in_order() -> None:
    mine = Verdicts(first=5, count=4, seqs=[3, 0, 0, -1], rejected=[Rejection(2, RejectReason.MALFORMED, "x")])
    theirs = Verdicts(first=5, count=4, seqs=[0, 7, 0, 0], rejected=[Rejection(0, RejectReason.MALFORMED, "y")])
    merged = merge_replies([mine, theirs], front=None)  # type: ignore[arg-type]
    assert isinstance(merged, Verdicts)
    assert merged.seqs == [3, 7, 0, -1]
    assert [rejection.index for rejection in merged.rejected] == [0, 2]
    assert (merged.first, merged.count) == (5, 4)


def test_any_share_error_wins_over_the_others_replies() -> None:
    error = Error(reason=RejectReason.WRITE_FAILED, detail="disk full", fatal=True)
    verdicts = Verdicts(first=1, count=1)
    assert merge_replies([verdicts, error], front=None) is error  # type: ignore[arg-type]
    welcome = Welcome(proto=1, version="v")
    assert merge_replies([welcome, welcome], front=None) is welcome  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="differently"):
        merge_replies([verdicts, welcome], front=None)  # type: ignore[arg-type]


def test_status_reports_add_up_by_root_and_counter() -> None:
    reports: list[dict[str, object]] = [
        {
            "healthy": True,
            "roots": [{"path": "/a", "sessions_loaded": 2, "open_sessions": 1}],
            "counters": {"written": 5, "rejected_by_reason": {"malformed": 1}},
        },
        {
            "healthy": True,
            "roots": [{"path": "/a", "sessions_loaded": 3, "open_sessions": 0}, {"path": "/b", "sessions_loaded": 1}],
            "counters": {"written": 7, "rejected_by_reason": {"malformed": 2, "backward_transition": 1}},
        },
    ]
    merged = merge_reports(reports)
    assert merged["healthy"] is True
    assert merged["roots"] == [
        {"path": "/a", "sessions_loaded": 5, "open_sessions": 1},
        {"path": "/b", "sessions_loaded": 1},
    ]
    assert merged["counters"] == {"written": 12, "rejected_by_reason": {"malformed": 3, "backward_transition": 1}}
    assert merge_reports([*reports, {"healthy": False}])["healthy"] is False


def test_metrics_of_the_shares_are_summed_except_the_fronts_own_and_the_highest() -> None:
    front = Metrics(CollectorRegistry(), version="v", process_metrics=False)
    front.connections_total.inc(3)  # the front's own: the shares count the front's links instead
    shares = []
    for written, open_files in ((5, 40), (7, 90)):
        share = Metrics(CollectorRegistry(), version="v", process_metrics=False)
        share.connections_total.inc(100)
        share.count_written({(Stage.READ, Status.OK): written})
        share.open_files.set(open_files)
        share.write_latency.observe(0.001)
        shares.append(share.exposition())
    text = merged_exposition(front.registry, shares)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples["gzia_events_written_total", (("stage", "READ"), ("status", "OK"))] == 12
    assert samples["gzia_connections_total", ()] == 3
    assert samples["gzia_open_files", ()] == 90  # the most one process holds: its limit is its own
    assert samples["gzia_write_duration_seconds_count", ()] == 2
    assert samples["gzia_build_info", (("python", platform.python_version()), ("version", "v"))] == 1
    # One family per name: what promtool and Prometheus require.
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names))


class _Wire:
    """Stands in for the client's transport: keeps what the front would send."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent += [collector_message_decoder.decode(body) for body in FrameReader().feed(data)]

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _front_client() -> tuple[Any, list[Any], _Wire]:
    front = SimpleNamespace(shares=SimpleNamespace(count=2), stopping=False)
    client = _Client(front)  # type: ignore[arg-type]
    wire = _Wire()
    client.transport = wire  # type: ignore[assignment]
    client.links = [_ShareLink(client, 0), _ShareLink(client, 1)]
    return client, client.links, wire


def test_the_front_passes_the_welcome_before_any_verdicts_whatever_arrives_first() -> None:
    client, (first, second), wire = _front_client()
    first.replies.extend([Welcome(proto=1, version="v"), Verdicts(first=1, count=1, seqs=[1, 0])])
    client.merge()
    assert wire.sent == []  # the other share has not answered yet
    second.replies.extend([Welcome(proto=1, version="v"), Verdicts(first=1, count=1, seqs=[0, 4])])
    client.merge()
    assert [type(reply).__name__ for reply in wire.sent] == ["Welcome", "Verdicts"]
    assert wire.sent[1].seqs == [1, 4]


def test_crossed_replies_pair_error_with_error_and_verdicts_with_verdicts() -> None:
    client, (first, second), wire = _front_client()
    bad = Error(reason=RejectReason.MALFORMED, detail="bad frame")
    first.replies.extend([Verdicts(first=1, count=2, seqs=[5, 0]), bad])
    second.replies.extend([bad, Verdicts(first=1, count=2, seqs=[0, 9])])
    client.merge()
    assert [type(reply).__name__ for reply in wire.sent] == ["Error", "Verdicts"]
    assert wire.sent[1].seqs == [5, 9]
    assert not wire.closed


def test_a_write_failed_in_one_share_comes_after_the_verdicts_both_gave() -> None:
    client, (first, second), wire = _front_client()
    failed = Error(reason=RejectReason.WRITE_FAILED, detail="disk full", fatal=True)
    first.replies.extend([Verdicts(first=1, count=1, seqs=[3]), failed])
    first.lost = True
    second.replies.extend([Verdicts(first=1, count=1, seqs=[0]), Verdicts(first=2, count=1, seqs=[7])])
    client.merge()
    # Batch 2 has no verdict from the failed share: it is not acknowledged; the client resends it.
    assert wire.sent == [Verdicts(first=1, count=1, seqs=[3]), failed]
    assert wire.closed


def test_a_share_that_keeps_exiting_is_restarted_ever_more_slowly_up_to_30_s() -> None:
    assert [restart_delay(exits) for exits in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
