"""Every rule an event must pass to be written, each with its reject reason and the sentence its sender reads.

One place to read what the collector refuses and why. The rules are checked where they can be
checked cheaply, and each place builds its refusal here:

* decoding (:mod:`.validation`): one msgspec call holds the whole batch to the event's schema; only
  an event that fails it is examined field by field (:func:`broken_field_rule`) for its reason;
* staging (:mod:`.staging`): the producer's numbering, the timestamp's range, the session ids'
  pattern (decoding only length-checks them), whether the session's files can be opened safely;
* the stage protocol (:mod:`.stages`): which stage may follow which, and the bounds on open cycles;
* the connection (``service``): how many events a batch may hold, and, in a sharded collector,
  whether the session is this process's.

:data:`RULES` lists them in the order an event meets them. A rejection is an expected outcome, not
an exception: the event is answered with it, counted by its reason and kept in the rejects file.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import msgspec

from gz_ia.client.protocol import MAX_BATCH_EVENTS, RejectReason
from gz_ia.client.schema import (
    MAX_ACTION_LENGTH,
    MAX_AGENT_LENGTH,
    MAX_ATTRS,
    MAX_ERROR_LENGTH,
    SESSION_ID_PATTERN,
    Stage,
    Status,
)

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_EVENT_NUMBER",
    "RULES",
    "Rejection",
    "Rule",
    "backward_transition",
    "broken_field_rule",
    "finish_without_start",
    "invalid_event_number",
    "malformed",
    "misrouted",
    "session_unavailable",
    "timestamp_out_of_range",
    "too_many_events",
    "too_many_open_actions",
    "too_many_open_actions_total",
    "unsafe_id",
]

EARLIEST_TIMESTAMP: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""Events stamped before this are refused (``timestamp_out_of_range``)."""
LATEST_TIMESTAMP: Final = datetime(2100, 1, 1, tzinfo=UTC)
"""Events stamped at or after this are refused: every reader can convert what lies between to any
local time zone, and order it."""
MAX_EVENT_NUMBER: Final = 2**63 - 1
"""Producers number their events from 1 up to this (a signed 64-bit integer everywhere)."""


class Rejection(msgspec.Struct, frozen=True):
    """Why an event cannot be accepted: a reason code and a sentence for people."""

    reason: RejectReason
    detail: str


class Rule(NamedTuple):
    """One rule: the reason an event breaking it is refused with, where it is checked, what it asks."""

    reason: RejectReason
    checked_in: str
    requires: str


RULES: Final[tuple[Rule, ...]] = (
    Rule(RejectReason.TOO_MANY_EVENTS, "connection", f"a batch holds at most {MAX_BATCH_EVENTS} events"),
    Rule(RejectReason.MALFORMED, "validation", "the event is a MessagePack map of fields"),
    Rule(RejectReason.MISSING_FIELD, "validation", "timestamp, session_id, action, stage, status, agent are present"),
    Rule(RejectReason.INVALID_TIMESTAMP, "validation", "the timestamp is RFC 3339 and carries a UTC offset"),
    Rule(RejectReason.INVALID_DURATION, "validation", "duration_ms, if present, is an integer from 0 to 2^53"),
    Rule(RejectReason.INVALID_FIELD, "validation", "stage and status are known values; action and agent not empty"),
    Rule(RejectReason.FIELD_TOO_LONG, "validation", "action, agent, role and error are within their lengths"),
    Rule(RejectReason.ERROR_REQUIRED, "validation", "a FAILED event carries a non-empty error"),
    Rule(RejectReason.ATTRS_TOO_LARGE, "validation", f"attrs is a map of at most {MAX_ATTRS} short scalar values"),
    Rule(RejectReason.MISROUTED, "duties", "the session is served by this collector process (sharded collectors)"),
    Rule(RejectReason.INVALID_EVENT_NUMBER, "staging", f"the batch numbers its events within 1..{MAX_EVENT_NUMBER}"),
    Rule(RejectReason.TIMESTAMP_OUT_OF_RANGE, "staging", "the timestamp lies in 1970-01-01 up to 2100-01-01"),
    Rule(RejectReason.INVALID_SESSION_ID, "validation, staging", "session, parent and root ids are safe ids"),
    Rule(RejectReason.SESSION_UNAVAILABLE, "staging", "the session's files can be opened safely"),
    Rule(RejectReason.FINISH_WITHOUT_START, "stages", "FINISH closes an open cycle"),
    Rule(RejectReason.BACKWARD_TRANSITION, "stages", "a cycle never goes back (READ after PENDING)"),
    Rule(RejectReason.TOO_MANY_OPEN_ACTIONS, "stages", "a session holds at most max_open_actions open cycles"),
    Rule(
        RejectReason.TOO_MANY_OPEN_ACTIONS_TOTAL,
        "stages",
        "the collector holds at most max_open_actions_total open cycles",
    ),
)
"""Every rule, in the order an event meets them."""

_SESSION_ID: Final = re.compile(SESSION_ID_PATTERN)
_REQUIRED: Final = ("timestamp", "session_id", "action", "stage", "status", "agent")
_LENGTHS: Final = {
    "action": MAX_ACTION_LENGTH,
    "agent": MAX_AGENT_LENGTH,
    "role": MAX_AGENT_LENGTH,
    "error": MAX_ERROR_LENGTH,
}


# --- the batch and the connection ------------------------------------------------------------------


def too_many_events() -> Rejection:
    return Rejection(RejectReason.TOO_MANY_EVENTS, f"a batch holds at most {MAX_BATCH_EVENTS} events")


