"""The OTLP/HTTP receiver with the OpenTelemetry SDK's own exporters, in a real child process, and
under faults: GenAI spans become sessions and cycles, a re-sent export is not a second cycle, an
unreadable or oversized body is refused and counted while everything else still arrives."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from tests.conftest import CollectorProcess, wait_for

# A program instrumented with the GenAI conventions, as OpenInference or OpenLLMetry instrument one:
# an agent that hands work to a subagent, a model call with usage, a tool that works, one that fails.
SDK_PROGRAM = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

endpoint, encoding = sys.argv[1], sys.argv[2]
if encoding == "json":
    from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

exporter = OTLPSpanExporter(endpoint=endpoint + "/v1/traces")
provider = TracerProvider(resource=Resource.create({"service.name": "planner-app"}))
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("test")

with tracer.start_as_current_span("invoke_agent planner", attributes={
    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}) as planner:
    with tracer.start_as_current_span("chat m-1", attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m-1",
        "gen_ai.usage.input_tokens": 300, "gen_ai.usage.output_tokens": 20}):
        pass
    with tracer.start_as_current_span("execute_tool Read", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "Read", "gen_ai.tool.call.id": "call_1"}):
        pass
    with tracer.start_as_current_span("invoke_agent helper", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}) as helper:
        with tracer.start_as_current_span("execute_tool Bash", attributes={"gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "Bash", "gen_ai.tool.call.id": "call_2"}) as bash:
            bash.record_exception(RuntimeError("exit status 2"))
            bash.set_status(Status(StatusCode.ERROR, "exit status 2"))
    with tracer.start_as_current_span("something else"):
        pass
print(format(planner.get_span_context().span_id, "016x"), format(helper.get_span_context().span_id, "016x"))
provider.shutdown()
"""


