"""A sharded collector's pieces in process: replies passed on in order, reports and metrics merged."""

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
    RejectReason,
    Report,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
)
from gz_ia.client.schema import Stage, Status
from gz_ia.collector.metrics import Metrics
from gz_ia.collector.sharding.front_client import EVERY, FrontClient
from gz_ia.collector.sharding.metrics import merge_replies, merge_reports, merged_exposition
from gz_ia.collector.sharding.share_link import ShareLink
from gz_ia.collector.sharding.shares import restart_delay

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


def test_any_share_error_wins_over_the_others_replies() -> None:
    error = Error(reason=RejectReason.ROOT_NOT_ALLOWED, detail="not yours", fatal=True)
    welcome = Welcome(proto=1, version="v")
    assert merge_replies([welcome, error], front=None) is error  # type: ignore[arg-type]
    assert merge_replies([welcome, welcome], front=None) is welcome  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="differently"):
        merge_replies([welcome, Report(data={})], front=None)  # type: ignore[arg-type]


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
    client = FrontClient(front)
    wire = _Wire()
    client.transport = wire  # type: ignore[assignment]
    client.links = [ShareLink(client, 0), ShareLink(client, 1)]
    return client, client.links, wire


def test_the_front_passes_the_welcome_before_any_verdicts_whatever_arrives_first() -> None:
    client, (first, second), wire = _front_client()
    client.order.extend([EVERY, 0, 1])  # the hello, then a batch routed to each share
    first.replies.extend([Welcome(proto=1, version="v"), Verdicts(first=1, count=1, seqs=[1])])
    second.replies.append(Welcome(proto=1, version="v"))
    client.merge()
    assert [type(reply).__name__ for reply in wire.sent] == ["Welcome", "Verdicts"]
    assert list(client.order) == [1]  # the second batch waits for its share


def test_routed_verdicts_keep_the_order_of_the_batches_whatever_share_answers_first() -> None:
    client, (first, second), wire = _front_client()
    client.order.extend([1, 0])
    first.replies.append(Verdicts(first=2, count=1, seqs=[3]))
    client.merge()
    assert wire.sent == []  # the first batch went to the other share, which has not answered
    second.replies.append(Verdicts(first=1, count=1, seqs=[4]))
    client.merge()
    assert [reply.first for reply in wire.sent] == [1, 2]


def test_a_write_failed_in_one_share_comes_after_the_verdicts_before_it() -> None:
    client, (first, second), wire = _front_client()
    failed = Error(reason=RejectReason.WRITE_FAILED, detail="disk full", fatal=True)
    client.order.extend([1, 0, 1])
    first.replies.append(failed)
    first.lost = True
    second.replies.extend([Verdicts(first=1, count=1, seqs=[3]), Verdicts(first=3, count=1, seqs=[7])])
    client.merge()
    # Batch 3 came after the failed one: it is not acknowledged; the client resends it.
    assert wire.sent == [Verdicts(first=1, count=1, seqs=[3]), failed]
    assert wire.closed


def test_a_share_that_keeps_exiting_is_restarted_ever_more_slowly_up_to_30_s() -> None:
    assert [restart_delay(exits) for exits in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