def misrouted(detail: str) -> Rejection:
    """``detail`` is the serving process's own sentence (which share serves the session)."""
    return Rejection(RejectReason.MISROUTED, detail)


def invalid_event_number(first: int) -> Rejection:
    return Rejection(
        RejectReason.INVALID_EVENT_NUMBER,
        f"the batch numbers its events from {first}; a producer numbers them from 1 up to 2^63-1",
    )


# --- the fields ------------------------------------------------------------------------------------


def malformed(detail: str) -> Rejection:
    return Rejection(RejectReason.MALFORMED, detail)


def unsafe_id(name: str, value: object) -> Rejection:
    """The rejection of an event whose ``session_id``, ``parent_session_id`` or ``root_session_id`` is not a safe id."""
    return Rejection(
        RejectReason.INVALID_SESSION_ID,
        f"{name} {value!r:.80} is not a safe id: 1-128 of letters, digits, '_', '-', '.', not starting with '.'",
    )


def timestamp_out_of_range(timestamp: datetime) -> Rejection:
    return Rejection(
        RejectReason.TIMESTAMP_OUT_OF_RANGE,
        f"timestamp {timestamp.isoformat()} is outside 1970-01-01T00:00:00Z up to 2100-01-01T00:00:00Z (exclusive)",
    )


def session_unavailable(session_id: str, root: object, exc: BaseException) -> Rejection:
    return Rejection(
        RejectReason.SESSION_UNAVAILABLE, f"session {session_id!r} cannot be opened safely under {root}: {exc}"
    )


def broken_field_rule(fields: dict[Any, Any]) -> Rejection | None:
    """The first field rule that ``fields`` (an event decoded as a plain map) breaks, or None."""
    for name in _REQUIRED:
        if name not in fields:
            return Rejection(RejectReason.MISSING_FIELD, f"required field {name!r} is missing")
    for name in ("session_id", "parent_session_id", "root_session_id"):
        value = fields.get(name)
        if (value is not None or name == "session_id") and not (isinstance(value, str) and _SESSION_ID.match(value)):
            return unsafe_id(name, value)
    timestamp = fields["timestamp"]
    if not isinstance(timestamp, datetime):
        try:
            timestamp = msgspec.convert(timestamp, datetime)
        except msgspec.ValidationError:
            return Rejection(RejectReason.INVALID_TIMESTAMP, f"timestamp {timestamp!r:.80} is not RFC 3339")
    if timestamp.tzinfo is None:
        return Rejection(RejectReason.INVALID_TIMESTAMP, "timestamp must carry a UTC offset (e.g. 'Z')")
    duration = fields.get("duration_ms")
    if duration is not None and (
        isinstance(duration, bool) or not isinstance(duration, int) or not 0 <= duration <= 2**53
    ):
        return Rejection(RejectReason.INVALID_DURATION, f"duration_ms must be an integer >= 0, got {duration!r:.40}")
    for name, enum in (("stage", Stage), ("status", Status)):
        if fields[name] not in set(enum):
            allowed = " | ".join(enum)
            return Rejection(RejectReason.INVALID_FIELD, f"{name} must be {allowed}, got {fields[name]!r:.40}")
    for name, limit in _LENGTHS.items():
        value = fields.get(name)
        if value is None and name in ("role", "error"):
            continue
        if not isinstance(value, str):
            return Rejection(RejectReason.INVALID_FIELD, f"{name} must be a string")
        if len(value) > limit:
            return Rejection(RejectReason.FIELD_TOO_LONG, f"{name} is {len(value)} characters; the limit is {limit}")
        if not value and name in ("action", "agent"):
            return Rejection(RejectReason.INVALID_FIELD, f"{name} must not be empty")
    if fields["status"] == Status.FAILED and not fields.get("error"):
        return Rejection(RejectReason.ERROR_REQUIRED, "status FAILED requires a non-empty error")
    attrs = fields.get("attrs")
    if attrs is not None and (not isinstance(attrs, dict) or len(attrs) > MAX_ATTRS):
        return Rejection(
            RejectReason.ATTRS_TOO_LARGE,
            f"attrs must be a map of at most {MAX_ATTRS} scalar values (keys <= 64, strings <= 1024 chars)",
        )
    if attrs is not None:
        return Rejection(
            RejectReason.ATTRS_TOO_LARGE,
            "attrs values must be bool, int, float or short strings (keys <= 64, strings <= 1024 chars)",
        )
    return None


# --- the stage protocol ----------------------------------------------------------------------------


def finish_without_start(named: str) -> Rejection:
    """``named``: the action, and its cycle if the event names one (``action 'x' cycle 'c'``)."""
    return Rejection(
        RejectReason.FINISH_WITHOUT_START, f"FINISH for {named} which has no open cycle (start it with READ or PENDING)"
    )


def backward_transition(named: str) -> Rejection:
    return Rejection(
        RejectReason.BACKWARD_TRANSITION, f"READ after PENDING for {named}: a cycle cannot go back; FINISH it first"
    )


def too_many_open_actions(session_id: str, open_count: int) -> Rejection:
    return Rejection(
        RejectReason.TOO_MANY_OPEN_ACTIONS,
        f"session {session_id!r} already has {open_count} open actions; FINISH some before starting more",
    )


def too_many_open_actions_total(open_count: int) -> Rejection:
    return Rejection(
        RejectReason.TOO_MANY_OPEN_ACTIONS_TOTAL,
        f"the collector holds {open_count} open actions, its max_open_actions_total; FINISH some before starting more",
    )
