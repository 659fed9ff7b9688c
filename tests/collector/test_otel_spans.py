"""Stored events folded into spans: the kinds, the tool, usage and I/O attributes backends read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gz_ia.client.schema import Stage, Status, StoredEvent
from gz_ia.client.usage import HOOK_READING, USAGE_FROM, usage_attrs
from gz_ia.collector.otel.spans import TraceState, fold, usage_attributes
from gz_ia.collector.reading.cycles import build_session


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
    """Tokens by kind, cost and model become llm.* and gen_ai.*: the prompt counts the cache's tokens
    too (Phoenix prices the cache's apart through prompt_details), and the cost is gz_ia.cost_usd."""
    assert usage_attributes((10, 4, 2, 1), 0.5, "m") == {
        "gen_ai.usage.input_tokens": 13,
        "llm.token_count.prompt": 13,
        "gen_ai.usage.output_tokens": 4,
        "llm.token_count.completion": 4,
        "llm.token_count.total": 17,
        "gen_ai.usage.cache_read.input_tokens": 2,
        "llm.token_count.prompt_details.cache_read": 2,
        "gen_ai.usage.cache_creation.input_tokens": 1,
        "llm.token_count.prompt_details.cache_write": 1,
        "gen_ai.request.model": "m",
        "llm.model_name": "m",
        "gz_ia.cost_usd": 0.5,
    }


def test_a_model_call_is_an_llm_span_with_the_usage_its_records_add_up_to() -> None:
    """A usage record (``act.usage``, the OTLP receiver) makes its cycle an LLM span, the span Phoenix
    counts and prices; its attrs are exported as the fold counted them (two records of one cycle
    added up), never one event's raw keys."""
    attrs = usage_attrs(input_tokens=120, output_tokens=30, cache_read_tokens=7, model="claude-x", cost_usd=0.25)
    more = usage_attrs(input_tokens=1, output_tokens=2, cost_usd=0.5)
    state = TraceState(session_id="kid")
    events = [
        event(1, "model claude-x", "READ", attrs=more),
        event(2, "model claude-x", "FINISH", attrs=attrs),
    ]
    (span,) = fold(state, events, "kid")
    expected = {
        "openinference.span.kind": "LLM",
        "gen_ai.usage.input_tokens": 128,
        "llm.token_count.prompt": 128,
        "gen_ai.usage.output_tokens": 32,
        "llm.token_count.completion": 32,
        "llm.token_count.total": 160,
        "gen_ai.usage.cache_read.input_tokens": 7,
        "llm.token_count.prompt_details.cache_read": 7,
        "gen_ai.request.model": "claude-x",
        "llm.model_name": "claude-x",
        "gz_ia.cost_usd": 0.75,
    }
    assert {key: span.attributes[key] for key in expected} == expected
    assert not [key for key in span.attributes if key.startswith("gz_ia.attr.")]


def test_a_hooks_reading_is_exported_only_while_it_is_what_counts() -> None:
    """A Codex turn's usage as its hook read it (plain keys on disk from an earlier hook, or the
    reserved keys marked as a hook's) is the session's usage without telemetry; once the session has
    another usage record, the same calls are not exported twice."""
    alone = fold(TraceState(session_id="s"), [event(1, "prompt", "FINISH", attrs={"input_tokens": 9})], "s")
    assert alone[0].attributes["llm.token_count.prompt"] == 9
    hook = {"gen_ai.usage.input_tokens": 9, "gz-ia.usage_from": "hook"}
    telemetry = usage_attrs(input_tokens=9, model="gpt-x")
    state = TraceState(session_id="s")
    spans = fold(
        state, [event(1, "model gpt-x", "FINISH", attrs=telemetry), event(2, "prompt", "FINISH", attrs=hook)], "s"
    )
    assert [span.attributes.get("llm.token_count.prompt") for span in spans] == [9, None]
    assert spans[1].attributes["openinference.span.kind"] == "CHAIN"
    later = fold(TraceState(session_id="s"), [event(1, "prompt", "FINISH", attrs=hook)], "s", hooks_count=False)
    assert "llm.token_count.prompt" not in later[0].attributes


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


_ACTIONS = ("Bash", "Read", "model m", "prompt", "Agent")


@st.composite
def _session(draw: Any) -> list[StoredEvent]:
    """A session's events as agents write them: cycles that interleave, name their cycle or not,
    finish OK or FAILED or never, carry usage from hooks or from records, with times that go back."""
    events: list[StoredEvent] = []
    base = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    for seq in range(1, draw(st.integers(1, 40)) + 1):
        attrs: dict[str, Any] = {}
        if draw(st.booleans()):
            attrs["tool"] = draw(st.sampled_from(["Bash", "Read"]))
        usage = draw(st.sampled_from([None, "record", "hook"]))
        if usage is not None:
            attrs |= usage_attrs(input_tokens=draw(st.integers(0, 500)), output_tokens=draw(st.integers(0, 50)))
            attrs["gen_ai.usage.cost_usd"] = draw(st.sampled_from([0.0, 0.25, 0.001]))
            if usage == "hook":
                attrs[USAGE_FROM] = HOOK_READING
        stage = draw(st.sampled_from(["READ", "PENDING", "FINISH"]))
        status = draw(st.sampled_from([Status.OK, Status.FAILED])) if stage == "FINISH" else Status.OK
        events.append(
            StoredEvent(
                seq=seq,
                timestamp=base + timedelta(milliseconds=draw(st.integers(-3_000, 3_000)) + 1_000 * seq),
                session_id="kid",
                action=draw(st.sampled_from(_ACTIONS)),
                cycle=draw(st.sampled_from([None, None, "c1", "c2"])),
                stage=Stage(stage),
                agent="claude-code",
                status=status,
                error="boom" if status is Status.FAILED else None,
                duration_ms=draw(st.one_of(st.none(), st.integers(0, 9_000))) if stage == "FINISH" else None,
                attrs=attrs or None,
            )
        )
    return events


@settings(max_examples=60, deadline=None)
@given(_session(), st.integers(1, 40))
def test_the_exported_spans_are_the_cycles_every_window_shows(events: list[StoredEvent], cut: int) -> None:
    """The export folds with the one model of a session (:mod:`gz_ia.collector.reading.cycles`): every
    finished cycle is one span with the times, outcome and usage ``gz-ia session view``, the page's
    API and ``gz-ia sessions`` count, also when the export is folded in two batches (a restart)."""
    summary = build_session("kid", events)
    state = TraceState(session_id="kid")
    hooks_count = summary.usage.from_hooks
    exported = fold(state, events[:cut], "kid", hooks_count=hooks_count)
    state = msgspec.json.decode(msgspec.json.encode(state), type=TraceState)  # persisted between the two
    exported += fold(state, events[cut:], "kid", hooks_count=hooks_count)
    finished = [span for span in summary.actions if not span.is_open]
    firsts = sorted(span.attributes["gz_ia.first_seq"] for span in exported)
    assert firsts == sorted(span.first_seq for span in finished)
    by_first = {span.first_seq: span for span in finished}
    tokens = cost = 0.0
    for span in exported:
        model = by_first[int(span.attributes["gz_ia.first_seq"])]
        assert span.attributes["gz_ia.last_seq"] == model.last_seq
        assert span.attributes["gz_ia.status"] == model.status.value  # type: ignore[union-attr]
        assert (span.error is not None) == (model.status is Status.FAILED)
        assert (span.start_ns, span.end_ns) == (
            int(model.start.timestamp() * 1_000_000) * 1000,
            max(int(model.start.timestamp() * 1_000_000), int(model.end.timestamp() * 1_000_000)) * 1000,
        )
        assert span.attributes.get("llm.token_count.completion", 0) == model.token_kinds[1]
        assert span.attributes.get("gen_ai.usage.input_tokens", 0) == model.tokens - model.token_kinds[1]
        assert span.attributes.get("gz_ia.cost_usd", 0.0) == model.cost_usd
        tokens += model.tokens
        cost += model.cost_usd
    # The finished cycles' usage is the session's, less what cycles still open hold.
    open_tokens = sum(span.tokens for span in summary.actions if span.is_open)
    assert tokens + open_tokens == sum(summary.tokens)
    assert cost + sum(span.cost_usd for span in summary.actions if span.is_open) == pytest.approx(summary.cost_usd)
