"""`gz-ia export otel`: a real collector, the exporter process, and a loopback OTLP/HTTP receiver decoding protobuf."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from tests.conftest import free_port, wait_for

CLI = "from gz_ia.collector.cli import main; main()"


class Receiver:
    """A loopback OTLP/HTTP logs endpoint: decodes every request, can refuse (503) or go away entirely."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.records: list[dict[str, Any]] = []
        self.requests = 0
        self.refused = 0
        self.mode = "ok"
        self.lock = threading.Lock()
        self.server: http.server.ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/logs"

    def start(self) -> None:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver.lock:
                    receiver.requests += 1
                    if receiver.mode == "refuse" or self.path != "/v1/logs":
                        receiver.refused += 1
                        self.send_response(503)
                        self.end_headers()
                        return
                    request = ExportLogsServiceRequest()
                    request.ParseFromString(body)
                    receiver.records += flatten(request)
                payload = ExportLogsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Go away: the port refuses connections until :meth:`start`."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def keys(self) -> list[tuple[str, int]]:
        with self.lock:
            return [(record["attributes"]["session.id"], record["attributes"]["gz_ia.seq"]) for record in self.records]


def flatten(request: ExportLogsServiceRequest) -> list[dict[str, Any]]:
    """Turn an OTLP request into one plain dict per log record, with its resource and scope."""
    out: list[dict[str, Any]] = []
    for resource_logs in request.resource_logs:
        resource = {kv.key: _value(kv.value) for kv in resource_logs.resource.attributes}
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                out.append(
                    {
                        "resource": resource,
                        "scope": scope_logs.scope.name,
                        "time_unix_nano": record.time_unix_nano,
                        "observed_time_unix_nano": record.observed_time_unix_nano,
                        "severity_number": record.severity_number,
                        "severity_text": record.severity_text,
                        "event_name": record.event_name,
                        "body": _value(record.body),
                        "trace_id": record.trace_id.hex(),
                        "span_id": record.span_id.hex(),
                        "attributes": {kv.key: _value(kv.value) for kv in record.attributes},
                    }
                )
    return out


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class Exporter:
    """`gz-ia export otel` as a real subprocess pointed at the receiver."""

    def __init__(self, collector: Any, receiver: Receiver, state_dir: Path) -> None:
        self.collector = collector
        self.receiver = receiver
        self.state_dir = state_dir
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = collector.base / "exporter.log"

    def args(self, *extra: str) -> list[str]:
        return [
            sys.executable, "-c", CLI, "export", "otel",
            "--state-dir", str(self.state_dir),
            "--poll-interval", "0.05",
            "--retry-max", "0.3",
            "--batch-size", "7",
            "--metrics-address", f"127.0.0.1:{self.metrics_port}",
            *extra,
        ]  # fmt: skip

    @property
    def env(self) -> dict[str, str]:
        environment = dict(self.collector.env)
        environment["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{self.receiver.port}"
        environment["OTEL_EXPORTER_OTLP_TIMEOUT"] = "2"
        environment["OTEL_SERVICE_NAME"] = "gz-ia-test"
        return environment

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.args(), stdout=log, stderr=log, env=self.env)
        wait_for(lambda: "ready" in self.log(), message="exporter ready")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(20) == 0, self.log()

    def metric(self, name: str) -> float:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise AssertionError(f"metric {name} not exposed")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(name="receiver")
def _receiver() -> Iterator[Receiver]:
    """A running loopback OTLP/HTTP receiver."""
    receiver = Receiver(free_port())
    receiver.start()
    yield receiver
    receiver.stop()


@pytest.fixture(name="exporter")
def _exporter(collector: Any, receiver: Receiver) -> Iterator[Exporter]:
    """An exporter (not yet started) for the collector's root, with its positions in a private directory."""
    exporter = Exporter(collector, receiver, collector.base / "otel-state")
    yield exporter
    exporter.close()


