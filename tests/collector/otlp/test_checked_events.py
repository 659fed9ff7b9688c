"""The receiver's path (``checked=True``: a tool call's events made as LogEvents) stores what the
fields' path stores: the same items, the same events byte for byte, the same refusals.

The exports are made here: the agents' records as test_mapping lays them out (from real runs), the
cases past the schema's bounds a real run cannot be steered into, and a seeded random corpus of
every agent's records and spans, values of every kind among them."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

pytest.importorskip("opentelemetry.proto")

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue

from gz_ia.collector.otlp import Item, map_logs, map_spans
from gz_ia.collector.receivers.otlp import item_batches

_NOW = 1764670000123456789


def _value(item: Any) -> AnyValue:
    if isinstance(item, bool):
        return AnyValue(bool_value=item)
    if isinstance(item, int):
        return AnyValue(int_value=item)
    if isinstance(item, float):
        return AnyValue(double_value=item)
    if isinstance(item, list):
        return AnyValue(array_value=ArrayValue(values=[_value(each) for each in item]))
    return AnyValue(string_value=item)


def _stored(items: list[Item], *, made: bool) -> list[Any]:
    """Each item as the receiver stages it: its fields, and each event's stored bytes or rejection."""
    if not made:
        assert not any(item.checked for item in items)
    batches = [_parts(batch) for batch in item_batches(items)]
    return [
        (
            item.key,
            item.session_id,
            item.join_cycle,
            item.subagent,
            item.hooks_record_it,
            item.refused,
            [None if event is None else msgspec.json.encode(event) for event in events],
            rejections,
        )
        for item, (events, rejections) in zip(items, batches, strict=True)
    ]


def _parts(batch: Any) -> tuple[list[Any], dict[int, tuple[str, str]]]:
    return batch.events, {index: (str(why.reason), why.detail) for index, why in batch.rejections.items()}


def _logs(records: list[dict[str, Any]], service: str = "claude-code") -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    resource = request.resource_logs.add()
    resource.resource.attributes.append(KeyValue(key="service.name", value=_value(service)))
    scope = resource.scope_logs.add()
    for attributes in records:
        record = scope.log_records.add()
        record.time_unix_nano = _NOW
        record.attributes.extend(KeyValue(key=key, value=_value(value)) for key, value in attributes.items())
    return request


def _agrees_on_logs(request: ExportLogsServiceRequest) -> list[Item]:
    made = map_logs(request, checked=True)
    assert _stored(made, made=True) == _stored(map_logs(request), made=False)
    return made


def _agrees_on_spans(request: ExportTraceServiceRequest) -> list[Item]:
    sessions: dict[str, tuple[str, str | None]] = {}
    made = map_spans(request, sessions, checked=True)
    assert _stored(made, made=True) == _stored(map_spans(request, {}), made=False)
    return made


def _tool_result(**attributes: Any) -> dict[str, Any]:
    return {"event.name": "claude_code.tool_result", "session.id": "s1", "tool_name": "Read", **attributes}


def test_tool_results_of_each_agent_are_made_as_the_fields_are_checked() -> None:
    """Claude Code's (a subagent's, a failed one, one without a call id), Codex's and Gemini CLI's:
    made as LogEvents, stored as the checked fields would be."""
    claude = [
        _tool_result(tool_use_id="toolu_1", success="true", duration_ms="40"),
        _tool_result(tool_use_id="toolu_2", agent_id="a7", tool_name="Bash", success="false", error_type="E"),
        _tool_result(success=True, duration_ms=12),
        _tool_result(tool_use_id="t" * 300, tool_name="x" * 2000, success="true", error="e" * 20000),
    ]
    codex = [
        {
            "event.name": "codex.tool_result",
            "conversation.id": "c/1",
            "tool_name": "exec_command",
            "call_id": "call_1",
            "success": "true",
            "output": "Process exited with code 2\n",
            "duration_ms": "3",
        },
    ]
    gemini = [
        {
            "event.name": "gemini_cli.tool_call",
            "session.id": "g1",
            "function_name": "run_shell_command",
            "gen_ai.tool.call.id": "g-1",
            "success": True,
            "metadata": '{"exitCode": 1}',
            "duration_ms": 9,
        },
    ]
    for records, service in ((claude, "claude-code"), (codex, "codex_cli_rs"), (gemini, "gemini-cli")):
        made = _agrees_on_logs(_logs(records, service))
        assert made and all(item.checked for item in made)


