"""Stored events folded into spans: the kinds, the tool, usage and I/O attributes backends read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gz_ia.client.schema import Stage, Status, StoredEvent
from gz_ia.client.usage import usage_attrs
from gz_ia.collector.otel.spans import TraceState, fold, usage_attributes


def event(seq: int, action: str, stage: str, **fields: Any) -> StoredEvent:
    return StoredEvent(
        seq=seq,
        timestamp=datetime(2026, 12, 1, 10, 0, seq, tzinfo=UTC),
        session_id=fields.pop("session_id", "kid"),
        action=action,
        stage=Stage(stage),
        agent="claude-code",
        status=Status(fields.pop("status", "OK")),
        **fields,
    )


def test_usage_maps_token_counts_and_model_to_both_vocabularies() -> None:
    """Counts and model become gen_ai.* and llm.*; a lone total stays a total; bad values are left out."""
    assert usage_attributes({"input_tokens": 10, "output_tokens": 4, "model": "m", "cache_read_tokens": 2}) == {
        "gen_ai.usage.input_tokens": 10,
        "llm.token_count.prompt": 10,
        "gen_ai.usage.output_tokens": 4,
        "llm.token_count.completion": 4,
        "llm.token_count.total": 14,
        "gen_ai.usage.cache_read.input_tokens": 2,
        "llm.token_count.prompt_details.cache_read": 2,
        "gen_ai.request.model": "m",
        "llm.model_name": "m",
    }
    assert usage_attributes({"tokens": 812}) == {"llm.token_count.total": 812}
    assert usage_attributes({"input_tokens": -1, "output_tokens": True, "model": 3}) == {}


def test_the_usage_records_reserved_keys_reach_both_vocabularies_and_the_cost_its_own_name() -> None:
    """A usage record (``act.usage``, the OTLP receiver) is exported as the GenAI keys it is stored
    under, in OpenInference's too, and its cost as ``gz_ia.cost_usd``."""
    attrs = usage_attrs(input_tokens=120, output_tokens=30, cache_read_tokens=7, model="claude-x", cost_usd=0.25)
    state = TraceState(session_id="kid")
    events = [event(1, "model claude-x", "READ"), event(2, "model claude-x", "FINISH", attrs=attrs)]
    (span,) = fold(state, events, "kid")
    expected = {
        "gen_ai.usage.input_tokens": 120,
        "llm.token_count.prompt": 120,
        "gen_ai.usage.output_tokens": 30,
        "llm.token_count.completion": 30,
        "llm.token_count.total": 150,
        "gen_ai.usage.cache_read.input_tokens": 7,
        "llm.token_count.prompt_details.cache_read": 7,
        "gen_ai.request.model": "claude-x",
        "llm.model_name": "claude-x",
        "gz_ia.cost_usd": 0.25,
    }
    assert {key: span.attributes[key] for key in expected} == expected
    assert not [key for key in span.attributes if key.startswith("gz_ia.attr.")]


def test_cycles_get_their_kind_tool_and_the_root_session() -> None:
    """A tool call is TOOL with the tool's name; Claude Code's own cycles are CHAIN; session.id is the root."""
    state = TraceState(session_id="kid")
    spans = fold(
        state,
        [
            event(1, "prompt", "READ"),
            event(2, "Run the tests", "PENDING", attrs={"tool": "Bash", "tool_use_id": "t1", "command": "pytest"}),
            event(3, "Run the tests", "FINISH", status="FAILED", error="1 failed"),
            event(4, "prompt", "FINISH"),
            event(5, "lint", "READ"),
            event(6, "lint", "FINISH", attrs={"input": "ruff .", "output": "clean"}),
        ],
        "root",
    )
    tool, prompt, plain = spans
    assert (tool.name, prompt.name, plain.name) == ("Run the tests", "prompt", "lint")
    assert tool.attributes["openinference.span.kind"] == "TOOL"
    assert tool.attributes["tool.name"] == tool.attributes["gen_ai.tool.name"] == "Bash"
    assert tool.attributes["gen_ai.tool.call.id"] == "t1"
    assert tool.attributes["input.value"] == '{"command": "pytest"}'
    assert (tool.error, tool.exception) == ("1 failed", True)
    assert prompt.attributes["openinference.span.kind"] == "CHAIN"
    assert prompt.error is None
    assert plain.attributes["openinference.span.kind"] == "TOOL"
    assert plain.attributes["tool.name"] == "lint"  # no tool attr: the action
    assert (plain.attributes["input.value"], plain.attributes["output.value"]) == ("ruff .", "clean")
    for span in spans:
        assert (span.attributes["session.id"], span.attributes["gz_ia.session.id"]) == ("root", "kid")
