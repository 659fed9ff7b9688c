"""Stored events as spans: each action cycle and each session becomes one span, with deterministic ids.

This module is pure (no OpenTelemetry import): it folds a session's events, in ``seq`` order, into
:class:`SpanData` and keeps what is still open in a :class:`TraceState` that the exporter persists
with its position, so a cycle that started before a restart still ends as one span.

* A cycle starts at the first stage event of an action (and ``cycle`` id, when the event has one)
  that has no open cycle and ends at its FINISH; every stage event is a span event. Cycles are keyed
  by action and cycle id, as the collector's stage protocol keys them, and named by the ``seq`` of
  their first event, which makes each cycle's span id unique and stable.
* A session is a span from its first to its last event; a subagent session's parent span is its
  parent session's span; every session of one tree shares the trace of the tree's root session.
* Ids are the first bytes of SHA-256 over (root session, session, first seq of the cycle): a span
  sent again after a timeout or a crash carries the same ids, so a backend merges it with the first.
* Attributes follow what trace backends read: OpenInference's ``openinference.span.kind`` (AGENT for
  sessions, LLM for model calls: a cycle with usage and no tool, TOOL for tool calls, CHAIN for an
  agent's own prompt and session cycles) beside the GenAI conventions' ``gen_ai.operation.name``;
  ``session.id`` is the tree's root session on every span (backends group a whole tree by it), the
  gz-ia session is ``gz_ia.session.id``; a model call's tokens, cost and model through
  :func:`usage_attributes`, counted as every other window counts them
  (:class:`gz_ia.client.usage.UsageSum`), so a backend's session totals are ``gz-ia sessions``'s;
  ``input.value`` / ``output.value`` from the attrs the session stored (which carry what the agent's
  hook kept, already summarised, never the whole input).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import msgspec

from gz_ia.client.schema import Status, StoredEvent
from gz_ia.client.usage import COST_USD, MODEL, TOKEN_KEYS, USAGE_FROM, reading_of
from gz_ia.collector.reading.cycles import ActionSpan, cycle_key, fold_event, settle_usage, start_span

__all__ = [
    "AGENT_CYCLES",
    "MAX_SPAN_EVENTS",
    "OpenCycle",
    "SessionInfo",
    "SpanData",
    "SpanEventData",
    "TraceState",
    "attribute_name",
    "cycle_span_id",
    "fold",
    "session_span",
    "session_span_id",
    "trace_id_of",
    "usage_attributes",
]

MAX_SPAN_EVENTS: Final = 128
"""Stage events kept per cycle span; the rest are counted in ``gz_ia.dropped_span_events``."""

Attr = str | int | float | bool

AGENT_CYCLES: Final = frozenset({"session", "prompt", "subagent", "compact"})
"""Actions an agent integration logs for its own cycles (Claude Code's session, prompt, subagent and
compaction): CHAIN spans, not tool calls, unless an attr names a tool."""

_TOOL_INPUTS: Final = ("command", "file_path", "path", "pattern", "url", "query", "description", "subagent_type")
"""The tool-input summary an agent hook stores in attrs (see the Claude Code integration)."""
_USAGE_ATTRS: Final = frozenset((*TOKEN_KEYS, COST_USD, MODEL, USAGE_FROM))
"""The attrs a cycle's usage is read from: exported as the fold counted them, never as one event had them."""


def usage_attributes(tokens: tuple[int, int, int, int] | list[int], cost_usd: float, model: str) -> dict[str, Attr]:
    """The attributes of a model call's usage as backends read it: tokens by kind (input, output, cache
    read, cache creation, as :data:`gz_ia.client.usage.TOKEN_KINDS`), cost and model.

    Both vocabularies: OpenInference's ``llm.token_count.*`` and ``llm.model_name`` (Phoenix prices an
    LLM span from them; its prompt count includes the cache's tokens, broken down in
    ``prompt_details``) and the GenAI conventions' ``gen_ai.usage.*`` (whose input tokens include the
    cached ones too). The cost as the agent reported it is ``gz_ia.cost_usd`` (no convention names one).
    """
    fresh, output, cache_read, cache_write = tokens
    prompt = fresh + cache_read + cache_write
    out: dict[str, Attr] = {
        "llm.token_count.prompt": prompt,
        "llm.token_count.completion": output,
        "llm.token_count.total": prompt + output,
        "gen_ai.usage.input_tokens": prompt,
        "gen_ai.usage.output_tokens": output,
        "gz_ia.cost_usd": cost_usd,
    }
    if cache_read:
        out["llm.token_count.prompt_details.cache_read"] = out["gen_ai.usage.cache_read.input_tokens"] = cache_read
    if cache_write:
        out["llm.token_count.prompt_details.cache_write"] = cache_write
        out["gen_ai.usage.cache_creation.input_tokens"] = cache_write
    if model:
        out["llm.model_name"] = out["gen_ai.request.model"] = model
    return out


