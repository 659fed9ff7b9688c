"""Prometheus for real: promtool lints the exposition, a real server scrapes a real collector.

prometheus and promtool come from the Debian package ``prometheus``; ``scripts/test`` installs it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CollectorProcess, free_port

from gz_ia.client import EventRejected, RejectReason, build_event

# The write and delivery path: run against one process and against a sharded collector.
pytestmark = pytest.mark.shards(1, 2)

REPO = Path(__file__).resolve().parents[2]
OPERATIONS = REPO / "docs" / "operations.md"

# (session, action, stage, status, error, duration_ms, expected rejection or None)
MIX: list[tuple[str, str, str, str, str | None, int | None, RejectReason | None]] = [
    ("prom-1", "index", "READ", "OK", None, None, None),
    ("prom-1", "index", "PENDING", "OK", None, None, None),
    ("prom-1", "index", "FINISH", "OK", None, 1500, None),
    ("prom-1", "build", "READ", "OK", None, None, None),
    ("prom-1", "build", "FINISH", "FAILED", "compiler crashed", 20, None),
    ("prom-2", "edit", "PENDING", "OK", None, None, None),
    ("prom-2", "edit", "READ", "OK", None, None, RejectReason.BACKWARD_TRANSITION),
    ("prom-2", "ghost", "FINISH", "OK", None, 5, RejectReason.FINISH_WITHOUT_START),
    ("prom-3", "ghost", "FINISH", "FAILED", "never began", 5, RejectReason.FINISH_WITHOUT_START),
]
EXPECTED_WRITTEN = {
    ("READ", "OK"): 2,
    ("READ", "FAILED"): 0,
    ("PENDING", "OK"): 2,
    ("PENDING", "FAILED"): 0,
    ("FINISH", "OK"): 1,
    ("FINISH", "FAILED"): 1,
}
EXPECTED_REJECTED = {"backward_transition": 1, "finish_without_start": 2}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: scripts/test installs it (Debian package `prometheus`)")
    return path


def _send_mix(collector: CollectorProcess) -> None:
    """Send MIX through the real client, one verdict at a time, and check each verdict."""
    client = collector.client()
    try:
        for session_id, action, stage, status, error, duration, rejection in MIX:
            event = build_event(
                session_id=session_id,
                action=action,
                stage=stage,
                agent="test",
                status=status,
                error=error,
                duration_ms=duration,
            )
            if rejection is None:
                client.send(event, timeout=20)
            else:
                with pytest.raises(EventRejected) as info:
                    client.send(event, timeout=20)
                assert info.value.reason == rejection
    finally:
        client.close()


def _code_block(marker: str) -> str:
    """Return the fenced yaml block of docs/operations.md that contains ``marker``."""
    blocks = re.findall(r"```yaml\n(.*?)```", OPERATIONS.read_text(), re.DOTALL)
    matching = [block for block in blocks if marker in block]
    assert len(matching) == 1, f"expected one yaml block with {marker!r} in {OPERATIONS}"
    return str(matching[0])


class Prometheus:
    """A real prometheus server scraping one target every second, on loopback, in a temp dir."""

    def __init__(self, binary: str, base: Path, target: str) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = base / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: gz-ia\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.log_path = base / "prometheus.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={base / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=log,
            )

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Run an instant query; return the result vector."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def wait_for_series(self, expr: str, timeout: float) -> list[dict[str, Any]]:
        """Poll until ``expr`` returns samples (the first scrape can take ~5-20 s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log_path.read_text()}")
            try:
                result = self.query(expr)
            except OSError:
                result = []
            if result:
                return result
            time.sleep(0.25)
        pytest.fail(f"prometheus returned nothing for {expr!r} within {timeout} s:\n{self.log_path.read_text()}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(name="prometheus_binary")
def _prometheus_binary() -> str:
    """The prometheus server binary (Debian package `prometheus`)."""
    return _tool("prometheus")


@pytest.fixture(name="promtool")
def _promtool() -> str:
    """promtool, from the same Debian package."""
    return _tool("promtool")


@pytest.fixture(name="start_prometheus")
def _start_prometheus(prometheus_binary: str, short_tmp: Path) -> Iterator[Any]:
    """Factory: start a real prometheus scraping ``target``; stopped at the end of the test."""
    started: list[Prometheus] = []

    def start(target: str) -> Prometheus:
        server = Prometheus(prometheus_binary, short_tmp / f"prometheus{len(started)}", target)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def _by(result: list[dict[str, Any]], *labels: str) -> dict[Any, int]:
    keyed = {}
    for sample in result:
        key = tuple(sample["metric"][label] for label in labels)
        keyed[key[0] if len(key) == 1 else key] = int(float(sample["value"][1]))
    return keyed


def test_exposition_passes_promtool_check_metrics(collector: CollectorProcess, promtool: str) -> None:
    """The real /metrics of a collector that saw accepted and rejected events lints clean with promtool."""
    _send_mix(collector)
    exposition = collector.metrics()
    assert "gzia_events_written_total" in exposition
    result = subprocess.run(
        [promtool, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_real_prometheus_scrapes_exact_counts(collector: CollectorProcess, start_prometheus: Any) -> None:
    """A real Prometheus scraping a real collector reports exactly what was sent, accepted and rejected."""
    _send_mix(collector)
    prometheus = start_prometheus(f"127.0.0.1:{collector.metrics_port}")
    received = prometheus.wait_for_series('gzia_events_received_total{job="gz-ia"}', timeout=60)
    assert _by(received, "job") == {"gz-ia": len(MIX)}
    assert _by(prometheus.query('up{job="gz-ia"}'), "job") == {"gz-ia": 1}

    written = _by(prometheus.query("gzia_events_written_total"), "stage", "status")
    assert written == EXPECTED_WRITTEN
    rejected = _by(prometheus.query("gzia_events_rejected_total > 0"), "reason")
    assert rejected == EXPECTED_REJECTED
    # Every label value exists from the start (zeros included), so sum() over a label is meaningful.
    all_reasons = _by(prometheus.query("gzia_events_rejected_total"), "reason")
    assert set(all_reasons) == {reason.value for reason in RejectReason}
    balance = prometheus.query("sum(gzia_events_written_total) + sum(gzia_events_rejected_total)")
    assert int(float(balance[0]["value"][1])) == len(MIX)

    finished = _by(prometheus.query("gzia_action_duration_seconds_count"), "status")
    assert finished == {"OK": 1, "FAILED": 1}
    duration_sum = _by(prometheus.query("gzia_action_duration_seconds_sum * 1000"), "status")
    assert duration_sum == {"OK": 1500, "FAILED": 20}
    build = prometheus.query("gzia_build_info")
    assert len(build) == 1
    assert build[0]["metric"]["version"]
    assert _by(prometheus.query("gzia_events_duplicate_total"), "job") == {"gz-ia": 0}
    assert prometheus.query("process_resident_memory_bytes")  # the default process metrics are there


def test_documented_scrape_config_passes_promtool(promtool: str, short_tmp: Path) -> None:
    """The sample prometheus.yml in docs/operations.md (with the shipped rule file) passes `promtool check config`."""
    shutil.copy(REPO / "deploy" / "prometheus" / "gz-ia-rules.yml", short_tmp / "gz-ia-rules.yml")
    config = short_tmp / "prometheus.yml"
    config.write_text(_code_block("scrape_configs:"))
    result = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
