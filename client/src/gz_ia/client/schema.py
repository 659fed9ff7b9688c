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

__all__ = [
    "MAX_ACTION_LENGTH",
    "MAX_AGENT_LENGTH",
    "MAX_ATTRS",
    "MAX_ERROR_LENGTH",
    "MAX_SESSION_ID_LENGTH",
    "SESSION_ID_PATTERN",
    "AttrValue",
    "LogEvent",
    "SessionId",
    "Stage",
    "Status",
    "StoredEvent",
    "is_safe_session_id",
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
goes through ``EnumType.__getattr__``'s hook (0.175 µs against 0.010 µs for a global)."""


MAX_SESSION_ID_LENGTH: Final = 128
MAX_ACTION_LENGTH: Final = 512
MAX_AGENT_LENGTH: Final = 128
MAX_ERROR_LENGTH: Final = 16 * 1024
MAX_ATTRS: Final = 32
MAX_ATTR_KEY_LENGTH: Final = 64
MAX_ATTR_STRING_LENGTH: Final = 1024

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

_SAFE_ID: Final = re.compile(SESSION_ID_PATTERN)


def is_safe_session_id(value: str) -> bool:
    """Tell whether ``value`` may become a file name under a session root (the pattern, matched in C)."""
    return _SAFE_ID.match(value) is not None


class LogEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One stage event of one task, as an agent reports it.

    ``attrs`` is a small optional map of per-event measurements (token counts, exit codes, bytes);
    the published schema allows such extra properties.
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

    def __post_init__(self) -> None:
        # Raised during decoding, msgspec turns this into a ValidationError for the event.
        if self.status is FAILED and not self.error:
            raise ValueError("status FAILED requires a non-empty error")


class StoredEvent(LogEvent, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A LogEvent as the collector stores it: one JSON line in ``<root>/sessions/<id>.events.jsonl``.

    ``seq`` is the per-session write order, starting at 1 without gaps. ``delivery`` is
    ``"<producer>:<n>"``, the sender's idempotency key, which lets the collector recognise a resent
    event after a crash from the file alone.
    """

    seq: int = 0
    delivery: str | None = None