def _io_attributes(attrs: Mapping[str, Attr]) -> dict[str, Attr]:
    """``input.value`` / ``output.value`` from what the session stored: ``input`` / ``output`` attrs, else
    the tool-input summary as JSON."""
    out: dict[str, Attr] = {}
    given = attrs.get("input")
    if given is not None:
        out["input.value"] = str(given)
    else:
        summary = {key: attrs[key] for key in _TOOL_INPUTS if key in attrs}
        if summary:
            out["input.value"] = json.dumps(summary, ensure_ascii=False)
            out["input.mime_type"] = "application/json"
    if attrs.get("output") is not None:
        out["output.value"] = str(attrs["output"])
    return out


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(parts).encode()).digest()


def trace_id_of(root_session_id: str) -> int:
    """Return the 128-bit trace id shared by every session of one tree (never zero)."""
    return int.from_bytes(hashlib.sha256(root_session_id.encode()).digest()[:16], "big") or 1


def session_span_id(root_session_id: str, session_id: str) -> int:
    """Return the 64-bit span id of one session's span (never zero)."""
    return int.from_bytes(_digest("session", root_session_id, session_id)[:8], "big") or 1


def cycle_span_id(root_session_id: str, session_id: str, first_seq: int) -> int:
    """Return the 64-bit span id of the cycle whose first event has ``first_seq`` (never zero)."""
    return int.from_bytes(_digest("cycle", root_session_id, session_id, str(first_seq))[:8], "big") or 1


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000) * 1000


class SpanEventData(msgspec.Struct, frozen=True, kw_only=True):
    """One stage event inside a cycle span."""

    time_ns: int
    stage: str
    status: str
    seq: int
    error: str | None = None
    duration_ms: int | None = None


class OpenCycle(msgspec.Struct, kw_only=True):
    """A cycle whose FINISH has not been read yet (persisted with the exporter's position).

    ``span`` is the cycle as the one model of a session folds it (:func:`gz_ia.collector.reading.cycles.fold_event`:
    its times, outcome and usage); the rest is what a trace span carries beside it.
    """

    span: ActionSpan
    agent: str
    events: list[SpanEventData] = msgspec.field(default_factory=list)
    dropped_events: int = 0
    attrs: dict[str, Attr] = msgspec.field(default_factory=dict)


class TraceState(msgspec.Struct, kw_only=True):
    """Where trace export stands in one session: the last folded ``seq`` and the cycles still open."""

    seq: int = 0
    cursor: str | None = None
    session_id: str = ""
    open: dict[str, OpenCycle] = msgspec.field(default_factory=dict)
    session_span_events: int = 0
    """How many events the last session span the backend accepted covered (0: none sent)."""
    role: str | None = None
    """The session's role, from its first event that names one."""
    usage_records: int = 0
    """Usage records read that are not a hook's: once there is one, the hooks' readings of the same
    calls are not exported as usage (:class:`gz_ia.client.usage.UsageSum`)."""


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What a session span needs, from the session's summary (never from one event)."""

    session_id: str
    root_session_id: str
    parent_session_id: str | None
    agent: str
    first_time: datetime
    last_time: datetime
    events: int
    failures: int
    role: str | None = None


@dataclass(slots=True)
class SpanData:
    """One finished span, ready to be encoded as OTLP."""

    name: str
    trace_id: int
    span_id: int
    parent_span_id: int | None
    start_ns: int
    end_ns: int
    attributes: dict[str, Attr]
    events: list[SpanEventData] = field(default_factory=list)
    error: str | None = None
    """Set for a failure: the span's status is ERROR with this description (else OK)."""
    exception: bool = False
    """The failure is the action's own: the span carries it as the standard ``exception`` event."""


def fold(
    state: TraceState, events: list[StoredEvent], root_session_id: str, *, hooks_count: bool = True
) -> list[SpanData]:
    """Fold ``events`` (in ``seq`` order, all after ``state.seq``) into ``state``; return the cycles they finished.

    ``hooks_count``: whether the session's hook readings of usage are what counts (the session's
    summary knows it from every line stored, :class:`gz_ia.client.usage.UsageSum`); they are not
    either once this fold has read another usage record.
    """
    finished: list[SpanData] = []
    for event in events:
        key = cycle_key(event)
        cycle = state.open.get(key)
        if cycle is None:
            cycle = state.open[key] = OpenCycle(span=start_span(event), agent=event.agent)
        if len(cycle.events) < MAX_SPAN_EVENTS:
            cycle.events.append(
                SpanEventData(
                    time_ns=_ns(event.timestamp),
                    stage=event.stage.value,
                    status=event.status.value,
                    seq=event.seq,
                    error=event.error,
                    duration_ms=event.duration_ms,
                )
            )
        else:
            cycle.dropped_events += 1
        if state.role is None and event.role:
            state.role = event.role
        found = None
        if event.attrs:  # without the nulls of old lines: OpenTelemetry has no null attribute
            cycle.attrs.update((key, value) for key, value in event.attrs.items() if value is not None)
            found = reading_of(event.attrs)
            if found is not None and not found[1]:
                state.usage_records += 1
        if fold_event(cycle.span, event, found):
            del state.open[key]
            counted = settle_usage(cycle.span, hooks_count=hooks_count and not state.usage_records)
            finished.append(_cycle_span(cycle, event, root_session_id, counted=counted))
        state.seq = event.seq
    return finished


