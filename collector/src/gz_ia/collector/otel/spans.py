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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import msgspec

from gz_ia.client.schema import Stage, Status, StoredEvent
from gz_ia.client.usage import COST_USD, MODEL, TOKEN_KEYS

__all__ = [
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
]

MAX_SPAN_EVENTS: Final = 128
"""Stage events kept per cycle span; the rest are counted in ``gz_ia.dropped_span_events``."""

Attr = str | int | float | bool


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
    """A cycle whose FINISH has not been read yet (persisted with the exporter's position)."""

    action: str
    cycle: str | None = None
    first_seq: int
    agent: str
    role: str | None = None
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
    """Set for a FAILED cycle: the span's status is ERROR with this description."""


def fold(state: TraceState, events: list[StoredEvent], root_session_id: str) -> list[SpanData]:
    """Fold ``events`` (in ``seq`` order, all after ``state.seq``) into ``state``; return the cycles they finished."""
    finished: list[SpanData] = []
    for event in events:
        key = event.action if event.cycle is None else f"{event.action}\0{event.cycle}"
        cycle = state.open.get(key)
        if cycle is None:
            cycle = OpenCycle(
                action=event.action, cycle=event.cycle, first_seq=event.seq, agent=event.agent, role=event.role
            )
            state.open[key] = cycle
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
        if event.attrs:  # without the nulls of old lines: OpenTelemetry has no null attribute
            cycle.attrs.update((key, value) for key, value in event.attrs.items() if value is not None)
        if event.stage is Stage.FINISH:
            del state.open[key]
            finished.append(_cycle_span(cycle, event, root_session_id))
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


def _cycle_span(cycle: OpenCycle, finish: StoredEvent, root_session_id: str) -> SpanData:
    session_id = finish.session_id
    attributes: dict[str, Attr] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": cycle.action,
        "gen_ai.agent.name": cycle.agent,
        "session.id": session_id,
        "gz_ia.action": cycle.action,
        "gz_ia.status": finish.status.value,
        "gz_ia.first_seq": cycle.first_seq,
        "gz_ia.last_seq": finish.seq,
        "gz_ia.root_session_id": root_session_id,
    }
    if cycle.cycle is not None:
        attributes["gz_ia.cycle"] = cycle.cycle
    if cycle.role:
        attributes["gz_ia.role"] = cycle.role
    if finish.duration_ms is not None:
        attributes["gz_ia.duration_ms"] = finish.duration_ms
    if cycle.dropped_events:
        attributes["gz_ia.dropped_span_events"] = cycle.dropped_events
    failed = finish.status is Status.FAILED
    if failed:
        attributes["error.type"] = "gz_ia.failed"
    for key, value in cycle.attrs.items():
        attributes[attribute_name(key)] = value
    start = cycle.events[0].time_ns if cycle.events else _ns(finish.timestamp)
    return SpanData(
        name=f"execute_tool {cycle.action}",
        trace_id=trace_id_of(root_session_id),
        span_id=cycle_span_id(root_session_id, session_id, cycle.first_seq),
        parent_span_id=session_span_id(root_session_id, session_id),
        start_ns=start,
        end_ns=max(start, _ns(finish.timestamp)),
        attributes=attributes,
        events=list(cycle.events),
        error=(finish.error or "FAILED") if failed else None,
    )


def session_span(info: SessionInfo) -> SpanData:
    """Return the span of a whole session, child of its parent session's span when it has one."""
    attributes: dict[str, Attr] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": info.agent,
        "session.id": info.session_id,
        "gz_ia.root_session_id": info.root_session_id,
        "gz_ia.events": info.events,
        "gz_ia.failures": info.failures,
    }
    parent = None
    if info.parent_session_id and info.root_session_id != info.session_id:
        attributes["gz_ia.parent_session_id"] = info.parent_session_id
        parent = session_span_id(info.root_session_id, info.parent_session_id)
    start = _ns(info.first_time)
    return SpanData(
        name=f"invoke_agent {info.agent}",
        trace_id=trace_id_of(info.root_session_id),
        span_id=session_span_id(info.root_session_id, info.session_id),
        parent_span_id=parent,
        start_ns=start,
        end_ns=max(start, _ns(info.last_time)),
        attributes=attributes,
    )
