"""The collector's Prometheus metrics, on a fresh registry per test."""

from __future__ import annotations

import errno
import platform
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from gz_ia.client.protocol import RejectReason
from gz_ia.client.redaction import DEFAULT_RULES
from gz_ia.client.schema import Stage, Status
from gz_ia.collector.metrics import (
    FLEET_HUB_OUTCOMES,
    FLEET_REFUSALS,
    FLEET_ROLES,
    HOOK_DROP_OUTCOMES,
    HTTP_HOOK_OUTCOMES,
    HTTP_REFUSALS,
    MAX_AGENT_LABELS,
    OTLP_REJECT_REASONS,
    RELOAD_RESULTS,
    SPOOL_OUTCOMES,
    WRITE_ERROR_KINDS,
    Metrics,
    root_id,
    write_error_kind,
)

# The documented metrics, by name (counters without their _total suffix, as the parser names them).
REQUIRED = {
    "gzia_events_received": "counter",
    "gzia_events_written": "counter",
    "gzia_events_rejected": "counter",
    "gzia_events_duplicate": "counter",
    "gzia_received_bytes": "counter",
    "gzia_written_bytes": "counter",
    "gzia_write_errors": "counter",
    "gzia_rotations": "counter",
    "gzia_retention_deleted_bytes": "counter",
    "gzia_retention_deleted_files": "counter",
    "gzia_connections_active": "gauge",
    "gzia_sessions_active": "gauge",
    "gzia_open_files": "gauge",
    "gzia_backlog_bytes": "gauge",
    "gzia_backlog_batches": "gauge",
    "gzia_write_duration_seconds": "histogram",
    "gzia_action_duration_seconds": "histogram",
    "gzia_last_event_timestamp_seconds": "gauge",
    "gzia_build_info": "gauge",  # an Info; the text format exposes it as a gauge that is always 1
    "gzia_config_reloads": "counter",
    "gzia_config_last_reload_successful": "gauge",
    "gzia_http_hook_payloads": "counter",
}
# Every label and its whole value set: small, fixed, never a session id, agent or error text.
ALLOWED_LABELS = {
    "stage": {stage.value for stage in Stage},
    "status": {status.value for status in Status},
    "reason": {reason.value for reason in RejectReason}
    | set(HTTP_REFUSALS)
    | set(OTLP_REJECT_REASONS)
    | set(FLEET_REFUSALS),
    "kind": set(WRITE_ERROR_KINDS),
    "result": set(RELOAD_RESULTS),
    "limit": {"total", "per_uid"},
    "outcome": set(SPOOL_OUTCOMES)
    | set(HTTP_HOOK_OUTCOMES)
    | set(HOOK_DROP_OUTCOMES)
    | set(FLEET_HUB_OUTCOMES)
    | {"staged", "joined"},
    "role": set(FLEET_ROLES),
    "pattern": {*DEFAULT_RULES, "other"},
    "signal": {"traces", "logs"},
}


@pytest.fixture(name="registry")
def _registry() -> CollectorRegistry:
    """A fresh registry: no global state shared between tests."""
    return CollectorRegistry()


@pytest.fixture(name="metrics")
def _metrics(registry: CollectorRegistry) -> Metrics:
    """The collector's metrics on that registry, with the default process metrics."""
    return Metrics(registry, version="1.2.3")


def _families(registry: CollectorRegistry) -> dict[str, str]:
    text = generate_latest(registry).decode()
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def test_required_metrics_exist_with_their_types(metrics: Metrics, registry: CollectorRegistry) -> None:
    """Every metric the issue lists is exported under a gzia_ name with the right type."""
    families = _families(registry)
    assert {name: families.get(name) for name in REQUIRED} == REQUIRED


def test_default_process_metrics_are_included(metrics: Metrics, registry: CollectorRegistry) -> None:
    """The process, platform and GC collectors of prometheus_client are registered."""
    families = _families(registry)
    assert {"process_resident_memory_bytes", "process_open_fds", "python_info", "python_gc_objects_collected"} <= set(
        families
    )