def log_events(collector: Any, session_id: str, count: int, *, parent: str | None = None, start: int = 0) -> None:
    """Log ``count`` READ events in distinct actions of one session and wait until all are accepted."""
    client = collector.client()
    for number in range(start, start + count):
        client.log(
            session_id=session_id, parent_session_id=parent, action=f"task {number}", stage="READ", agent="claude"
        )
    assert client.flush(20)
    assert client.stats().accepted == count
    client.close()


def expected_keys(collector: Any) -> list[tuple[str, int]]:
    """Every (session, seq) the collector wrote."""
    return sorted((sid, line["seq"]) for sid, lines in collector.all_sessions().items() for line in lines)


def test_records_carry_the_documented_mapping(collector: Any, receiver: Receiver, exporter: Exporter) -> None:
    """Each event arrives once as a log record with the documented attributes, severity, resource and trace ids."""
    client = collector.client()
    client.log(session_id="root", action="plan", stage="READ", agent="claude", role="planner")
    client.log(session_id="root", action="plan", stage="FINISH", agent="claude", role="planner", duration_ms=42)
    client.log(session_id="kid", parent_session_id="root", action="test", stage="PENDING", agent="agy",
               attrs={"tokens": 12})  # fmt: skip
    client.log(session_id="kid", parent_session_id="root", action="test", stage="FINISH", agent="agy",
               status="FAILED", error="boom", duration_ms=7)  # fmt: skip
    client.log(session_id="grandkid", parent_session_id="kid", action="lint", stage="READ", agent="agy")
    assert client.flush(10)
    client.close()
    exporter.start()
    wait_for(lambda: len(receiver.records) >= 5, message="5 records")
    time.sleep(0.3)  # anything extra would show up here
    assert sorted(receiver.keys()) == expected_keys(collector)
    by_key = {(r["attributes"]["session.id"], r["attributes"]["gz_ia.seq"]): r for r in receiver.records}
    root_trace = hashlib.sha256(b"root").digest()[:16].hex()
    for (session_id, _seq), record in by_key.items():
        assert record["trace_id"] == root_trace  # one trace for the whole tree
        assert record["span_id"] == hashlib.sha256(session_id.encode()).digest()[:8].hex()
        assert record["event_name"] == "gz_ia.stage_event"
        assert record["body"] is None
        assert record["resource"]["service.name"] == "gz-ia-test"
        assert record["scope"] == "gz_ia.collector.otel_export"
    stored = {(sid, line["seq"]): line for sid, lines in collector.all_sessions().items() for line in lines}
    failed = by_key[("kid", 2)]
    assert failed["severity_number"] == 17
    assert failed["severity_text"] == "ERROR"
    assert failed["attributes"] == {
        "session.id": "kid",
        "gen_ai.agent.name": "agy",
        "gz_ia.agent": "agy",
        "gz_ia.action": "test",
        "gz_ia.stage": "FINISH",
        "gz_ia.status": "FAILED",
        "gz_ia.seq": 2,
        "gz_ia.root_session_id": "root",
        "gz_ia.parent_session_id": "root",
        "gz_ia.duration_ms": 7,
        "exception.message": "boom",
    }
    assert by_key[("kid", 1)]["attributes"]["gz_ia.attr.tokens"] == 12
    assert by_key[("root", 1)]["severity_number"] == 9
    assert by_key[("root", 1)]["attributes"]["gz_ia.role"] == "planner"
    assert "gz_ia.parent_session_id" not in by_key[("root", 1)]["attributes"]
    assert by_key[("grandkid", 1)]["attributes"]["gz_ia.root_session_id"] == "root"
    from datetime import datetime

    for key, record in by_key.items():
        written = datetime.fromisoformat(stored[key]["timestamp"].replace("Z", "+00:00"))
        assert abs(record["time_unix_nano"] - int(written.timestamp() * 1e9)) < 2000
        assert record["observed_time_unix_nano"] >= record["time_unix_nano"]
    assert exporter.metric("gzia_otel_exported_events_total") == 5
    assert exporter.metric("gzia_otel_lag_events") == 0


