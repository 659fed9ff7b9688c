"""One set of metrics, one status report and one gc report for a sharded collector, from its processes.

Prometheus scrapes the front only. At each scrape the front asks every share for its exposition
(a ``metrics`` query on the share's private socket, from the metrics server's thread) and merges
the families: counters, histograms and most gauges are summed over the processes, a few are the
front's alone (its connections and bytes received, its reloads, its build) and a few take the
highest value (the freshness timestamp, the deepest backlog, the most descriptors one process holds,
which is what its limit bounds). The process metrics are summed too,
so ``process_resident_memory_bytes`` is the whole collector's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from gz_ia.client.protocol import Error, Report
from gz_ia.collector.service.gc_report import merge_gc_reports
from gz_ia.collector.service.status import StatusUnavailable, query

if TYPE_CHECKING:
    from gz_ia.collector.metrics import Metrics

    from .share_link import CollectorMessage

__all__ = ["MergedMetrics", "MergingFront", "merge_families", "merge_replies", "merge_reports", "merged_exposition"]

log = logging.getLogger("gz_ia.collector")

_SCRAPE_TIMEOUT: Final = 2.0
FRONT_ONLY: Final = frozenset(
    {
        "gzia_build_info",
        "gzia_connections_active",
        "gzia_connections",
        "gzia_connections_refused",
        "gzia_connections_over_limit",
        "gzia_connections_paused",
        "gzia_received_bytes",
        "gzia_config_reloads",
        "gzia_config_last_reload_successful",
        "process_max_fds",
        "process_start_time_seconds",
        "python_info",
    }
)
"""Families the front counts itself: a share sees the front's connections, not the clients'."""
HIGHEST: Final = frozenset(
    {"gzia_last_event_timestamp_seconds", "gzia_backlog_batches", "gzia_open_files", "process_open_fds"}
)
"""Families where the highest process counts: descriptors, for one, are limited per process
(``process_max_fds``, ``max_open_files``)."""


class MergedMetrics(Collector):
    """A custom collector: the front's own registry merged with every share's exposition.

    Args:
        own: the front's registry.
        shares: the shares' private sockets.
    """

    def __init__(self, own: CollectorRegistry, shares: Sequence[Path]) -> None:
        self.own = own
        self.shares = shares

    def collect(self) -> Iterator[Metric]:
        texts = []
        for path in self.shares:
            try:
                text = query(path, timeout=_SCRAPE_TIMEOUT, what="metrics")["metrics"]
            except (StatusUnavailable, KeyError) as exc:
                log.warning("metrics of the share on %s left out of this scrape: %s", path, exc)
                continue
            assert isinstance(text, str)
            texts.append(text)
        yield from merge_families(self.own.collect(), texts)
        up = GaugeMetricFamily("gzia_shares_answering", "Shares whose metrics this scrape includes.")
        up.add_metric([], len(texts))
        yield up


def merge_families(own: Iterable[Metric], texts: Iterable[str]) -> list[Metric]:
    """The front's own families merged with the shares' expositions (see the module's docstring)."""
    families: dict[str, Metric] = {_name(family): family for family in own}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {
        name: {_key(sample): sample.value for sample in family.samples} for name, family in families.items()
    }
    for text in texts:
        for family in text_string_to_metric_families(text):
            name = _name(family)
            if name in FRONT_ONLY or name.endswith("_created"):
                # A counter's or histogram's ``_created`` is its own family in the text format;
                # the front's own families carry theirs.
                continue
            if name not in families:
                families[name] = family
                values[name] = {}
            merged = values[name]
            for sample in family.samples:
                key = _key(sample)
                if key not in merged:
                    merged[key] = sample.value
                elif name in HIGHEST:
                    merged[key] = max(merged[key], sample.value)
                else:
                    merged[key] += sample.value
    result = []
    for name, family in families.items():
        out = Metric(family.name, family.documentation, family.type, family.unit)
        out.samples = [Sample(sample, dict(labels), value) for (sample, labels), value in values[name].items()]
        result.append(out)
    return result


def merged_exposition(own: CollectorRegistry, texts: list[str]) -> str:
    """:func:`merge_families` in the text format (the answer to a ``metrics`` query at the front)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(merge_families(own.collect(), texts)))
    return generate_latest(registry).decode()


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def _name(family: Metric) -> str:
    """A family's name as the text format spells it: an info family is read back as ``<name>_info``."""
    return family.name + "_info" if family.type == "info" else family.name


def _key(sample: Sample) -> tuple[str, tuple[tuple[str, str], ...]]:
    return sample.name, tuple(sorted(sample.labels.items()))


def merge_reports(reports: list[dict[str, object]]) -> dict[str, object]:
    """The shares' status reports as one: numbers summed, roots merged by path, healthy if all are."""
    merged: dict[str, object] = dict(reports[0]) if reports else {}
    merged["healthy"] = all(report.get("healthy") is True for report in reports)
    merged["reasons"] = [reason for report in reports for reason in _listed(report.get("reasons"))]
    roots: dict[object, dict[str, object]] = {}
    for report in reports:
        listed = report.get("roots")
        for root in listed if isinstance(listed, list) else []:
            if isinstance(root, dict):
                known = roots.setdefault(root.get("path"), {})
                _add(known, root)
    merged["roots"] = list(roots.values())
    counters: dict[str, object] = {}
    for report in reports:
        part = report.get("counters")
        if isinstance(part, dict):
            _add(counters, part)
    merged["counters"] = counters
    return merged


def _listed(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _add(into: dict[str, object], part: dict[str, object]) -> None:
    """Add ``part`` into ``into`` key by key: numbers summed, maps recursively, anything else kept."""
    for key, value in part.items():
        current = into.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float | dict):
            into.setdefault(key, value)
        elif isinstance(value, dict):
            nested = current if isinstance(current, dict) else {}
            _add(nested, value)
            into[key] = nested
        else:
            into[key] = (current if isinstance(current, int | float) else 0) + value


class MergingFront(Protocol):
    """What :func:`merge_replies` uses of the front (:class:`.front.Front` is one): its own metrics,
    whose families the shares' expositions merge into, and its status over the shares' reports."""

    @property
    def metrics(self) -> Metrics:
        """The front's own metrics."""
        ...

    def status(self, reports: list[dict[str, object]]) -> dict[str, object]:
        """``gz-ia status`` of the whole collector, from the shares' ``reports``."""
        ...


def merge_replies(replies: list[CollectorMessage], front: MergingFront) -> CollectorMessage:
    """The one reply a client gets for a frame that went to every share (a hello or a query).

    Raises:
        ValueError: the shares answered the same frame with different kinds of message.
    """
    for reply in replies:
        if isinstance(reply, Error):
            return reply  # the first share's error: every share reads the same frame alike
    first = replies[0]
    if any(type(reply) is not type(first) for reply in replies):
        raise ValueError("the shares answered one frame differently")
    if isinstance(first, Report):
        reports = [reply.data for reply in replies if isinstance(reply, Report)]
        if "gc" in first.data:  # gz-ia gc: each share removed its own sessions
            return Report(data={"gc": merge_gc_reports([_gc_part(report) for report in reports])})
        if "metrics" in first.data:
            texts = [str(report.get("metrics", "")) for report in reports]
            return Report(data={"metrics": merged_exposition(front.metrics.registry, texts)})
        return Report(data=front.status(reports))
    return first  # Welcome: the same from every share


def _gc_part(report: dict[str, object]) -> dict[str, object]:
    part = report.get("gc")
    return part if isinstance(part, dict) else {}
