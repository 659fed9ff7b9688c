"""The storage metrics through a real scrape of /metrics: the fsync latency apart from the write
latency, and the bytes on disk per root (labelled by root id), measured by retention passes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.conftest import wait_for

from gz_ia.client import build_event
from gz_ia.collector.metrics import root_id

pytestmark = pytest.mark.shards(1, 2)


def _samples(collector: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(collector.metrics())
        for sample in family.samples
    }


def _send(collector: Any, count: int) -> None:
    client = collector.client()
    try:
        for n in range(count):
            client.send(build_event(session_id=f"m-{n % 3}", action=f"a{n}", stage="READ", agent="t"), timeout=20)
    finally:
        client.close()


def test_fsync_latency_is_its_own_histogram(make_collector: Any) -> None:
    collector = make_collector("--durability", "fsync")
    _send(collector, 10)
    samples = _samples(collector)
    synced = samples[("gzia_fsync_duration_seconds_count", ())]
    assert synced >= 1, "every durable pass is timed"
    assert samples[("gzia_write_duration_seconds_count", ())] == 10
    assert samples[("gzia_fsync_duration_seconds_bucket", (("le", "+Inf"),))] == synced


def test_os_durability_syncs_nothing(make_collector: Any) -> None:
    collector = make_collector()
    _send(collector, 5)
    assert _samples(collector)[("gzia_fsync_duration_seconds_count", ())] == 0


def test_bytes_on_disk_per_root_are_measured_by_retention_passes(make_collector: Any) -> None:
    """The gauge appears once the root is served, and after gz-ia gc it is exactly what
    gz-ia disk-usage says; its label is the root's id that gz-ia status shows beside the path."""
    collector = make_collector()
    _send(collector, 30)
    key = ("gzia_root_size_bytes", (("root", root_id(collector.root)),))
    wait_for(lambda: key in _samples(collector), message="the root to be measured")
    assert collector.gz_ia("gc").returncode == 0
    usage = json.loads(collector.gz_ia("disk-usage", "--json").stdout)
    assert usage["bytes"] > 0
    assert _samples(collector)[key] == usage["bytes"]
    status = json.loads(collector.gz_ia("status", "--json").stdout)
    assert [root["id"] for root in status["roots"]] == [root_id(collector.root)]