_COST: Final = "gz_ia.cost_usd"
_USAGE_KEYS: Final = frozenset((*TOKEN_KEYS, MODEL))


def attribute_name(key: str) -> str:
    """The OpenTelemetry attribute an ``attrs`` key is exported as: ``gz_ia.attr.<key>``, except the
    usage keys, which are the GenAI conventions' own (the cost, which has none, ``gz_ia.cost_usd``)."""
    if key in _USAGE_KEYS:
        return key
    return _COST if key == COST_USD else f"gz_ia.attr.{key}"


def _common(root_session_id: str, session_id: str, agent: str) -> dict[str, Attr]:
    return {
        "session.id": root_session_id,
        "gen_ai.conversation.id": root_session_id,
        "gz_ia.session.id": session_id,
        "gz_ia.root_session_id": root_session_id,
        "gen_ai.agent.name": agent,
    }


def _cycle_span(cycle: OpenCycle, finish: StoredEvent, root_session_id: str, *, counted: bool) -> SpanData:
    """The span of a finished cycle; ``counted``: its usage is what counts (else it carries none)."""
    span = cycle.span
    session_id = finish.session_id
    tool = span.tool
    is_tool = tool is not None or (span.action not in AGENT_CYCLES and not counted)
    attributes = _common(root_session_id, session_id, cycle.agent)
    if is_tool:
        tool_name = tool if tool is not None else span.action
        attributes |= {
            "openinference.span.kind": "TOOL",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool_name,
            "tool.name": tool_name,
        }
        if cycle.attrs.get("tool_use_id") is not None:
            attributes["gen_ai.tool.call.id"] = str(cycle.attrs["tool_use_id"])
    elif counted:
        attributes |= {"openinference.span.kind": "LLM", "gen_ai.operation.name": "chat"}
    else:
        attributes |= {"openinference.span.kind": "CHAIN", "gen_ai.operation.name": "invoke_agent"}
    if counted:  # Phoenix counts tokens and prices them on LLM spans only: a tool call with usage is one
        attributes["openinference.span.kind"] = "LLM"
    attributes |= {
        "gz_ia.action": span.action,
        "gz_ia.status": finish.status.value,
        "gz_ia.first_seq": span.first_seq,
        "gz_ia.last_seq": finish.seq,
    }
    if span.cycle is not None:
        attributes["gz_ia.cycle"] = span.cycle
    if span.role:
        attributes["gz_ia.role"] = span.role
    if span.duration_ms is not None:
        attributes["gz_ia.duration_ms"] = span.duration_ms
    if cycle.dropped_events:
        attributes["gz_ia.dropped_span_events"] = cycle.dropped_events
    failed = span.status is Status.FAILED
    if failed:
        attributes["error.type"] = "gz_ia.failed"
    attributes |= _io_attributes(cycle.attrs)
    for key, value in cycle.attrs.items():
        if key not in _USAGE_ATTRS:
            attributes[attribute_name(key)] = value
    if counted:
        attributes |= usage_attributes(span.token_kinds, span.cost_usd, span.model)
    start = _ns(span.start)
    return SpanData(
        name=span.action,
        trace_id=trace_id_of(root_session_id),
        span_id=cycle_span_id(root_session_id, session_id, span.first_seq),
        parent_span_id=session_span_id(root_session_id, session_id),
        start_ns=start,
        end_ns=max(start, _ns(span.end)),
        attributes=attributes,
        events=list(cycle.events),
        error=(span.error or "FAILED") if failed else None,
        exception=failed,
    )


def session_span(info: SessionInfo) -> SpanData:
    """Return the span of a whole session, child of its parent session's span when it has one."""
    attributes = _common(info.root_session_id, info.session_id, info.agent)
    attributes |= {
        "openinference.span.kind": "AGENT",
        "gen_ai.operation.name": "invoke_agent",
        "gz_ia.events": info.events,
        "gz_ia.failures": info.failures,
    }
    if info.role:
        attributes["gz_ia.role"] = info.role
    parent = None
    if info.parent_session_id and info.root_session_id != info.session_id:
        attributes["gz_ia.parent_session_id"] = info.parent_session_id
        parent = session_span_id(info.root_session_id, info.parent_session_id)
    start = _ns(info.first_time)
    return SpanData(
        name=f"invoke_agent {info.role or info.agent}",
        trace_id=trace_id_of(info.root_session_id),
        span_id=session_span_id(info.root_session_id, info.session_id),
        parent_span_id=parent,
        start_ns=start,
        end_ns=max(start, _ns(info.last_time)),
        attributes=attributes,
        error=f"{info.failures} of its actions failed" if info.failures else None,
    )
