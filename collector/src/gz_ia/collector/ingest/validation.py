"""Turning a received batch into events, and bad events into precise rejection reasons.

The fast path decodes a whole batch straight into typed, constrained :class:`LogEvent` Structs in one
msgspec call. Only when that fails is the batch decoded event by event, and only the events that
fail are examined field by field, to give each a reason code that metrics can count and a sentence
the sender can act on.
"""

from __future__ import annotations

import re
import typing
from datetime import datetime
from typing import Annotated, Any, Final

import msgspec

from gz_ia.client.protocol import Batch, RejectReason
from gz_ia.client.schema import (
    MAX_ACTION_LENGTH,
    MAX_AGENT_LENGTH,
    MAX_ATTRS,
    MAX_ERROR_LENGTH,
    MAX_SESSION_ID_LENGTH,
    SESSION_ID_PATTERN,
    LogEvent,
    Stage,
    Status,
)

from .stages import Rejection

__all__ = ["DecodedBatch", "decode_batch", "unsafe_id"]


def _with_loose_ids() -> type[LogEvent]:
    """LogEvent whose session ids are only length-checked while decoding.

    The id pattern is half the cost of decoding a batch; Ingest checks it once per session (and per
    new parent id) instead, with :func:`unsafe_id`, so every id is still validated before use.
    """
    hints = typing.get_type_hints(LogEvent, include_extras=True)
    loose = Annotated[str, msgspec.Meta(max_length=MAX_SESSION_ID_LENGTH)]
    replaced: dict[str, Any] = {"session_id": loose, "parent_session_id": loose | None, "root_session_id": loose | None}
    fields: list[Any] = []
    for field in msgspec.structs.fields(LogEvent):
        kind = replaced.get(field.name, hints[field.name])
        fields.append((field.name, kind) if field.required else (field.name, kind, field.default))
    wire = msgspec.defstruct(
        "WireLogEvent", fields, bases=(LogEvent,), frozen=True, kw_only=True, omit_defaults=True, gc=False
    )
    assert issubclass(wire, LogEvent)
    return wire


_WireLogEvent: Final = _with_loose_ids()
_fast_batch_decoder: Final = msgspec.msgpack.Decoder(
    msgspec.defstruct(
        "WireBatch",
        [("first", int), ("events", list[_WireLogEvent]), ("verdicts", bool, False)],  # type: ignore[valid-type]
        tag="batch",
        kw_only=True,
    )
)
_event_decoder: Final = msgspec.msgpack.Decoder(LogEvent)


_any_decoder: Final = msgspec.msgpack.Decoder()
_raw_batch_decoder: Final = msgspec.msgpack.Decoder(Batch)
_SESSION_ID: Final = re.compile(SESSION_ID_PATTERN)
_REQUIRED: Final = ("timestamp", "session_id", "action", "stage", "status", "agent")
_LENGTHS: Final = {
    "action": MAX_ACTION_LENGTH,
    "agent": MAX_AGENT_LENGTH,
    "role": MAX_AGENT_LENGTH,
    "error": MAX_ERROR_LENGTH,
}


class DecodedBatch(msgspec.Struct):
    """A batch with each event either decoded or rejected (``events[i]`` is None when rejected)."""

    first: int
    verdicts: bool
    events: list[LogEvent | None]
    rejections: dict[int, Rejection]
    raw: dict[int, bytes]
    """Bodies of the events that failed to decode, kept for the rejects file."""


def decode_batch(body: bytes) -> DecodedBatch:
    """Decode a Batch frame body: all at once when every event is valid, else event by event.

    Raises:
        msgspec.DecodeError: the frame is not a well-formed batch (maybe another message).
    """
    try:
        typed: Any = _fast_batch_decoder.decode(body)
    except msgspec.ValidationError:
        pass
    else:
        return DecodedBatch(typed.first, typed.verdicts, list(typed.events), {}, {})
    raw = _raw_batch_decoder.decode(body)
    events: list[LogEvent | None] = []
    rejections: dict[int, Rejection] = {}
    bodies: dict[int, bytes] = {}
    for index, item in enumerate(raw.events):
        try:
            events.append(_event_decoder.decode(item))
        except msgspec.DecodeError as exc:
            events.append(None)
            bodies[index] = bytes(item)
            rejections[index] = classify(bodies[index], exc)
    return DecodedBatch(raw.first, raw.verdicts, events, rejections, bodies)


def unsafe_id(name: str, value: object) -> Rejection:
    """The rejection of an event whose ``session_id``, ``parent_session_id`` or ``root_session_id`` is not a safe id."""
    return Rejection(
        RejectReason.INVALID_SESSION_ID,
        f"{name} {value!r:.80} is not a safe id: 1-128 of letters, digits, '_', '-', '.', not starting with '.'",
    )


def classify(body: bytes, exc: msgspec.DecodeError) -> Rejection:
    """Give the first problem of an event that failed to decode a reason code and a sentence."""
    detail = str(exc)
    try:
        fields = _any_decoder.decode(body)
    except msgspec.DecodeError:
        return Rejection(RejectReason.MALFORMED, f"event is not valid MessagePack: {detail}")
    if not isinstance(fields, dict):
        return Rejection(RejectReason.MALFORMED, "event must be a map of fields")
    return _classify_fields(fields) or Rejection(RejectReason.INVALID_FIELD, detail)


def _classify_fields(fields: dict[Any, Any]) -> Rejection | None:
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
