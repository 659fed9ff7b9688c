"""Prometheus metrics of the collector, on a registry the caller owns (a fresh one per test).

Names follow Prometheus conventions: one ``gzia_`` prefix, base units, ``_total`` on counters. Labels
only ever take values from small fixed sets (stage, status, :class:`RejectReason`, error kinds):
never a session id or error text. The one exception, the ``agent`` of the usage counters, is
bounded: the first :data:`MAX_AGENT_LABELS` agent names seen have their own value, later ones share
``other``.
"""

from __future__ import annotations

import bisect
import errno
import hashlib
import itertools
import platform
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from gz_ia.client.protocol import RejectReason
from gz_ia.client.redaction import DEFAULT_RULES
from gz_ia.client.schema import Stage, Status
from gz_ia.client.usage import TOKEN_KINDS

__all__ = [
    "HTTP_HOOK_OUTCOMES",
    "HTTP_REFUSALS",
    "MAX_AGENT_LABELS",
    "OTLP_REJECT_REASONS",
    "RELOAD_RESULTS",
    "SPOOL_OUTCOMES",
    "WRITE_ERROR_KINDS",
    "ActionDurations",
    "Metrics",
    "OpenCycleGauges",
    "root_id",
    "write_error_kind",
]

_LATENCY_BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_DURATION_BUCKETS: Final = (0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
WRITE_ERROR_KINDS: Final = ("ENOSPC", "EIO", "EROFS", "EDQUOT", "ENOENT", "EACCES", "other")
RELOAD_RESULTS: Final = ("applied", "refused")
SPOOL_OUTCOMES: Final = ("adopted", "quarantined")
OTLP_REJECT_REASONS: Final = ("too_large", "encoding", "content_type", "protobuf", "json", "root")
"""Why an OTLP export is refused (the ``reason`` of ``gzia_otlp_rejected_total``)."""
MAX_AGENT_LABELS: Final = 32
"""Agent names that get a label value of their own on the usage counters (later ones: ``other``)."""
OTHER_AGENT: Final = "other"


def write_error_kind(exc: OSError) -> str:
    """Map an OSError to one of :data:`WRITE_ERROR_KINDS`."""
    name = errno.errorcode.get(exc.errno or 0, "other")
    return name if name in WRITE_ERROR_KINDS else "other"


def _samples(counter: Counter) -> Iterator[tuple[dict[str, str], float]]:
    """A counter's ``_total`` samples (its ``_created`` ones left out), collected once."""
    for family in counter.collect():
        for sample in family.samples:
            if sample.name.endswith("_total"):
                yield sample.labels, sample.value


def _sum(counter: Counter) -> float:
    return sum(value for _labels, value in _samples(counter))


def _by_label(counter: Counter, label: str) -> dict[str, int]:
    return {labels[label]: int(value) for labels, value in _samples(counter)}


def root_id(path: Path) -> str:
    """The ``root`` label of a session root: 12 hex digits of the SHA-256 of its path.

    Paths are long and say where users work; the id is short, stable across restarts, and shown
    beside the path in ``gz-ia status``. One series per root served since the start.
    """
    return hashlib.sha256(str(path).encode()).hexdigest()[:12]


def _bound_label(bound: float) -> str:
    """A bucket bound as prometheus_client writes ``le`` (``1.0``, ``0.01``, ``3600.0``)."""
    return repr(float(bound))


class ActionDurations(Collector):
    """The histogram of FINISH durations by status, observed a batch at a time.

    ``prometheus_client.Histogram.observe`` takes locks and walks the buckets in Python, which at
    hundreds of thousands of events a second was a tenth of the collector's time. Here a batch's
    durations are sorted into buckets with :func:`bisect.bisect_left` on the event loop, and the
    family is built only when Prometheus scrapes (a custom collector, as prometheus_client allows).
    """

    def __init__(self, name: str, documentation: str, buckets_seconds: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self._bounds_ms = [bound * 1000 for bound in buckets_seconds]
        self._labels = [_bound_label(bound) for bound in buckets_seconds] + ["+Inf"]
        self._counts = {status: [0] * (len(buckets_seconds) + 1) for status in Status}
        self._sums_ms = dict.fromkeys(Status, 0)

    def observe(self, durations: Iterable[tuple[Status, int]]) -> None:
        """Count each ``(status, duration_ms)`` pair."""
        bounds = self._bounds_ms
        counts = self._counts
        sums = self._sums_ms
        for status, duration in durations:
            counts[status][bisect.bisect_left(bounds, duration)] += 1
            sums[status] += duration

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=["status"])
        for status, counts in self._counts.items():
            cumulative = list(itertools.accumulate(counts))
            family.add_metric(
                [status.value], list(zip(self._labels, cumulative, strict=True)), self._sums_ms[status] / 1000
            )
        yield family


HTTP_HOOK_OUTCOMES: Final = ("staged", "nothing", "disabled", "refused", "invalid")
"""What became of a hook payload posted over HTTP (``gzia_http_hook_payloads_total{outcome}``)."""
HOOK_DROP_OUTCOMES: Final = ("logged", "quarantined")
"""What became of a hook's drop in the inbox (``gzia_hook_drops_total{outcome}``)."""
FLEET_ROLES: Final = ("ship", "hub")
"""The sides of the fleet's lag (``gzia_fleet_lag_events{role}``)."""
FLEET_HUB_OUTCOMES: Final = ("written", "duplicate", "rejected")
"""What became of a message a hub took (``gzia_fleet_hub_events_total{outcome}``)."""
FLEET_REFUSALS: Final = ("host_mismatch", "subject", "malformed", "host_not_served")
"""Why a hub refused a message (``gzia_fleet_refused_total{reason}``)."""


class OpenCycleGauges(Collector):
    """``gzia_oldest_open_action_seconds{agent}`` and ``gzia_hung_actions``, computed when scraped.

    The ages come from the sessions, which this floor does not read: the service sets :attr:`source`,
    which returns the age of each agent's oldest open cycle and how many cycles are open longer than
    ``hung_after``. Past :data:`MAX_AGENT_LABELS` agents, the rest share ``other`` (their oldest).
    """

    def __init__(self) -> None:
        self.source: Callable[[], tuple[dict[str, float], int]] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Ask :attr:`source` once and yield both gauges."""
        ages, hung = self.source() if self.source is not None else ({}, 0)
        oldest = GaugeMetricFamily(
            "gzia_oldest_open_action_seconds",
            "Age of the agent's oldest open action cycle (READ or PENDING without FINISH).",
            labels=["agent"],
        )
        bounded: dict[str, float] = {}
        for index, agent in enumerate(sorted(ages)):
            label = agent if index < MAX_AGENT_LABELS else OTHER_AGENT
            bounded[label] = max(bounded.get(label, 0.0), ages[agent])
        for agent, age in sorted(bounded.items()):
            oldest.add_metric([agent], age)
        yield oldest
        yield GaugeMetricFamily(
            "gzia_hung_actions", "Action cycles open longer than alerts.hung_after (default 300 s).", value=hung
        )


class Metrics:
    """Every metric the collector exports.

    Args:
        registry: where to register; the process, platform and GC collectors are added to it when
            ``process_metrics`` is true.
        version: the collector's version for ``gzia_build_info``.
    """

    def __init__(self, registry: CollectorRegistry, *, version: str, process_metrics: bool = True) -> None:
        self.registry = registry
        self.endpoint_address = "off"
        """The Prometheus endpoint's ``host:port`` (``auto`` resolved), or ``off``."""
        self.endpoint_url: str | None = None
        """The URL it serves on, once bound."""
        self.endpoint_error: str | None = None
        """Why it could not bind (the events are served regardless)."""
        if process_metrics:
            ProcessCollector(registry=registry)
            PlatformCollector(registry=registry)
            GCCollector(registry=registry)
        self.build_info = Info("gzia_build", "Version of the running collector.", registry=registry)
        self.build_info.info({"version": version, "python": platform.python_version()})
        self.events_received = Counter(
            "gzia_events_received_total", "Events received from clients, before validation.", registry=registry
        )
        self.received_bytes = Counter(
            "gzia_received_bytes_total", "Wire bytes received from clients.", registry=registry
        )
        self.events_written = Counter(
            "gzia_events_written_total",
            "Events appended to session files.",
            ["stage", "status"],
            registry=registry,
        )
        self.events_rejected = Counter(
            "gzia_events_rejected_total", "Events or frames refused, by reason.", ["reason"], registry=registry
        )
        self.duplicates = Counter(
            "gzia_events_duplicate_total",
            "Resent events dropped because they were already written.",
            registry=registry,
        )
        self.written_bytes = Counter(
            "gzia_written_bytes_total", "Bytes appended to session and rejects files.", registry=registry
        )
        self.write_errors = Counter(
            "gzia_write_errors_total", "Failed appends or syncs, by errno.", ["kind"], registry=registry
        )
        self.rejects_unrecorded = Counter(
            "gzia_rejects_unrecorded_total",
            "Rejected events answered to their client with their reason, whose record the rejects file lost.",
            registry=registry,
        )
        self.torn_repaired = Counter(
            "gzia_torn_lines_repaired_total",
            "Torn last lines (a crash mid-write) moved aside at recovery.",
            registry=registry,
        )
        self.rotations = Counter("gzia_rotations_total", "Segment rotations.", registry=registry)
        self.retention_deleted_files = Counter(
            "gzia_retention_deleted_files_total", "Files removed by retention.", registry=registry
        )
        self.retention_deleted_bytes = Counter(
            "gzia_retention_deleted_bytes_total", "Bytes removed by retention.", registry=registry
        )
        self.connections = Gauge("gzia_connections_active", "Connected clients.", registry=registry)
        self.connections_total = Counter("gzia_connections_total", "Client connections accepted.", registry=registry)
        self.connections_refused = Counter(
            "gzia_connections_refused_total", "Connections refused (other uid).", registry=registry
        )
        self.connections_over_limit = Counter(
            "gzia_connections_over_limit_total",
            "Connections refused busy past max_connections (limit=total) or max_connections_per_uid (limit=per_uid).",
            ["limit"],
            registry=registry,
        )
        for limit in ("total", "per_uid"):
            self.connections_over_limit.labels(limit)
        self.http = HttpMetrics(registry)
        self.sessions_active = Gauge(
            "gzia_sessions_active",
            "Sessions held in memory with at least one open action (idle sessions are released past 20,000).",
            registry=registry,
        )
        self.sessions_known = Gauge(
            "gzia_sessions_loaded", "Sessions whose state is held in memory.", registry=registry
        )
        self.open_files = Gauge("gzia_open_files", "Session and rejects files held open.", registry=registry)
        self.live_subscribers = Gauge(
            "gzia_live_subscribers", "Live subscriptions open (socket, /live, the web view).", registry=registry
        )
        self.live_buffered_bytes = Gauge(
            "gzia_live_buffered_bytes", "Bytes of written events held for live subscribers.", registry=registry
        )
        self.live_evicted = Counter(
            "gzia_live_evicted_frames", "Written events evicted from the live rings by their bounds.", registry=registry
        )
        self.backlog_bytes = Gauge("gzia_backlog_bytes", "Accepted bytes waiting to be written.", registry=registry)
        self.backlog_batches = Gauge(
            "gzia_backlog_batches", "Batches received and waiting for their verdict.", registry=registry
        )
        self.paused_connections = Gauge(
            "gzia_connections_paused", "Connections whose reading is paused by backpressure.", registry=registry
        )
        self.write_latency = Histogram(
            "gzia_write_duration_seconds",
            "Time from a batch's arrival to its verdict (write, and sync when durable).",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.fsync_latency = Histogram(
            "gzia_fsync_duration_seconds",
            "Time one durable write pass spent making its files durable (fdatasync or syncfs; durability = fsync).",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.root_size = Gauge(
            "gzia_root_size_bytes",
            "Bytes of the files retention manages under a root (by root id, see gz-ia status); "
            "measured by retention passes.",
            ["root"],
            registry=registry,
        )
        self.action_duration = ActionDurations(
            "gzia_action_duration_seconds", "duration_ms of FINISH events, in seconds.", _DURATION_BUCKETS
        )
        registry.register(self.action_duration)
        self.open_cycles = OpenCycleGauges()
        registry.register(self.open_cycles)
        self.last_event = Gauge(
            "gzia_last_event_timestamp_seconds",
            "Unix time of the last event written (for staleness alerts).",
            registry=registry,
        )
        self.spool_adopted = Counter(
            "gzia_spool_adopted_events_total",
            "Events delivered from the disk spools of clients that exited before delivering them.",
            registry=registry,
        )
        self.spool_files = Counter(
            "gzia_spool_files_total",
            "Spool files of clients that exited, by outcome: adopted (delivered, deleted) or quarantined "
            "(moved aside: they can never be adopted).",
            ["outcome"],
            registry=registry,
        )
        self.http_hook_payloads = Counter(
            "gzia_http_hook_payloads_total",
            "Hook payloads agents posted over HTTP, by outcome: staged (events staged for the "
            "next write pass), nothing (no event to log), disabled (GZ_IA_DISABLED), refused (the root "
            "cannot be used) or invalid (not a payload the mapping can use).",
            ["outcome"],
            registry=registry,
        )
        for outcome in HTTP_HOOK_OUTCOMES:  # a fixed label set, shown at zero from the start
            self.http_hook_payloads.labels(outcome)
        self.hook_drops = Counter(
            "gzia_hook_drops_total",
            "Hook payloads taken from the hook inbox, by outcome: logged (mapped and delivered or spooled "
            "as the command hook does) or quarantined (damaged: moved into the spool's quarantine).",
            ["outcome"],
            registry=registry,
        )
        for outcome in HOOK_DROP_OUTCOMES:
            self.hook_drops.labels(outcome)
        self.fleet_connected = Gauge(
            "gzia_fleet_connected", "1 while the fleet's NATS connection is up (0: shipping waits).", registry=registry
        )
        self.fleet_lag = Gauge(
            "gzia_fleet_lag_events",
            "Fleet lag, by role: ship, events written here and not yet acknowledged by the stream; hub, events "
            "in the stream not yet written here.",
            ["role"],
            registry=registry,
        )
        for role in FLEET_ROLES:
            self.fleet_lag.labels(role)
        self.fleet_shipped = Counter(
            "gzia_fleet_shipped_events_total",
            "Events the fleet stream acknowledged from this machine.",
            registry=registry,
        )
        self.fleet_hub_events = Counter(
            "gzia_fleet_hub_events_total",
            "Events a hub took from the stream, by outcome: written, duplicate (held already: acknowledged, not "
            "written again) or rejected (refused by validation here).",
            ["outcome"],
            registry=registry,
        )
        for outcome in FLEET_HUB_OUTCOMES:
            self.fleet_hub_events.labels(outcome)
        self.fleet_refused = Counter(
            "gzia_fleet_refused_total",
            "Fleet messages a hub refused, by reason: host_mismatch (the subject names another host than the one "
            "claimed), subject, malformed, host_not_served.",
            ["reason"],
            registry=registry,
        )
        for reason in FLEET_REFUSALS:
            self.fleet_refused.labels(reason)
        self.client_dropped = Counter(
            "gzia_client_dropped_events_total",
            "Events clients reported dropping because their buffers were full.",
            registry=registry,
        )
        self.redactions = Counter(
            "gzia_redactions_total",
            "Secrets replaced by a mark before being stored, by rule (a default rule's name, a configured "
            "rule's, or other: a mark of an unknown rule found already in a client's spooled event).",
            ["pattern"],
            registry=registry,
        )
        self._redaction_children: dict[str, Counter] = {}
        self.tokens = Counter(
            "gzia_tokens_total",
            "Tokens of the usage records written, by kind (input, output, cache_read, cache_creation) "
            "and agent (the first 32 agent names; later ones as other).",
            ["kind", "agent"],
            registry=registry,
        )
        self.cost_usd = Counter(
            "gzia_cost_usd_total",
            "Cost in US dollars of the usage records written, as the agents report it, by agent.",
            ["agent"],
            registry=registry,
        )
        self._agent_labels: set[str] = set()
        self.otlp_rejected = Counter(
            "gzia_otlp_rejected_total",
            "OTLP/HTTP exports refused, by reason: too_large (413), encoding, content_type, protobuf, json, "
            "root (400).",
            ["reason"],
            registry=registry,
        )
        for reason in OTLP_REJECT_REASONS:
            self.otlp_rejected.labels(reason)
        self.otlp_busy = Counter(
            "gzia_otlp_busy_total",
            "OTLP/HTTP exports answered 429 (retry later): the collector held as much as it takes.",
            registry=registry,
        )
        self.otlp_records = Counter(
            "gzia_otlp_records_total",
            "Spans and log records received over OTLP that became cycles, by signal and outcome: staged "
            "(written, or a duplicate of one written), joined (the agent's hooks already hold the cycle), "
            "refused (a number no event holds: in the rejects file).",
            ["signal", "outcome"],
            registry=registry,
        )
        for signal in ("traces", "logs"):
            for outcome in ("staged", "joined", "refused"):
                self.otlp_records.labels(signal, outcome)
        self.config_reloads = Counter(
            "gzia_config_reloads_total",
            "Configuration reloads (SIGHUP), by result: applied or refused.",
            ["result"],
            registry=registry,
        )
        self.config_last_reload_successful = Gauge(
            "gzia_config_last_reload_successful",
            "1 if the last configuration reload was applied (or none was asked), 0 if it was refused.",
            registry=registry,
        )
        self.config_last_reload_successful.set(1)
        self.reload_refused = ""
        """Why the last configuration reload was refused ("" once one is applied): ``gz-ia status``."""
        # Create every labelled child up front so that zeros are exported before the first event.
        for stage in Stage:
            for status in Status:
                self.events_written.labels(stage.value, status.value)
        for reason in RejectReason:
            self.events_rejected.labels(reason.value)
        for kind in WRITE_ERROR_KINDS:
            self.write_errors.labels(kind)
        for result in RELOAD_RESULTS:
            self.config_reloads.labels(result)
        for outcome in SPOOL_OUTCOMES:
            self.spool_files.labels(outcome)
        for rule in (*DEFAULT_RULES, "other"):
            self.count_redaction(rule, 0)
        self._written_children = {
            (stage, status): self.events_written.labels(stage.value, status.value)
            for stage in Stage
            for status in Status
        }

    def count_written(self, counts: dict[tuple[Stage, Status], int]) -> None:
        """Add a batch's written events, counted per (stage, status)."""
        for key, value in counts.items():
            self._written_children[key].inc(value)

    def count_redaction(self, rule: str, amount: int = 1) -> None:
        """Count ``amount`` secrets replaced by ``rule`` (a configured rule's series appears at its first)."""
        child = self._redaction_children.get(rule)
        if child is None:
            child = self._redaction_children[rule] = self.redactions.labels(rule)
        child.inc(amount)

    def count_usage(self, usage: Iterable[tuple[str, tuple[tuple[int, int, int, int], float, str]]]) -> None:
        """Add a batch's written usage records, ``(agent, (tokens by kind, cost, model))``."""
        for agent, (tokens, cost, _model) in usage:
            label = agent
            if label not in self._agent_labels:
                if len(self._agent_labels) >= MAX_AGENT_LABELS:
                    label = OTHER_AGENT
                else:
                    self._agent_labels.add(label)
            for kind, count in zip(TOKEN_KINDS, tokens, strict=True):
                if count:
                    self.tokens.labels(kind, label).inc(count)
            if cost:
                self.cost_usd.labels(label).inc(cost)

    def observe_actions(self, durations: Iterable[tuple[Status, int]]) -> None:
        """Record a batch's written FINISH events as ``(status, duration_ms)`` pairs."""
        self.action_duration.observe(durations)

    def status_counters(self) -> dict[str, object]:
        """The counters ``gz-ia status`` reports, each family read once from its own metric object.

        Never through the registry: ``CollectorRegistry.get_sample_value`` collects every family
        (the process collector reads /proc) on each call, and is meant for unit tests.
        """
        rejected = _by_label(self.events_rejected, "reason")
        errors = _by_label(self.write_errors, "kind")
        redacted = _by_label(self.redactions, "pattern")
        return {
            "received": int(_sum(self.events_received)),
            "written": int(_sum(self.events_written)),
            "rejected": sum(rejected.values()),
            "rejected_by_reason": {reason: count for reason, count in rejected.items() if count},
            "duplicates": int(_sum(self.duplicates)),
            "write_errors": sum(errors.values()),
            "redacted": sum(redacted.values()),
            "redacted_by_pattern": {rule: count for rule, count in redacted.items() if count},
        }

    def endpoint_report(self) -> dict[str, object]:
        """Where Prometheus finds this collector, for ``gz-ia status``: the address, and the URL
        served or why none is."""
        return {"address": self.endpoint_address, "url": self.endpoint_url, "error": self.endpoint_error}

    def totals(self) -> dict[str, int]:
        """Return the main counters summed over their labels, cheaply (no process metrics read)."""
        return {
            "received": int(_sum(self.events_received)),
            "written": int(_sum(self.events_written)),
            "rejected": int(_sum(self.events_rejected)),
            "duplicates": int(_sum(self.duplicates)),
            "write_errors": int(_sum(self.write_errors)),
        }

    def exposition(self) -> str:
        """This process's metrics in the Prometheus text format (what a sharded collector's front merges)."""
        return generate_latest(self.registry).decode()

    def count_reload(self, *, applied: bool, refused: str = "") -> None:
        """Count one configuration reload and remember whether it was applied (else, why not)."""
        self.config_reloads.labels(RELOAD_RESULTS[0] if applied else RELOAD_RESULTS[1]).inc()
        self.config_last_reload_successful.set(1 if applied else 0)
        self.reload_refused = "" if applied else refused

    def mark_written(self, clock: Callable[[], float] = time.time) -> None:
        """Set the freshness gauge to now."""
        self.last_event.set(clock())


HTTP_REFUSALS: Final = ("other_uid", "unknown_peer", "busy", "wrong_host", "cross_site", "no_key", "wrong_key")
"""Why the HTTP side refuses a connection or a request (``gzia_http_refused_total{reason}``)."""


class HttpMetrics:
    """What the loopback HTTP side answered, and whom it refused (the counters its server calls)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "gzia_http_requests_total",
            "Requests answered on the HTTP side, by endpoint and status code.",
            ["endpoint", "code"],
            registry=registry,
        )
        self.refused_connections = Counter(
            "gzia_http_refused_total",
            "HTTP connections and requests refused: another uid (other_uid), an owner the kernel could not "
            "name (unknown_peer), too many connections of that uid (busy), a Host that does not name this "
            "server (wrong_host: DNS rebinding), a browser's cross-site request (cross_site), a writing "
            "request without the user's key or with another (no_key, wrong_key).",
            ["reason"],
            registry=registry,
        )
        for reason in HTTP_REFUSALS:
            self.refused_connections.labels(reason)

    def answered(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()

    def refused(self, reason: str) -> None:
        self.refused_connections.labels(reason).inc()