def _run_sdk(collector: CollectorProcess, encoding: str) -> tuple[str, str]:
    result = subprocess.run(
        [sys.executable, "-c", SDK_PROGRAM, collector.http_url, encoding],
        env=collector.exporter_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Failed to export" not in result.stderr, result.stderr
    planner, helper = result.stdout.split()
    return planner, helper


def _cycles(lines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(line["action"], line["stage"], line["status"]) for line in lines]


def _post(url: str, body: bytes, content_type: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type, **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_the_sdk_exporters_genai_spans_become_sessions_and_cycles(collector: CollectorProcess, encoding: str) -> None:
    """invoke_agent spans are sessions (the helper under the planner), execute_tool spans cycles
    (READ for Read, PENDING for Bash, FAILED with the exception), the chat span a usage record;
    a span of no GenAI kind is dropped; every line is as a client's would be."""
    if encoding == "json":
        pytest.importorskip("opentelemetry.exporter.otlp.json.http")
    planner, helper = _run_sdk(collector, encoding)
    wait_for(lambda: {planner, helper} <= set(collector.all_sessions()), message="both agent sessions")
    sessions = collector.all_sessions()
    assert set(sessions) == {planner, helper}
    planner_lines = sessions[planner]
    assert sorted(_cycles(planner_lines)) == sorted(
        [
            ("model m-1", "READ", "OK"),
            ("model m-1", "FINISH", "OK"),
            ("Read", "READ", "OK"),
            ("Read", "FINISH", "OK"),
            ("agent planner", "READ", "OK"),
            ("agent planner", "FINISH", "OK"),
        ]
    )
    # The agent span names its agent; its children, exported before it, are the service's.
    assert {line["agent"] for line in planner_lines if line["action"] == "agent planner"} == {"planner"}
    assert {line["agent"] for line in planner_lines if line["action"] != "agent planner"} == {"planner-app"}
    read_finish = next(line for line in planner_lines if line["action"] == "Read" and line["stage"] == "FINISH")
    assert read_finish["cycle"] == "call_1"
    assert "duration_ms" in read_finish
    helper_lines = sessions[helper]
    # Its tool span was exported before the helper's span, which names the parent: the session takes it.
    assert {line["parent_session_id"] for line in helper_lines if line["action"] == "agent helper"} == {planner}
    bash = [line for line in helper_lines if line["action"] == "Bash"]
    assert [(line["stage"], line["status"]) for line in bash] == [("PENDING", "OK"), ("FINISH", "FAILED")]
    assert bash[1]["error"] == "RuntimeError: exit status 2"
    rows = {
        row["session_id"]: row
        for row in map(json.loads, collector.gz_ia("sessions", "--json", check=True).stdout.splitlines())
    }
    assert rows[planner]["tokens"]["total"] == 320
    assert rows[planner]["model"] == "m-1"
    assert rows[helper]["parent_session_id"] == planner
    assert rows[planner]["tree_tokens"]["total"] == 320
    assert collector.rejects() == []


def test_a_re_sent_export_is_not_a_second_cycle(collector: CollectorProcess) -> None:
    """The same export body posted twice (an exporter's retry after a timeout), and again after a
    restart, leaves one cycle: each span's events are written once."""
    body = _tool_span_body("abababababababababababababababab", "1111111111111111", "2222222222222222")
    url = collector.http_url + "/v1/traces"
    for _ in range(2):
        assert _post(url, body, "application/json", **collector.http_headers())[0] == 200
    collector.restart()
    assert _post(url, body, "application/json", **collector.http_headers())[0] == 200
    lines = collector.session_lines("2222222222222222")
    assert _cycles(lines) == [("Grep", "READ", "OK"), ("Grep", "FINISH", "OK")]


def _tool_span_body(trace: str, span: str, parent: str, *, tool: str = "Grep") -> bytes:
    """An OTLP JSON export of one execute_tool span (as the SDK's JSON exporter writes one)."""
    attributes = [
        {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
        {"key": "gen_ai.tool.name", "value": {"stringValue": tool}},
    ]
    spans = [
        {
            "traceId": trace,
            "spanId": span,
            "parentSpanId": parent,
            "name": f"execute_tool {tool}",
            "kind": 1,
            "startTimeUnixNano": "1764670000000000000",
            "endTimeUnixNano": "1764670000250000000",
            "attributes": attributes,
            "status": {"code": 0},
        }
    ]
    request = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}
    return json.dumps(request).encode()


def test_unreadable_and_oversized_bodies_are_refused_and_nothing_else_is_lost(collector: CollectorProcess) -> None:
    """A malformed body is 400 (counted by reason, logged), a gzip body decompressing past the
    limit 413 without being expanded, a 10 MB body of junk 400; exports around them are written."""
    url = collector.http_url + "/v1/traces"
    trace = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
    assert (
        _post(
            url,
            _tool_span_body(trace, "3333333333333333", "aaaaaaaaaaaaaaaa"),
            "application/json",
            **collector.http_headers(),
        )[0]
        == 200
    )
    status, _headers, answer = _post(
        url, b"\x0a\xff\xff\xff garbage", "application/x-protobuf", **collector.http_headers()
    )
    assert status == 400
    assert b"protobuf" in answer
    assert _post(url, b"{not json", "application/json", **collector.http_headers())[0] == 400
    assert _post(url, b"{}", "text/plain", **collector.http_headers())[0] == 400
    bomb = gzip.compress(b"\0" * (40 << 20))
    assert (
        _post(url, bomb, "application/x-protobuf", **{"Content-Encoding": "gzip"}, **collector.http_headers())[0] == 413
    )
    junk = bytes(range(256)) * (10 * 4096)
    assert _post(url, junk, "application/x-protobuf", **collector.http_headers())[0] == 400
    assert (
        _post(
            url,
            _tool_span_body(trace, "4444444444444444", "aaaaaaaaaaaaaaaa"),
            "application/json",
            **collector.http_headers(),
        )[0]
        == 200
    )
    lines = collector.session_lines("aaaaaaaaaaaaaaaa")
    assert [line["cycle"] for line in lines if line["stage"] == "FINISH"] == ["3333333333333333", "4444444444444444"]
    assert collector.metric('gzia_otlp_rejected_total{reason="protobuf"}') == 2
    assert collector.metric('gzia_otlp_rejected_total{reason="json"}') == 1
    assert collector.metric('gzia_otlp_rejected_total{reason="content_type"}') == 1
    assert collector.metric('gzia_otlp_rejected_total{reason="too_large"}') == 1
    assert collector.log_lines("OTLP export refused (400, protobuf)")


def test_status_lists_the_otlp_endpoint_and_metrics_are_answered(collector: CollectorProcess) -> None:
    """endpoints.otlp is the base URL an exporter's OTEL_EXPORTER_OTLP_ENDPOINT takes; /v1/metrics
    is answered (its points are not kept)."""
    report = json.loads(collector.gz_ia("status", "--json", check=True).stdout)
    assert report["endpoints"]["otlp"] == collector.http_url
    status, headers, _answer = _post(
        collector.http_url + "/v1/metrics", b"", "application/x-protobuf", **collector.http_headers()
    )
    assert status == 200
    assert headers["Content-Type"] == "application/x-protobuf"


RETRYING_PROGRAM = """
import sys
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

provider = TracerProvider(resource=Resource.create({"service.name": "retrying-app"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1] + "/v1/traces", timeout=60)))
tracer = provider.get_tracer("test")
with tracer.start_as_current_span("execute_tool Glob", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "Glob", "gen_ai.tool.call.id": "call_k"}) as span:
    print(format(span.get_span_context().trace_id, "032x"), flush=True)
provider.shutdown()
"""


def test_the_collector_killed_mid_request_gets_the_exporters_retry_once(collector: CollectorProcess) -> None:
    """The collector is stopped while the SDK's exporter sends a span, then killed and restarted: the
    exporter's own retry delivers the span, written once."""
    import signal
    import time

    assert collector.proc is not None
    collector.proc.send_signal(signal.SIGSTOP)  # the request waits, unanswered, in the socket's backlog
    child = subprocess.Popen(
        [sys.executable, "-c", RETRYING_PROGRAM, collector.http_url],
        env=collector.exporter_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        trace = child.stdout.readline().strip()
        time.sleep(1.0)  # the export is sent and waits for its answer
        collector.kill()  # mid-request: the exporter's connection is reset
        collector.start()
        _out, err = child.communicate(timeout=90)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    assert "Failed to export" not in err, err
    lines = collector.session_lines(trace)
    assert _cycles(lines) == [("Glob", "READ", "OK"), ("Glob", "FINISH", "OK")]


STRANGER = 65534
STRANGER_POST = """
import sys, urllib.request, urllib.error
request = urllib.request.Request(sys.argv[1], data=sys.stdin.buffer.read(), method="POST",
                                 headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=30) as answer:
        print(answer.status)
except urllib.error.HTTPError as error:
    print(error.code)
"""


def test_another_uid_is_not_heard(collector: CollectorProcess) -> None:
    """An export from another uid (65534) is refused 403 before it is read: nothing of it is
    written; the user's own export right after is."""
    from tests.conftest import SYSTEM_PYTHON

    body = _tool_span_body("efefefefefefefefefefefefefefefef", "5555555555555555", "bbbbbbbbbbbbbbbb")
    probe = subprocess.run(
        ["setpriv", f"--reuid={STRANGER}", f"--regid={STRANGER}", "--clear-groups", SYSTEM_PYTHON, "-c",
         STRANGER_POST, collector.http_url + "/v1/traces"],
        input=body, capture_output=True, timeout=60, env={"PATH": "/usr/bin:/bin"}, check=True,
    )  # fmt: skip
    assert probe.stdout.strip() == b"403"
    assert "bbbbbbbbbbbbbbbb" not in collector.all_sessions()
    assert _post(collector.http_url + "/v1/traces", body, "application/json", **collector.http_headers())[0] == 200
    assert [line["stage"] for line in collector.session_lines("bbbbbbbbbbbbbbbb")] == ["READ", "FINISH"]


def _claude_record(name: str, cycle: str, **values: dict[str, str | float]) -> dict[str, Any]:
    """A Claude Code log record (as its exporter sends one) with typed attribute ``values``."""
    pairs = {"event.name": name, "session.id": "absurd-numbers", "tool_name": "Bash", "success": "true"}
    attributes = [{"key": key, "value": {"stringValue": value}} for key, value in pairs.items()]
    attributes.append({"key": "tool_use_id", "value": {"stringValue": cycle}})
    attributes += [{"key": key, "value": value} for key, value in values.items()]
    return {"timeUnixNano": "1764670000000000000", "body": {"stringValue": f"claude_code.{name}"},
            "attributes": attributes}  # fmt: skip


def test_a_record_with_numbers_no_event_can_hold_is_refused_alone(collector: CollectorProcess) -> None:
    """A tool result lasting 2**60 ms, a model call of 1e19 tokens (above what an event holds), a
    span of 1e300: each is refused alone, with the field named, into the rejects file; the export
    is answered 200 (a retry would be refused again) and the rest of it is written. The records are
    written here, as Claude Code's exporter lays them out: no real agent can be steered into such numbers."""
    records = [
        _claude_record("tool_result", "toolu_fine", duration_ms={"intValue": "40"}),
        _claude_record("tool_result", "toolu_forever", duration_ms={"intValue": str(2**60)}),
        _claude_record("api_request", "", model={"stringValue": "m-1"}, input_tokens={"doubleValue": 1e19}),
        _claude_record("tool_result", "toolu_after", duration_ms={"intValue": "7"}),
    ]
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "claude-code"}}]}
    logs = {"resourceLogs": [{"resource": resource, "scopeLogs": [{"scope": {}, "logRecords": records}]}]}
    headers = collector.http_headers()
    status, _, answer = _post(collector.http_url + "/v1/logs", json.dumps(logs).encode(), "application/json", **headers)
    assert status == 200, answer
    span = json.loads(_tool_span_body("efefefefefefefefefefefefefefefef", "5555555555555555", "bbbbbbbbbbbbbbbb"))
    chat = span["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    chat["attributes"] = [
        {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
        {"key": "gen_ai.usage.input_tokens", "value": {"doubleValue": 1e300}},
    ]
    traces = collector.http_url + "/v1/traces"
    status, _, answer = _post(traces, json.dumps(span).encode(), "application/json", **headers)
    assert status == 200, answer
    wait_for(lambda: len(collector.rejects()) >= 3, message="three refusals")
    lines = collector.session_lines("absurd-numbers")
    assert [(line["cycle"], line["stage"]) for line in lines] == [
        ("toolu_fine", "PENDING"), ("toolu_fine", "FINISH"), ("toolu_after", "PENDING"), ("toolu_after", "FINISH")
    ]  # fmt: skip
    refusals = collector.rejects()
    assert [record["reason"] for record in refusals] == ["invalid_field"] * 3
    details = [record["detail"] for record in refusals]
    assert "duration_ms" in details[0]
    assert "input_tokens" in details[1]
    assert "input_tokens" in details[2]
    assert collector.metric('gzia_otlp_records_total{outcome="refused",signal="logs"}') == 2
    assert collector.metric('gzia_otlp_records_total{outcome="refused",signal="traces"}') == 1