def test_process_metrics_can_be_left_out(registry: CollectorRegistry) -> None:
    """process_metrics=False registers only the gzia_ metrics."""
    Metrics(registry, version="0")
    other = CollectorRegistry()
    Metrics(other, version="0", process_metrics=False)
    assert all(name.startswith("gzia_") for name in _families(other))


def test_names_and_labels_follow_conventions(metrics: Metrics, registry: CollectorRegistry) -> None:
    """One gzia_ prefix, _total on counters, base units, and only small fixed label sets."""
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("gzia_"):
            continue
        assert family.name == family.name.lower()
        assert not family.name.endswith(("_ms", "_milliseconds", "_count", "_kb", "_mb"))
        assert family.documentation
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name.endswith(("_total", "_created")), sample.name
            for label, value in sample.labels.items():
                if family.name == "gzia_build_info":
                    assert label in {"version", "python"}
                elif label != "le":
                    assert value in ALLOWED_LABELS[label], (sample.name, label, value)


def test_labelled_children_exist_at_zero(metrics: Metrics, registry: CollectorRegistry) -> None:
    """Every stage/status, reason, error kind and reload result is exported as 0 before it happens."""
    for stage in Stage:
        for status in Status:
            labels = {"stage": stage.value, "status": status.value}
            assert registry.get_sample_value("gzia_events_written_total", labels) == 0
    for reason in RejectReason:
        assert registry.get_sample_value("gzia_events_rejected_total", {"reason": reason.value}) == 0
    for kind in WRITE_ERROR_KINDS:
        assert registry.get_sample_value("gzia_write_errors_total", {"kind": kind}) == 0
    for result in RELOAD_RESULTS:
        assert registry.get_sample_value("gzia_config_reloads_total", {"result": result}) == 0
    assert registry.get_sample_value("gzia_config_last_reload_successful") == 1


def test_count_written_adds_per_stage_and_status(metrics: Metrics, registry: CollectorRegistry) -> None:
    """count_written adds a batch's counts to the matching (stage, status) children only."""
    metrics.count_written({(Stage.READ, Status.OK): 3, (Stage.FINISH, Status.FAILED): 1})
    metrics.count_written({(Stage.READ, Status.OK): 2})
    value = registry.get_sample_value
    assert value("gzia_events_written_total", {"stage": "READ", "status": "OK"}) == 5
    assert value("gzia_events_written_total", {"stage": "FINISH", "status": "FAILED"}) == 1
    assert value("gzia_events_written_total", {"stage": "PENDING", "status": "OK"}) == 0


def test_action_duration_is_observed_in_seconds(metrics: Metrics, registry: CollectorRegistry) -> None:
    """observe_actions converts duration_ms to seconds, labelled by status."""
    metrics.observe_actions([(Status.OK, 1500), (Status.FAILED, 20)])
    value = registry.get_sample_value
    assert value("gzia_action_duration_seconds_sum", {"status": "OK"}) == pytest.approx(1.5)
    assert value("gzia_action_duration_seconds_count", {"status": "OK"}) == 1
    assert value("gzia_action_duration_seconds_count", {"status": "FAILED"}) == 1
    assert value("gzia_action_duration_seconds_bucket", {"status": "FAILED", "le": "0.01"}) == 0
    assert value("gzia_action_duration_seconds_bucket", {"status": "FAILED", "le": "0.1"}) == 1
    assert value("gzia_action_duration_seconds_bucket", {"status": "OK", "le": "1.0"}) == 0
    assert value("gzia_action_duration_seconds_bucket", {"status": "OK", "le": "2.5"}) == 1


def test_action_duration_buckets_are_inclusive_and_cumulative(metrics: Metrics, registry: CollectorRegistry) -> None:
    """A duration equal to a bound counts in that bucket (le); beyond the last bound only in +Inf."""
    metrics.observe_actions([(Status.OK, 10), (Status.OK, 3_600_001), (Status.OK, 0)])
    value = registry.get_sample_value
    assert value("gzia_action_duration_seconds_bucket", {"status": "OK", "le": "0.01"}) == 2
    assert value("gzia_action_duration_seconds_bucket", {"status": "OK", "le": "3600.0"}) == 2
    assert value("gzia_action_duration_seconds_bucket", {"status": "OK", "le": "+Inf"}) == 3
    assert value("gzia_action_duration_seconds_count", {"status": "OK"}) == 3


