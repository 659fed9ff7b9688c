"""Why the collector refuses an event, a frame or a connection: the one list of reasons.

A module of its own, with nothing but the standard library, so that :mod:`.errors` can name the
type without importing :mod:`.protocol` (which imports :mod:`.errors`); :mod:`.protocol` re-exports it.
"""

from __future__ import annotations

import enum

__all__ = ["RejectReason"]


class RejectReason(enum.StrEnum):
    """Machine-readable reason for refusing an event or a frame; the only metric label values."""

    MALFORMED = "malformed"
    FRAME_TOO_LARGE = "frame_too_large"
    TOO_MANY_EVENTS = "too_many_events"
    UNSUPPORTED_VERSION = "unsupported_version"
    HANDSHAKE_REQUIRED = "handshake_required"
    PERMISSION_DENIED = "permission_denied"
    ROOT_NOT_ALLOWED = "root_not_allowed"
    MISSING_FIELD = "missing_field"
    INVALID_FIELD = "invalid_field"
    INVALID_TIMESTAMP = "invalid_timestamp"
    TIMESTAMP_OUT_OF_RANGE = "timestamp_out_of_range"
    INVALID_SESSION_ID = "invalid_session_id"
    INVALID_DURATION = "invalid_duration"
    ERROR_REQUIRED = "error_required"
    FIELD_TOO_LONG = "field_too_long"
    ATTRS_TOO_LARGE = "attrs_too_large"
    BACKWARD_TRANSITION = "backward_transition"
    FINISH_WITHOUT_START = "finish_without_start"
    TOO_MANY_OPEN_ACTIONS = "too_many_open_actions"
    TOO_MANY_OPEN_ACTIONS_TOTAL = "too_many_open_actions_total"
    SESSION_UNAVAILABLE = "session_unavailable"
    WRITE_FAILED = "write_failed"
    INTERNAL_ERROR = "internal_error"
    SHUTTING_DOWN = "shutting_down"
    MISROUTED = "misrouted"
    INVALID_EVENT_NUMBER = "invalid_event_number"
    BUSY = "busy"
    ROOT_LOCKED = "root_locked"
    INVALID_SUBSCRIPTION = "invalid_subscription"
