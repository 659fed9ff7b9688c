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
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from tests.conftest import free_port, wait_for
from tests.fixtures.backends import cycle_start_ns

from gz_ia.collector.otel.spans import cycle_span_id, session_span_id

CLI = "from gz_ia.collector.cli import main; main()"


class Receiver:
    """A loopback OTLP/HTTP endpoint (logs and traces): decodes every request; can refuse (503), be slow, or go away.

    ``slow``: the request is stored, then answered only when the test calls :meth:`release`, as a
    backend that keeps what it gets but answers later than the exporter waits. ``late``: stored,
    then answered after ``delay`` seconds, as a backend that is slow but does answer.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.records: list[dict[str, Any]] = []
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.refused = 0
        self.slow_requests = 0
        self.mode = "ok"
        self.refuse_paths: set[str] = set()
        """Paths answered 405, as Phoenix answers /v1/logs."""
        self.delay = 0.0
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.server: http.server.ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/logs"

    def release(self) -> None:
        """Answer every request held in ``slow`` mode (too late for the exporter that sent it)."""
        self.released.set()

    def start(self) -> None:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver.lock:
                    receiver.requests += 1
                    mode = receiver.mode
                    if self.path in receiver.refuse_paths:
                        receiver.refused += 1
                        self.send_response(405)
                        self.send_header("Content-Length", "18")
                        self.end_headers()
                        self.wfile.write(b"Method Not Allowed")
                        return
                    if mode == "refuse" or self.path not in ("/v1/logs", "/v1/traces"):
                        receiver.refused += 1
                        self.send_response(503)
                        self.end_headers()
                        return
                    if self.path == "/v1/logs":
                        logs = ExportLogsServiceRequest()
                        logs.ParseFromString(body)
                        receiver.records += flatten(logs)
                        payload = ExportLogsServiceResponse().SerializeToString()
                    else:
                        traces = ExportTraceServiceRequest()
                        traces.ParseFromString(body)
                        receiver.spans += flatten_spans(traces)
                        payload = ExportTraceServiceResponse().SerializeToString()
                    if mode in ("slow", "late"):
                        receiver.slow_requests += 1
                if mode == "slow":
                    receiver.released.wait(60)
                elif mode == "late":
                    time.sleep(receiver.delay)  # the simulated backend's latency, not a test threshold
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the exporter gave up waiting: the request is stored all the same

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Go away: the port refuses connections until :meth:`start`."""
        self.released.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        self.released = threading.Event()

    def keys(self) -> list[tuple[str, int]]:
        with self.lock:
            return [(record["attributes"]["session.id"], record["attributes"]["gz_ia.seq"]) for record in self.records]

    def span_ids(self) -> set[str]:
        with self.lock:
            return {span["span_id"] for span in self.spans}


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