def test_a_backend_outage_loses_nothing_and_never_slows_ingestion(
    collector: Any, receiver: Receiver, exporter: Exporter
) -> None:
    """503s, then a dead port: ingestion keeps its pace, and afterwards every event arrives exactly once."""
    log_events(collector, "s1", 10)
    exporter.start()
    wait_for(lambda: len(receiver.records) == 10, message="first 10 records")
    receiver.mode = "refuse"
    started = time.monotonic()
    log_events(collector, "s1", 30, start=10)
    log_events(collector, "s2", 15)
    assert time.monotonic() - started < 5  # ingestion does not wait for the backend
    wait_for(lambda: receiver.refused >= 2, message="refused attempts")
    wait_for(lambda: exporter.metric("gzia_otel_export_failures_total") >= 2, message="failures in metrics")
    wait_for(lambda: exporter.metric("gzia_otel_lag_events") == 45, message="lag in metrics")
    assert exporter.metric("gzia_otel_lag_seconds") > 0
    assert exporter.metric("gzia_otel_backend_up") == 0
    receiver.stop()  # now nobody listens at all
    log_events(collector, "s2", 5, start=15)
    time.sleep(1.0)
    assert len(receiver.records) == 10
    receiver.mode = "ok"
    receiver.start()
    wait_for(lambda: len(receiver.records) >= 60, timeout=30, message="all 60 records after the outage")
    time.sleep(0.3)
    assert sorted(receiver.keys()) == expected_keys(collector)
    assert len(receiver.keys()) == 60
    wait_for(lambda: exporter.metric("gzia_otel_lag_events") == 0, message="lag back to 0")
    assert exporter.metric("gzia_otel_exported_events_total") == 60
    assert exporter.metric("gzia_otel_backend_up") == 1


def test_exporter_and_collector_restarts_export_each_event_once(
    collector: Any, receiver: Receiver, exporter: Exporter
) -> None:
    """Stopping and restarting the exporter and the collector neither repeats nor skips an event."""
    log_events(collector, "r1", 20)
    exporter.start()
    wait_for(lambda: len(receiver.records) == 20, message="first 20 records")
    exporter.stop()
    log_events(collector, "r1", 15, start=20)  # written while the exporter is away
    collector.restart()
    log_events(collector, "r2", 10, parent="r1")
    exporter.start()
    wait_for(lambda: len(receiver.records) >= 45, message="45 records")
    collector.restart()  # the exporter reads files: a collector restart is nothing to it
    log_events(collector, "r2", 5, start=10, parent="r1")
    wait_for(lambda: len(receiver.records) >= 50, message="50 records")
    time.sleep(0.5)
    exporter.stop()
    assert sorted(receiver.keys()) == expected_keys(collector)
    assert len(receiver.keys()) == 50
    positions = sorted(p.name for p in (exporter.state_dir).glob("*/*.json"))
    assert positions == ["r1.json", "r2.json"]


def test_once_exits_1_while_the_backend_refuses(collector: Any, receiver: Receiver, exporter: Exporter) -> None:
    """`--once` exports what is there and exits 0, or exits 1 without moving its position while refused."""
    log_events(collector, "o1", 3)
    receiver.mode = "refuse"
    refused = subprocess.run(
        exporter.args("--once"), env=exporter.env, capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 1, refused.stderr
    assert receiver.records == []
    receiver.mode = "ok"
    done = subprocess.run(
        exporter.args("--once"), env=exporter.env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert sorted(receiver.keys()) == [("o1", 1), ("o1", 2), ("o1", 3)]


def test_export_without_the_extra_exits_2_naming_it(collector: Any, tmp_path: Path) -> None:
    """Without OpenTelemetry importable, `gz-ia export otel` exits 2 naming `pip install 'gz-ia-collector[otel]'`."""
    blocked = "import sys; sys.modules['opentelemetry'] = None; " + CLI
    result = subprocess.run(
        [sys.executable, "-c", blocked, "export", "otel", "--state-dir", str(tmp_path), "--once"],
        env={**collector.env, "PYTHONWARNINGS": "ignore"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "pip install 'gz-ia-collector[otel]'" in result.stderr
    assert not os.listdir(tmp_path)