def test_spans_past_the_bounds_are_left_to_the_checks() -> None:
    """A tool name longer than an attr holds, a span id longer than a session id: the fields."""
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add()
    for span_id, tool in ((b"\x01" * 8, "Grep"), (b"\x02" * 8, "g" * 1100), (b"\x03" * 80, "Grep")):
        span = spans.spans.add()
        span.trace_id, span.span_id, span.parent_span_id = b"\x09" * 16, span_id, b"\x07" * 8
        span.start_time_unix_nano, span.end_time_unix_nano = _NOW, _NOW + 5_000_000
        span.attributes.extend(
            [
                KeyValue(key="gen_ai.operation.name", value=_value("execute_tool")),
                KeyValue(key="gen_ai.tool.name", value=_value(tool)),
            ]
        )
    assert [item.checked for item in _agrees_on_spans(request)] == [True, False, True]
    span = spans.spans.add()
    span.trace_id, span.span_id, span.parent_span_id = b"\x09" * 16, b"\x04" * 8, b"\x05" * 80
    span.start_time_unix_nano, span.end_time_unix_nano = _NOW, _NOW
    span.attributes.append(KeyValue(key="gen_ai.operation.name", value=_value("invoke_agent")))
    assert [item.checked for item in _agrees_on_spans(request)][-1] is False


def _random_value(rng: random.Random) -> Any:
    return rng.choice([0, 1, 250, -5, 12.5, "17", " 3 ", "x", True, 2**40, "-1", "1e3", 3.0, 2**62, "", ["a", 1]])


def _random_logs(rng: random.Random) -> ExportLogsServiceRequest:
    records = []
    for _ in range(rng.randrange(1, 20)):
        source = rng.choice(["claude_code", "codex", "gemini_cli", "other"])
        kind = rng.choice(["tool_result", "tool_call", "api_request", "api_response", "sse_event"])
        attributes: dict[str, Any] = {"event.name": f"{source}.{kind}"}
        keys = [
            "session.id",
            "conversation.id",
            "agent_id",
            "duration_ms",
            "input_tokens",
            "output_token_count",
            "cost_usd",
            "tool_name",
            "function_name",
            "tool_use_id",
            "call_id",
            "success",
            "error",
            "output",
            "metadata",
            "query_source",
            "model",
        ]
        for key in rng.sample(keys, rng.randrange(2, len(keys))):
            attributes[key] = rng.choice(
                [_random_value(rng), "s-1", "bad/id..x", ".hidden", "Read", "Bash", "true", "false", "agent:x:Explore"]
            )
        records.append(attributes)
    return _logs(records, rng.choice(["claude-code", "codex", "gemini-cli", "svc"]))


def _random_spans(rng: random.Random) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add()
    for _ in range(rng.randrange(1, 20)):
        span = spans.spans.add()
        span.trace_id = rng.randrange(1, 4).to_bytes(16, "big")
        span.span_id = rng.randrange(1, 30).to_bytes(8, "big")
        if rng.random() < 0.7:
            span.parent_span_id = rng.randrange(1, 30).to_bytes(8, "big")
        span.name = rng.choice(["execute_tool Read", "", "chat"])
        span.start_time_unix_nano = _NOW
        span.end_time_unix_nano = _NOW + rng.choice([500_000_000, -(10**9), 0])
        if rng.random() < 0.3:
            span.status.code, span.status.message = 2, rng.choice(["", "bad"])
        operation = rng.choice(["execute_tool", "invoke_agent", "create_agent", "chat"])
        attributes: dict[str, Any] = {"gen_ai.operation.name": operation}
        for key in ("gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.agent.name", "gen_ai.usage.input_tokens"):
            if rng.random() < 0.5:
                attributes[key] = rng.choice([_random_value(rng), "Read", "c1", "ag"])
        span.attributes.extend(KeyValue(key=key, value=_value(value)) for key, value in attributes.items())
    return request


def test_a_random_corpus_of_every_agents_records_and_spans_agrees() -> None:
    rng = random.Random(44)
    made = 0
    for _ in range(150):
        made += sum(item.checked for item in _agrees_on_logs(_random_logs(rng)))
        made += sum(item.checked for item in _agrees_on_spans(_random_spans(rng)))
    assert made > 300  # the made path is the one taken, not only the fields'
