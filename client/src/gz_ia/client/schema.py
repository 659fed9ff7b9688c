"""The LogEvent: the one definition of an agent's stage event, shared by client, collector and reader.

The field set, types and required fields mirror ``logevent.schema.json`` (draft-07) exactly; the
constraints added here (safe session ids, bounded lengths, timezone-aware timestamps) only narrow it.
``omit_defaults=True`` keeps unset optional fields out of the encoded form: the JSON schema types them
as strings, so a ``null`` would be invalid.

Schema evolution follows msgspec's rules: new fields get defaults, existing types never change, and
these Structs never set ``forbid_unknown_fields`` so that older readers accept newer lines.
"""

from __future__ import annotations

import enum
import re
from datetime import datetime
from typing import Annotated, Final

import msgspec

from .limits import (
    MAX_ACTION_LENGTH,
    MAX_AGENT_LENGTH,
    MAX_ATTR_KEY_LENGTH,
    MAX_ATTR_STRING_LENGTH,
    MAX_ATTRS,
    MAX_CYCLE_LENGTH,
    MAX_ERROR_LENGTH,
    MAX_SESSION_ID_LENGTH,
    attrs_fit,
    fits,
    storable,
)

__all__ = [
    "CUT_ATTRS_KEY",
    "FIRST_SCHEMA_VERSION",
    "MAX_ACTION_LENGTH",
    "MAX_AGENT_LENGTH",
    "MAX_ATTRS",
    "MAX_ATTR_KEY_LENGTH",
    "MAX_ATTR_STRING_LENGTH",
    "MAX_CYCLE_LENGTH",
    "MAX_ERROR_LENGTH",
    "MAX_SESSION_ID_LENGTH",
    "SCHEMA_VERSION",
    "SESSION_ID_PATTERN",
    "AttrValue",
    "LogEvent",
    "SessionId",
    "Stage",
    "Status",
    "StoredEvent",
    "cut_text",
    "fit_attrs",
    "fit_event",
    "fit_fields",
    "fits",
    "is_safe_session_id",
    "storable",
]


class Stage(enum.StrEnum):
    """Where a task is in its cycle: exploring, changing things, or done."""

    READ = "READ"
    PENDING = "PENDING"
    FINISH = "FINISH"


class Status(enum.StrEnum):
    """The outcome carried by a stage event; FAILED requires an ``error``."""

    OK = "OK"
    FAILED = "FAILED"


FAILED: Final = Status.FAILED
"""``Status.FAILED`` for the per-event paths: on Python 3.11 every attribute lookup on an enum class
goes through ``EnumType.__getattr__``'s hook, many times slower than reading a global."""


# A session id becomes a file name: letters, digits, "_", "-", "."; never a leading dot (no hidden
# files, no "." or ".."), never a slash, bounded so that the file name stays far below NAME_MAX.
# "\Z", not "$": msgspec searches with re.search, and "$" would also match before a final newline.
SESSION_ID_PATTERN: Final = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}\Z"

SessionId = Annotated[str, msgspec.Meta(pattern=SESSION_ID_PATTERN, max_length=MAX_SESSION_ID_LENGTH)]
Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]
Action = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ACTION_LENGTH)]
Agent = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_AGENT_LENGTH)]
Role = Annotated[str, msgspec.Meta(max_length=MAX_AGENT_LENGTH)]
ErrorText = Annotated[str, msgspec.Meta(max_length=MAX_ERROR_LENGTH)]
DurationMs = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
AttrKey = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ATTR_KEY_LENGTH)]
AttrValue = (
    bool
    | Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
    | float
    | Annotated[str, msgspec.Meta(max_length=MAX_ATTR_STRING_LENGTH)]
)
Attrs = Annotated[dict[AttrKey, AttrValue], msgspec.Meta(max_length=MAX_ATTRS)]
StoredAttrs = Annotated[dict[AttrKey, AttrValue | None], msgspec.Meta(max_length=MAX_ATTRS)]
"""``attrs`` as readers take it from a file: earlier collectors wrote a NaN or an infinity as
``null``, and a reader must still show that line (no collector writes a ``null`` now)."""
Cycle = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CYCLE_LENGTH)]

_SAFE_ID: Final = re.compile(SESSION_ID_PATTERN)

CUT_ATTRS_KEY: Final = "gz-ia.cut_attrs"
"""Set by the client on an event whose ``attrs`` had more than :data:`MAX_ATTRS` entries: how many
it left out to keep within the bound."""


def is_safe_session_id(value: str) -> bool:
    """Tell whether ``value`` may become a file name under a session root (the pattern, matched in C)."""
    return _SAFE_ID.match(value) is not None


class LogEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One stage event of one task, as an agent reports it.

    ``attrs`` is a small optional map of per-event measurements (token counts, exit codes, bytes);
    the published schema allows such extra properties, as it allows ``cycle``: the id of one run of
    ``action`` (one action scope), so that two runs of the same action open at once are two cycles
    of the stage protocol, each keeping its own outcome. Without it, an action has one cycle at a time.

    ``root_session_id`` names the top of a subagent's tree when it is not the parent itself (a
    subagent of a subagent): so that a reader places the session under that root even when the
    sessions between them never logged an event. Declared last: the encoders that lay the fields out
    by hand (the client's positional record, the one-shot commands') append it.
    """

    timestamp: Timestamp
    session_id: SessionId
    parent_session_id: SessionId | None = None
    action: Action
    stage: Stage
    status: Status
    agent: Agent
    role: Role | None = None
    duration_ms: DurationMs | None = None
    error: ErrorText | None = None
    attrs: Attrs | None = None
    cycle: Cycle | None = None
    root_session_id: SessionId | None = None

    def __post_init__(self) -> None:
        # Raised during decoding, msgspec turns this into a ValidationError for the event.
        if self.status is FAILED and not self.error:
            raise ValueError("status FAILED requires a non-empty error")


SCHEMA_VERSION: Final = 2
"""The version of what a stored line may hold, written into every line (``schema_version``).

1: the seeds' event (lines without ``schema_version``). 2: ``attrs`` may be a usage record
(:mod:`gz_ia.client.usage`). Every change to what a line may hold bumps it; readers read every
version up to theirs and, from a newer line, what they know (unknown fields are never refused).
An incompatible change (a field whose type or meaning changes) also bumps the root's layout version,
so that older readers refuse the root instead of misreading it.
"""
FIRST_SCHEMA_VERSION: Final = 1
"""The version of a stored line that names none: written before lines carried one."""


class StoredEvent(LogEvent, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A LogEvent as the collector stores it: one JSON line in ``<root>/sessions/<id>.events.jsonl``.

    ``seq`` is the per-session write order, starting at 1 without gaps. ``delivery`` is
    ``"<producer>:<n>"``, the sender's idempotency key, which lets the collector recognise a resent
    event after a crash from the file alone. ``schema_version`` is the :data:`SCHEMA_VERSION` the
    line was written with (:data:`FIRST_SCHEMA_VERSION` when it names none).
    """

    seq: int = 0
    delivery: str | None = None
    schema_version: int = FIRST_SCHEMA_VERSION
    attrs: StoredAttrs | None = None  # type: ignore[assignment]  # LogEvent's, and the null of old lines


# --- keeping an event within the limits -----------------------------------------------------------
# The client cuts what an agent hands it rather than let the collector refuse the whole event: a
# 2 MB error message is still worth its first 16 KiB, and it must never cost the events after it.


def cut_text(text: str, limit: int) -> str:
    """Return ``text`` if it has at most ``limit`` characters, else its start marked as cut.

    The mark, ``…[cut, <n> chars]``, names the original length; the result has exactly ``limit``
    characters, so the same long text is always cut the same way (an action's events keep one name).
    """
    if len(text) <= limit:
        return text
    mark = f"…[cut, {len(text)} chars]"
    if len(mark) >= limit:
        return text[:limit]
    return text[: limit - len(mark)] + mark


def fit_attrs(attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    """Return ``attrs`` within the limits: values made storable (:func:`storable`: NaN, infinities
    and ints past 64 bits become strings), keys and string values cut (:func:`cut_text`), and past
    :data:`MAX_ATTRS` entries the rest left out and counted in :data:`CUT_ATTRS_KEY`.

    Values of other types are left as they are (the collector judges them).
    """
    if attrs_fit(attrs):
        return attrs
    items = list(attrs.items())
    left_out = 0
    if len(items) > MAX_ATTRS:
        left_out = len(items) - (MAX_ATTRS - 1)
        items = items[: MAX_ATTRS - 1]
    fitted: dict[str, AttrValue] = {}
    for key, value in items:
        value = storable(value)
        fitted[cut_text(key, MAX_ATTR_KEY_LENGTH) if isinstance(key, str) else key] = (
            cut_text(value, MAX_ATTR_STRING_LENGTH) if isinstance(value, str) else value
        )
    if left_out:
        fitted[CUT_ATTRS_KEY] = left_out
    return fitted


def fit_fields(
    action: str, agent: str, role: str | None, error: str | None, attrs: dict[str, AttrValue] | None
) -> tuple[str, str, str | None, str | None, dict[str, AttrValue] | None]:
    """Return the free-text fields of an event cut to their limits (:func:`cut_text`, :func:`fit_attrs`).

    Ids are not cut (a cut id would name another session): the scope constructors refuse bad ones.

    Raises:
        TypeError: a text field is not a string.
    """
    return (
        cut_text(action, MAX_ACTION_LENGTH),
        cut_text(agent, MAX_AGENT_LENGTH),
        None if role is None else cut_text(role, MAX_AGENT_LENGTH),
        None if error is None else cut_text(error, MAX_ERROR_LENGTH),
        None if attrs is None else fit_attrs(attrs),
    )


def fit_event(event: LogEvent) -> LogEvent:
    """Return ``event`` with its free-text fields cut to their limits (itself when they fit)."""
    fields = (event.action, event.agent, event.role, event.error, event.attrs)
    try:
        if fits(*fields):
            return event
    except (TypeError, AttributeError):
        return event  # a field of the wrong type: nothing to cut, the collector judges the event
    action, agent, role, error, attrs = fit_fields(*fields)
    return msgspec.structs.replace(event, action=action, agent=agent, role=role, error=error, attrs=attrs)
