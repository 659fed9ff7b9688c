"""The OTLP mapping, pure: log records as the agents send them become the documented items.

The records here are written by hand, as the real agents lay them out (attribute names and types
from real runs, tests/integration/test_*_otlp.py): the cases a real run cannot be steered into (a
Claude Code subagent's record, a record without a session, a hex id that is not one)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto")

from gz_ia.collector.otlp import BodyUnreadable, Signal, decode_request, map_logs, map_spans


def _logs(records: list[dict[str, Any]], service: str = "claude-code") -> Any:
    body = {
        "resourceLogs": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeLogs": [{"scope": {}, "logRecords": records}],
            }
        ]
    }
    return decode_request(Signal.LOGS, "application/json", json.dumps(body).encode())


def _record(name: str, **attributes: Any) -> dict[str, Any]:
    def value(item: Any) -> dict[str, Any]:
        if isinstance(item, bool):
            return {"boolValue": item}
        if isinstance(item, int):
            return {"intValue": str(item)}
        if isinstance(item, float):
            return {"doubleValue": item}
        return {"stringValue": str(item)}

    pairs = [{"key": "event.name", "value": {"stringValue": name}}]
    pairs += [{"key": key.replace("__", "."), "value": value(item)} for key, item in attributes.items()]
    return {"timeUnixNano": "1764670000000000000", "body": {"stringValue": f"claude_code.{name}"}, "attributes": pairs}


def test_a_subagents_tool_result_is_in_the_hooks_subagent_session() -> None:
    """agent_id names the subagent: the session <session>.<agent_id> under the session, as the hooks
    name it; the call id is the cycle and what the hooks' cycle is joined on."""
    failed = _record(
        "tool_result",
        session__id="s1",
        agent_id="a7",
        tool_name="Bash",
        success="false",
        error_type="ShellError",
        duration_ms=250,
        tool_use_id="toolu_9",
    )
    (item,) = map_logs(_logs([failed]))
    assert item.session_id == "s1.a7"
    assert item.join_cycle == "toolu_9"
    opening, finish = item.events
    assert (opening["stage"], opening["parent_session_id"]) == ("PENDING", "s1")
    assert (finish["status"], finish["error"], finish["duration_ms"]) == ("FAILED", "ShellError", 250)
    assert (finish["timestamp"] - opening["timestamp"]).total_seconds() == 0.25


def test_an_api_request_is_a_usage_record_with_its_cost() -> None:
    """Its model, tokens of every kind and cost in the FINISH's attrs; the same record has the same key."""
    record = _record(
        "api_request",
        session__id="s1",
        model="claude-x",
        input_tokens=10,
        output_tokens=2,
        cache_read_tokens=300,
        cache_creation_tokens=4,
        cost_usd=0.125,
        duration_ms=900,
    )
    (item,) = map_logs(_logs([record]))
    finish = item.events[1]
    assert finish["action"] == "model claude-x"
    assert finish["attrs"] == {
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 2,
        "gen_ai.usage.cache_read.input_tokens": 300,
        "gen_ai.usage.cache_creation.input_tokens": 4,
        "gz-ia.cost_usd": 0.125,
        "gen_ai.request.model": "claude-x",
    }
    assert item.key == map_logs(_logs([record]))[0].key  # a re-sent record: the same idempotency key


def test_records_without_a_session_or_of_other_kinds_are_dropped() -> None:
    """A tool result without session.id, a prompt, a decision: nothing."""
    records = [
        _record("tool_result", tool_name="Read", success="true"),  # no session.id
        _record("user_prompt", session__id="s1", prompt_length=3),
        _record("tool_decision", session__id="s1", tool_name="Read", decision="accept"),
    ]
    assert map_logs(_logs(records)) == []


def test_spans_of_no_genai_kind_are_dropped_and_unknown_parents_name_the_session() -> None:
    """An HTTP span is dropped; a tool span whose parent is unseen is in the session named after it."""
    spans = [
        {"traceId": "ab" * 16, "spanId": "01" * 8, "parentSpanId": "02" * 8, "name": "http GET",
         "startTimeUnixNano": "1", "endTimeUnixNano": "2"},
        {"traceId": "ab" * 16, "spanId": "03" * 8, "parentSpanId": "02" * 8, "name": "execute_tool x",
         "startTimeUnixNano": "1764670000000000000", "endTimeUnixNano": "1764670000500000000",
         "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}]},
    ]  # fmt: skip
    body = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    request = decode_request(Signal.TRACES, "application/json", json.dumps(body).encode())
    sessions: dict[str, tuple[str, str | None]] = {}
    (item,) = map_spans(request, sessions)
    assert item.session_id == "02" * 8
    assert [event["stage"] for event in item.events] == ["PENDING", "FINISH"]
    assert item.events[1]["duration_ms"] == 500


@pytest.mark.parametrize(
    ("content_type", "body", "reason"),
    [
        ("application/json", b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', "json"),
        ("application/json", b"[1, 2", "json"),
        ("application/x-protobuf", b"\xff\xff\xff", "protobuf"),
        ("text/plain", b"", "content_type"),
    ],
)
def test_unreadable_bodies_say_why(content_type: str, body: bytes, reason: str) -> None:
    """Each unreadable body is refused with the reason it is counted under."""
    with pytest.raises(BodyUnreadable) as raised:
        decode_request(Signal.TRACES, content_type, body)
    assert raised.value.reason == reason