def test_mark_written_uses_the_injected_clock(metrics: Metrics, registry: CollectorRegistry) -> None:
    """mark_written sets the freshness gauge from the clock it is given."""
    metrics.mark_written(clock=lambda: 1_700_000_000.5)
    assert registry.get_sample_value("gzia_last_event_timestamp_seconds") == 1_700_000_000.5


def test_count_reload_tracks_the_last_result(metrics: Metrics, registry: CollectorRegistry) -> None:
    """count_reload counts by result and the gauge shows whether the last reload applied."""
    metrics.count_reload(applied=False)
    assert registry.get_sample_value("gzia_config_last_reload_successful") == 0
    metrics.count_reload(applied=True)
    assert registry.get_sample_value("gzia_config_last_reload_successful") == 1
    assert registry.get_sample_value("gzia_config_reloads_total", {"result": "refused"}) == 1
    assert registry.get_sample_value("gzia_config_reloads_total", {"result": "applied"}) == 1


def test_totals_sum_over_labels(metrics: Metrics) -> None:
    """totals() sums each main counter over its labels, for STATUS= lines and reports."""
    metrics.events_received.inc(5)
    metrics.count_written({(Stage.READ, Status.OK): 2, (Stage.FINISH, Status.FAILED): 1})
    metrics.events_rejected.labels(RejectReason.BACKWARD_TRANSITION.value).inc()
    metrics.events_rejected.labels(RejectReason.MALFORMED.value).inc(2)
    metrics.write_errors.labels("ENOSPC").inc()
    expected = {"received": 5, "written": 3, "rejected": 3, "duplicates": 0, "write_errors": 1}
    assert metrics.totals() == expected


class _CountingCollector(Collector):
    """A family in the registry that counts how often the registry is walked."""

    def __init__(self) -> None:
        self.walks = 0

    def collect(self) -> Iterator[Metric]:
        self.walks += 1
        return iter([])


def test_status_counters_read_each_family_once_and_never_walk_the_registry(
    metrics: Metrics, registry: CollectorRegistry
) -> None:
    """status_counters() reads the counters from their own objects: the registry (with the process
    collector reading /proc) is not collected at all, where get_sample_value collected it per value."""
    walks = _CountingCollector()
    registry.register(walks)
    metrics.events_received.inc(4)
    metrics.count_written({(Stage.READ, Status.OK): 2, (Stage.PENDING, Status.OK): 1})
    metrics.events_rejected.labels(RejectReason.FINISH_WITHOUT_START.value).inc()
    metrics.write_errors.labels("EIO").inc(2)
    metrics.count_redaction("github-token")
    metrics.count_redaction("github-token")
    assert metrics.status_counters() == {
        "received": 4,
        "written": 3,
        "rejected": 1,
        "rejected_by_reason": {"finish_without_start": 1},
        "duplicates": 0,
        "write_errors": 2,
        "redacted": 2,
        "redacted_by_pattern": {"github-token": 2},
    }
    assert walks.walks == 0


def test_build_info_names_version_and_python(metrics: Metrics, registry: CollectorRegistry) -> None:
    """gzia_build_info is 1 with the collector's version and the Python version as labels."""
    labels = {"version": "1.2.3", "python": platform.python_version()}
    assert registry.get_sample_value("gzia_build_info", labels) == 1


@pytest.mark.parametrize(
    ("code", "kind"),
    [(errno.ENOSPC, "ENOSPC"), (errno.EIO, "EIO"), (errno.EROFS, "EROFS"), (errno.EPIPE, "other"), (None, "other")],
)
def test_write_error_kind_maps_to_a_fixed_set(code: int | None, kind: str) -> None:
    """write_error_kind keeps the label set fixed: known errnos by name, anything else 'other'."""
    exc = OSError(code, "boom") if code is not None else OSError("no errno")
    assert write_error_kind(exc) == kind