def flatten_spans(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """Turn an OTLP trace request into one plain dict per span."""
    out: list[dict[str, Any]] = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    {
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "status_code": span.status.code,
                        "status_message": span.status.message,
                        "attributes": {kv.key: _value(kv.value) for kv in span.attributes},
                        "events": [
                            (event.name, event.time_unix_nano, {kv.key: _value(kv.value) for kv in event.attributes})
                            for event in span.events
                        ],
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
            "--session-idle", "0",
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

    def start(self, *extra: str, env: dict[str, str] | None = None) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.args(*extra), stdout=log, stderr=log, env={**self.env, **(env or {})})
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
                    return float(line.rsplit(" ", 1)[1])
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
    wait_for(lambda: exporter.metric("gzia_otel_exported_events_total") >= 5, message="5 records accepted")
    assert exporter.metric("gzia_otel_exported_events_total") == 5
    assert exporter.metric("gzia_otel_lag_events") == 0
    exporter.stop()  # once it has exited, the receiver holds everything it will ever get
    assert sorted(receiver.keys()) == expected_keys(collector)
    by_key = {(r["attributes"]["session.id"], r["attributes"]["gz_ia.seq"]): r for r in receiver.records}
    root_trace = hashlib.sha256(b"root").digest()[:16].hex()
    for (session_id, _seq), record in by_key.items():
        assert record["trace_id"] == root_trace  # one trace for the whole tree
        span = session_span_id("root", session_id).to_bytes(8, "big").hex()
        assert record["span_id"] == span  # the session's span, so a backend links logs and traces
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


def test_a_backend_outage_loses_nothing_and_never_slows_ingestion(
    collector: Any, receiver: Receiver, exporter: Exporter
) -> None:
    """503s, then a dead port: ingestion keeps its pace, and afterwards every event arrives exactly once."""
    log_events(collector, "s1", 10)
    exporter.start()
    wait_for(lambda: len(receiver.records) == 10, message="first 10 records")
    receiver.mode = "refuse"
    log_events(collector, "s1", 30, start=10)
    log_events(collector, "s2", 15)
    # Ingestion does not wait for the backend: every event is on disk while it has refused them all.
    assert (len(collector.session_lines("s1")), len(collector.session_lines("s2"))) == (40, 15)
    assert len(receiver.records) == 10
    wait_for(lambda: receiver.refused >= 2, message="refused attempts")
    wait_for(lambda: exporter.metric("gzia_otel_export_failures_total") >= 2, message="failures in metrics")
    wait_for(lambda: exporter.metric("gzia_otel_lag_events") == 45, message="lag in metrics")
    assert exporter.metric("gzia_otel_lag_seconds") > 0
    assert exporter.metric("gzia_otel_backend_up") == 0
    receiver.stop()  # now nobody listens at all
    log_events(collector, "s2", 5, start=15)
    # The exporter has read the 5 new events and counts them behind: it tried and could not send.
    wait_for(lambda: exporter.metric("gzia_otel_lag_events") == 50, message="the new events behind")
    assert len(receiver.records) == 10
    receiver.mode = "ok"
    receiver.start()
    wait_for(lambda: len(receiver.records) >= 60, timeout=30, message="all 60 records after the outage")
    wait_for(lambda: exporter.metric("gzia_otel_lag_events") == 0, message="lag back to 0")
    assert exporter.metric("gzia_otel_exported_events_total") == 60
    assert exporter.metric("gzia_otel_backend_up") == 1
    exporter.stop()  # once it has exited, the receiver holds everything it will ever get
    assert sorted(receiver.keys()) == expected_keys(collector)
    assert len(receiver.keys()) == 60


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
    # This exporter's 30 (15 + 10 + 5) accepted: every batch it sent had its answer.
    wait_for(lambda: exporter.metric("gzia_otel_exported_events_total") >= 30, message="50 records accepted")
    exporter.stop()  # once it has exited, the receiver holds everything it will ever get
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
    state = tmp_path / "export-state"
    state.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", blocked, "export", "otel", "--state-dir", str(state), "--once"],
        env={**collector.env, "PYTHONWARNINGS": "ignore"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "pip install 'gz-ia-collector[otel]'" in result.stderr
    assert not os.listdir(state)


def _hex(value: int, size: int) -> str:
    return value.to_bytes(size, "big").hex()


def _ns(stored: dict[str, Any]) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(stored["timestamp"].replace("Z", "+00:00")).timestamp() * 1_000_000) * 1000


def log_tree(collector: Any) -> None:
    """A root session with an OK and a FAILED cycle and a cycle left open; a subagent whose later
    events omit the parent; a grandchild."""
    client = collector.client()
    client.log(session_id="root", action="plan", stage="READ", agent="claude", role="planner")
    client.log(session_id="root", action="plan", stage="PENDING", agent="claude", role="planner")
    client.log(session_id="root", action="plan", stage="FINISH", agent="claude", role="planner", duration_ms=42)
    client.log(session_id="kid", parent_session_id="root", action="test", stage="PENDING", agent="agy",
               attrs={"tokens": 12})  # fmt: skip
    client.log(session_id="kid", action="test", stage="FINISH", agent="agy", status="FAILED", error="boom")
    client.log(session_id="grandkid", parent_session_id="kid", action="lint", stage="READ", agent="agy")
    client.log(session_id="grandkid", parent_session_id="kid", action="lint", stage="FINISH", agent="agy")
    client.log(session_id="root", action="deploy", stage="PENDING", agent="claude")  # still open
    assert client.flush(10)
    client.close()


def expected_spans() -> dict[str, str]:
    """span id -> what it is, for the tree :func:`log_tree` writes (the open cycle and the session it
    keeps from being final excluded)."""
    return {
        _hex(session_span_id("root", "kid"), 8): "session kid",
        _hex(session_span_id("root", "grandkid"), 8): "session grandkid",
        _hex(cycle_span_id("root", "root", 1), 8): "plan",
        _hex(cycle_span_id("root", "kid", 1), 8): "test",
        _hex(cycle_span_id("root", "grandkid", 1), 8): "lint",
    }


def check_tree(collector: Any, spans: list[dict[str, Any]]) -> None:
    """Assert ids, parents, names, status, times and events of every span of :func:`log_tree`."""
    stored = collector.all_sessions()
    trace = hashlib.sha256(b"root").digest()[:16].hex()
    by_id: dict[str, dict[str, Any]] = {}
    for span in spans:
        assert span["trace_id"] == trace  # one trace for the whole tree, kid's parentless events included
        previous = by_id.setdefault(span["span_id"], span)
        if previous["attributes"]["openinference.span.kind"] == "TOOL":
            assert previous == span  # a re-sent cycle span is the same span
        assert span["attributes"]["session.id"] == "root"  # backends group the whole tree by it
    session = {sid: _hex(session_span_id("root", sid), 8) for sid in ("root", "kid", "grandkid")}
    assert by_id[session["kid"]]["parent_span_id"] == session["root"]
    assert by_id[session["grandkid"]]["parent_span_id"] == session["kid"]
    assert by_id[session["kid"]]["name"] == "invoke_agent agy"
    assert by_id[session["kid"]]["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert by_id[session["kid"]]["attributes"]["openinference.span.kind"] == "AGENT"
    assert by_id[session["kid"]]["attributes"]["gz_ia.session.id"] == "kid"
    assert by_id[session["kid"]]["status_code"] == 2  # ERROR: one of its actions failed
    assert by_id[session["grandkid"]]["status_code"] == 1  # OK
    plan = by_id[_hex(cycle_span_id("root", "root", 1), 8)]
    test = by_id[_hex(cycle_span_id("root", "kid", 1), 8)]
    lint = by_id[_hex(cycle_span_id("root", "grandkid", 1), 8)]
    assert (plan["parent_span_id"], test["parent_span_id"], lint["parent_span_id"]) == (
        session["root"],
        session["kid"],
        session["grandkid"],
    )
    assert plan["name"] == "plan"
    assert plan["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert plan["attributes"]["openinference.span.kind"] == "TOOL"
    assert plan["attributes"]["gen_ai.tool.name"] == plan["attributes"]["tool.name"] == "plan"
    assert plan["attributes"]["gz_ia.session.id"] == "root"
    assert plan["attributes"]["gz_ia.role"] == "planner"
    assert plan["attributes"]["gen_ai.agent.name"] == "claude"
    assert plan["attributes"]["gz_ia.duration_ms"] == 42
    assert plan["status_code"] == 1  # OK
    assert [event[0] for event in plan["events"]] == ["READ", "PENDING", "FINISH"]
    plan_start = cycle_start_ns(stored["root"][0], stored["root"][2])
    assert (plan["start"], plan["end"]) == (plan_start, _ns(stored["root"][2]))
    assert [event[1] for event in plan["events"]] == [_ns(line) for line in stored["root"][:3]]
    assert test["status_code"] == 2  # ERROR
    assert test["status_message"] == "boom"
    assert test["events"][-1] == ("exception", test["end"], {"exception.type": "gz_ia.ActionFailed",
                                                             "exception.message": "boom"})  # fmt: skip
    assert test["attributes"]["gz_ia.attr.tokens"] == 12
    assert "llm.token_count.total" not in test["attributes"]  # a bare total is no usage record: counted nowhere
    assert (test["start"], test["end"]) == (cycle_start_ns(stored["kid"][0], stored["kid"][1]), _ns(stored["kid"][1]))
    root_span = by_id.get(session["root"])
    if root_span is not None:  # sent once the session is final: its deploy cycle finished
        assert root_span["status_code"] == 1
        assert root_span["parent_span_id"] == ""
        assert (root_span["start"], root_span["end"]) == (_ns(stored["root"][0]), _ns(stored["root"][-1]))
        assert root_span["attributes"]["gz_ia.events"] == len(stored["root"])


def test_cycles_and_sessions_arrive_as_one_trace_tree(collector: Any, receiver: Receiver, exporter: Exporter) -> None:
    """Each finished cycle is a span under its session's span; subagents nest; an open cycle waits for its FINISH."""
    log_tree(collector)
    exporter.start()
    expected = expected_spans()
    wait_for(lambda: receiver.span_ids() >= set(expected), message="the tree's spans")
    wait_for(lambda: exporter.metric("gzia_otel_lag_events") == 0, message="caught up")
    # The open "deploy" cycle is not exported, nor the root session's span while it is open: a
    # backend that keeps the first version of a span id would keep it unfinished.
    assert receiver.span_ids() == set(expected)
    check_tree(collector, receiver.spans)
    root_trace = hashlib.sha256(b"root").digest()[:16].hex()
    assert {record["trace_id"] for record in receiver.records} == {root_trace}  # kid's parentless event too
    client = collector.client()
    client.log(session_id="root", action="deploy", stage="FINISH", agent="claude")
    assert client.flush(10)
    client.close()
    deploy = _hex(cycle_span_id("root", "root", 4), 8)
    wait_for(lambda: deploy in receiver.span_ids(), message="the deploy cycle once finished")
    span = next(span for span in receiver.spans if span["span_id"] == deploy)
    stored = collector.all_sessions()["root"]
    assert (span["start"], span["end"]) == (cycle_start_ns(stored[3], stored[4]), _ns(stored[4]))
    root_id = _hex(session_span_id("root", "root"), 8)
    wait_for(lambda: root_id in receiver.span_ids(), message="the root session's span once final")
    assert [s["end"] for s in receiver.spans if s["span_id"] == root_id] == [_ns(stored[4])]  # sent once, final
    check_tree(collector, receiver.spans)


def test_two_open_cycles_of_one_action_are_two_spans(collector: Any, receiver: Receiver, exporter: Exporter) -> None:
    """Events with cycle ids: two runs of one action open at once end as two spans, each with its own outcome."""
    client = collector.client()
    client.log(session_id="cc", action="edit", cycle="a", stage="PENDING", agent="claude")
    client.log(session_id="cc", action="edit", cycle="b", stage="PENDING", agent="claude")
    client.log(session_id="cc", action="edit", cycle="b", stage="FINISH", agent="claude", status="FAILED", error="no")
    client.log(session_id="cc", action="edit", cycle="a", stage="FINISH", agent="claude")
    assert client.flush(10)
    client.close()
    exporter.start()
    first_a, first_b = (_hex(cycle_span_id("cc", "cc", seq), 8) for seq in (1, 2))
    wait_for(lambda: {first_a, first_b} <= receiver.span_ids(), message="both cycles")
    stored = collector.all_sessions()["cc"]
    spans = {span["span_id"]: span for span in receiver.spans}
    assert (spans[first_a]["attributes"]["gz_ia.cycle"], spans[first_a]["status_code"]) == ("a", 1)
    assert (spans[first_b]["attributes"]["gz_ia.cycle"], spans[first_b]["status_code"]) == ("b", 2)
    assert (spans[first_a]["start"], spans[first_a]["end"]) == (_ns(stored[0]), _ns(stored[3]))
    assert (spans[first_b]["start"], spans[first_b]["end"]) == (_ns(stored[1]), _ns(stored[2]))
    assert [event[0] for event in spans[first_a]["events"]] == ["PENDING", "FINISH"]


def test_spans_survive_a_backend_down_then_slow_then_up(collector: Any, receiver: Receiver, exporter: Exporter) -> None:
    """Down (refused), slow (stored but answered after the timeout), up: every span arrives, re-sends keep their ids."""
    receiver.stop()
    log_tree(collector)
    exporter.start(env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    wait_for(lambda: exporter.metric("gzia_otel_export_failures_total") >= 2, message="refused while down")
    assert exporter.metric("gzia_otel_export_unanswered_total") == 0  # a refused connection stored nothing
    assert "no answer in time" not in exporter.log()
    receiver.mode = "slow"
    receiver.start()
    wait_for(lambda: receiver.slow_requests >= 2, timeout=30, message="a re-send after a request timed out")
    assert exporter.metric("gzia_otel_export_unanswered_total") >= 1
    assert "no answer in time; the next attempts wait up to 2.0 s" in exporter.log()
    receiver.mode = "ok"
    receiver.release()
    expected = expected_spans()
    wait_for(lambda: receiver.span_ids() >= set(expected), timeout=30, message="every span")
    wait_for(lambda: exporter.metric("gzia_otel_lag_events") == 0, timeout=30, message="caught up")
    assert receiver.span_ids() == set(expected)
    check_tree(collector, receiver.spans)
    exporter.stop()
    assert sorted(receiver.keys()) == sorted(set(receiver.keys())) == expected_keys(collector)


def test_a_slow_backend_gets_each_log_record_at_most_once_per_unanswered_attempt(
    collector: Any, receiver: Receiver, exporter: Exporter
) -> None:
    """A backend that answers after the timeout: the timeout doubles, so records stop being re-sent.

    Log records have no ids a backend merges on, so each unanswered attempt may duplicate its batch;
    with a fixed timeout the same batch would be sent (and stored) again forever.
    """
    log_events(collector, "w1", 5)
    receiver.mode, receiver.delay = "late", 1.5
    exporter.start("--signals", "logs", env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    wait_for(lambda: "the next attempts wait up to 2.0 s" in exporter.log(), timeout=30, message="a timeout")
    wait_for(lambda: exporter.metric("gzia_otel_exported_events_total") == 5, timeout=60, message="answered in time")
    log_events(collector, "w1", 5, start=5)
    wait_for(lambda: exporter.metric("gzia_otel_exported_events_total") == 10, timeout=60, message="the next batch")
    unanswered = exporter.metric("gzia_otel_export_unanswered_total")
    exporter.stop()
    keys = receiver.keys()
    assert sorted(set(keys)) == expected_keys(collector)
    assert unanswered >= 1
    assert all(keys.count(key) <= 1 + unanswered for key in set(keys))
    assert receiver.spans == []  # --signals logs sends no spans


def archives(collector: Any, session_id: str) -> list[Path]:
    """The session's archived segments on disk."""
    return sorted((collector.root / "sessions").glob(f"{session_id}.events.*.jsonl*"))


def stored_seqs(collector: Any, session_id: str) -> list[int]:
    """Every seq still stored for the session, archives included, through the collector's reader."""
    from gz_ia.collector.reading import iter_events

    return [entry.event.seq for entry in iter_events(collector.root, session_id)]


def test_retention_keeps_unsent_segments_up_to_a_bound(collector: Any, receiver: Receiver, exporter: Exporter) -> None:
    """Unsent archives outlive max_archives, at most max_held_archives of them; the rest is reported."""
    collector.write_config("[rotation]\nmax_events = 5\n[retention]\nmax_archives = 1\nmax_held_archives = 3\n")
    collector.restart()
    log_events(collector, "h", 5)
    receiver.mode = "refuse"
    refused = subprocess.run(
        exporter.args("--once"), env=exporter.env, capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 1, refused.stderr
    assert list((collector.root / "state" / "export-holds").glob("*.json"))  # the exporter needs segment 1
    for start in range(5, 35, 5):  # one batch each: the collector rotates between write passes
        log_events(collector, "h", 5, start=start)
    # Rotation, compression and retention run on the collector's worker: wait until they settle at
    # max_archives plus the bound of held ones, every archive compressed.
    wait_for(
        lambda: [path.suffix for path in archives(collector, "h")] == [".gz"] * (1 + 3),
        message="retention keeping max_archives + max_held_archives",
    )
    kept = stored_seqs(collector, "h")
    assert kept[0] > 1  # beyond the bound, the oldest unsent archives went all the same
    receiver.mode = "ok"
    exporter.start()  # both signals: each deleted event is still counted once
    wait_for(lambda: exporter.metric("gzia_otel_exported_events_total") == len(kept), message="the rest exported")
    assert exporter.metric("gzia_otel_dropped_events_total") == kept[0] - 1
    exporter.stop()
    assert sorted(receiver.keys()) == [("h", seq) for seq in kept]
    assert f"session h: {kept[0] - 1} events were deleted before export (logs)" in exporter.log()
    assert "events were deleted before export (traces)" in exporter.log()  # fewer: open cycles were folded
    for start in (35, 40):
        log_events(collector, "h", 5, start=start)
    again = subprocess.run(
        exporter.args("--once"),
        env=exporter.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    for start in (45, 50, 55):
        log_events(collector, "h", 5, start=start)
    # Everything up to seq 45 is sent: the hold moved on, and retention deletes what was sent.
    wait_for(lambda: stored_seqs(collector, "h")[0] > 35, message="sent archives deleted")
    assert sorted(receiver.keys()) == [("h", seq) for seq in range(kept[0], 46)]


def test_a_refused_signal_never_holds_back_the_other(collector: Any, receiver: Receiver) -> None:
    """A backend without /v1/logs (405): every span arrives, the refusal is reported once with the
    endpoint and the answer, in the metrics and in `gz-ia status`; once accepted, the records follow."""
    from gz_ia.collector.otel.positions import default_state_dir

    exporter = Exporter(collector, receiver, default_state_dir())  # where `gz-ia status` looks
    try:
        receiver.refuse_paths = {"/v1/logs"}
        log_tree(collector)
        exporter.start()  # the default signals: traces and logs
        expected = expected_spans()
        wait_for(lambda: receiver.span_ids() >= set(expected), message="every span, logs refused")
        wait_for(lambda: receiver.refused >= 3, message="the logs retried")
        refused = [line for line in exporter.log().splitlines() if "OTLP logs REFUSED" in line]
        assert len(refused) == 1, exporter.log()  # once, however often retried
        assert f"by http://127.0.0.1:{receiver.port}/v1/logs: HTTP 405 Method Not Allowed" in refused[0]
        assert exporter.metric('gzia_otel_signal_refused{signal="logs"}') == 1
        assert exporter.metric('gzia_otel_signal_refused{signal="traces"}') == 0
        status = collector.gz_ia("status")
        assert f"otel export: pid {exporter.proc.pid if exporter.proc else 0}" in status.stdout, status.stdout
        assert f"logs: REFUSED by http://127.0.0.1:{receiver.port}/v1/logs: HTTP 405" in status.stdout
        assert f"traces: ok -> http://127.0.0.1:{receiver.port}/v1/traces" in status.stdout
        receiver.refuse_paths = set()  # the logs endpoint appears: the records that waited follow
        wait_for(lambda: len(receiver.records) == 8, message="the records once accepted")
        wait_for(lambda: "logs: ok" in collector.gz_ia("status").stdout, message="status: logs ok")
        assert exporter.metric('gzia_otel_signal_refused{signal="logs"}') == 0
        assert "OTLP logs: the backend accepts them again" in exporter.log()
        exporter.stop()
        assert "otel export" not in collector.gz_ia("status").stdout  # a stopped exporter is not listed
        assert sorted(receiver.keys()) == expected_keys(collector)
    finally:
        exporter.close()
