"""Turning a received batch into events, and bad events into precise rejection reasons.

The fast path decodes a whole batch straight into typed, constrained :class:`LogEvent` Structs in one
msgspec call. Only when that fails is the batch decoded event by event, and only the events that
fail are examined field by field against the rules (:mod:`.rules`), to give each a reason code that
metrics can count and a sentence the sender can act on.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Final

import msgspec

from gz_ia.client.protocol import Batch, RejectReason
from gz_ia.client.schema import MAX_SESSION_ID_LENGTH, LogEvent

from .rules import Rejection, broken_field_rule, malformed

__all__ = ["DecodedBatch", "checked_batch", "checked_batches", "classify", "decode_batch", "refused_batch"]


def _with_loose_ids() -> type[LogEvent]:
    """LogEvent whose session ids are only length-checked while decoding.

    The id pattern is half the cost of decoding a batch; Ingest checks it once per session (and per
    new parent id) instead (:func:`.rules.unsafe_id`), so every id is still validated before use.
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
_WireEvents: Final[Any] = list[_WireLogEvent]  # type: ignore[valid-type]
_WireEventLists: Final[Any] = list[list[_WireLogEvent]]  # type: ignore[valid-type]


_any_decoder: Final = msgspec.msgpack.Decoder()
_raw_batch_decoder: Final = msgspec.msgpack.Decoder(Batch)


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


def checked_batch(first: int, events: list[dict[str, Any]]) -> DecodedBatch:
    """A batch of events a receiver inside the collector made as plain fields (an agent's hook
    payload, its telemetry), checked as :func:`decode_batch` checks a client's: all at once when
    every event is valid, else event by event, each bad one with the same reason it would get
    from the socket. Nothing is encoded to be decoded again.
    """
    try:
        typed = msgspec.convert(events, _WireEvents)
    except msgspec.ValidationError:
        pass
    else:
        return DecodedBatch(first, True, typed, {}, {})
    checked: list[LogEvent | None] = []
    rejections: dict[int, Rejection] = {}
    bodies: dict[int, bytes] = {}
    for index, fields in enumerate(events):
        try:
            checked.append(msgspec.convert(fields, LogEvent))
        except msgspec.ValidationError as exc:
            checked.append(None)
            bodies[index] = msgspec.msgpack.encode(fields)
            rejections[index] = classify(bodies[index], exc)
    return DecodedBatch(first, True, checked, rejections, bodies)


def checked_batches(event_lists: list[list[dict[str, Any]]]) -> list[DecodedBatch]:
    """:func:`checked_batch` (first number 1) of each list, converted in one call when all are valid:
    a receiver's export holds many small items, each a batch of its own."""
    try:
        typed = msgspec.convert(event_lists, _WireEventLists)
    except msgspec.ValidationError:
        return [checked_batch(1, events) for events in event_lists]
    return [DecodedBatch(1, True, events, {}, {}) for events in typed]


def refused_batch(detail: str, shown: dict[str, Any]) -> DecodedBatch:
    """A batch of the one event a receiver could not make from what it was sent (``shown``, kept
    for the rejects file), refused as an invalid field with ``detail``: staged, it is refused and
    recorded as an event that fails validation is, and the rest of its export is not touched."""
    body = msgspec.msgpack.encode(shown)
    return DecodedBatch(1, True, [None], {0: Rejection(RejectReason.INVALID_FIELD, detail)}, {0: body})


def classify(body: bytes, exc: msgspec.DecodeError) -> Rejection:
    """Give the first problem of an event that failed to decode a reason code and a sentence."""
    detail = str(exc)
    try:
        fields = _any_decoder.decode(body)
    except msgspec.DecodeError:
        return malformed(f"event is not valid MessagePack: {detail}")
    if not isinstance(fields, dict):
        return malformed("event must be a map of fields")
    return broken_field_rule(fields) or Rejection(RejectReason.INVALID_FIELD, detail)