def test_every_metric_is_documented(metrics: Metrics, registry: CollectorRegistry) -> None:
    """docs/operations.md's metrics table lists exactly the gzia_ metrics the collector exports (and
    the sharded front's own gauge, which only a front makes, and the per-root one)."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"^\| `(gzia_[a-z_]+)` \|", docs, re.MULTILINE))
    exported = {
        sample.name
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if sample.name.startswith("gzia_") and not sample.name.endswith(("_created", "_bucket", "_count", "_sum"))
    }
    exported |= {
        family.name
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        if family.type == "histogram" and family.name.startswith("gzia_")
    }
    # gzia_root_size_bytes has a series per root served, none before; gzia_http_requests_total one
    # per endpoint answered; the usage counters one per agent that reported usage; the oldest open
    # cycle one per agent with an open cycle.
    assert documented == exported | {
        "gzia_shares_answering",
        "gzia_root_size_bytes",
        "gzia_http_requests_total",
        "gzia_tokens_total",
        "gzia_cost_usd_total",
        "gzia_oldest_open_action_seconds",
    }


def test_open_cycle_gauges_bound_the_agent_label(metrics: Metrics, registry: CollectorRegistry) -> None:
    """The ages come from the source the service sets; agents past the bound share 'other' (their oldest)."""
    ages = {f"agent-{number:02d}": float(number) for number in range(MAX_AGENT_LABELS + 3)}
    metrics.open_cycles.source = lambda: (ages, 4)
    samples = {
        (sample.name, sample.labels.get("agent")): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if sample.name in ("gzia_oldest_open_action_seconds", "gzia_hung_actions")
    }
    assert samples[("gzia_hung_actions", None)] == 4
    assert samples[("gzia_oldest_open_action_seconds", "agent-00")] == 0
    assert samples[("gzia_oldest_open_action_seconds", "other")] == MAX_AGENT_LABELS + 2
    assert len(samples) == MAX_AGENT_LABELS + 2


def test_usage_is_counted_by_kind_and_a_bounded_set_of_agents(metrics: Metrics, registry: CollectorRegistry) -> None:
    """count_usage adds tokens by kind and cost per agent; agents past the bound share 'other'."""
    metrics.count_usage([("claude", ((10, 5, 100, 0), 0.25, "m"))])
    metrics.count_usage([("claude", ((1, 1, 0, 0), 0.5, ""))])
    for number in range(MAX_AGENT_LABELS + 3):
        metrics.count_usage([(f"agent-{number}", ((1, 0, 0, 0), 0.0, ""))])
    value = registry.get_sample_value
    assert value("gzia_tokens_total", {"kind": "input", "agent": "claude"}) == 11
    assert value("gzia_tokens_total", {"kind": "cache_read", "agent": "claude"}) == 100
    assert value("gzia_cost_usd_total", {"agent": "claude"}) == 0.75
    assert value("gzia_tokens_total", {"kind": "input", "agent": "other"}) == 4
    assert value("gzia_tokens_total", {"kind": "input", "agent": f"agent-{MAX_AGENT_LABELS}"}) is None


def test_the_root_label_is_a_short_stable_id_never_the_path(metrics: Metrics, registry: CollectorRegistry) -> None:
    """The per-root gauge is labelled by 12 hex digits of the path's hash: bounded in length, the
    same across restarts, different for different roots."""
    long_root = Path("/home/someone/" + "deep/" * 200 + ".harness")
    metrics.root_size.labels(root_id(long_root)).set(123)
    text = generate_latest(registry).decode()
    assert f'gzia_root_size_bytes{{root="{root_id(long_root)}"}} 123.0' in text
    assert "someone" not in text
    assert re.fullmatch(r"[0-9a-f]{12}", root_id(long_root))
    assert root_id(long_root) == root_id(Path(str(long_root))) != root_id(Path("/other/.harness"))
