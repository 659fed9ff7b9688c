"""An event from what a person or a tool typed: `gz-ia session log` and the MCP ``log_event`` tool.

Both accept stage and status in any case and, without an explicit parent, take the one a parent
process exported (``GZ_IA_PARENT_SESSION_ID``, with the root of its tree ``GZ_IA_ROOT_SESSION_ID``),
exactly as the thin client's scopes do.
"""

from __future__ import annotations

from gz_ia.client import LogEvent, build_event, env
from gz_ia.client.protocol import RejectReason
from gz_ia.client.schema import AttrValue, Stage, Status
from gz_ia.collector.errors import CollectorError
from gz_ia.collector.oneshot.session_log import attr_scalar

__all__ = ["TypedEventError", "attr_scalar", "typed_event"]


class TypedEventError(CollectorError, ValueError):
    """Typed input that makes no event, with the reason the collector would reject it for."""

    def __init__(self, detail: str, *, reason: RejectReason) -> None:
        super().__init__(detail)
        self.reason = reason


def typed_event(
    *,
    session_id: str,
    action: str,
    stage: str,
    status: str,
    agent: str,
    role: str | None,
    parent_session_id: str | None,
    duration_ms: int | None,
    error: str | None,
    attrs: dict[str, AttrValue] | None,
    root_session_id: str | None = None,
) -> LogEvent:
    """Build the event, stamped now.

    Raises:
        TypedEventError: an unknown stage or status or another invalid field (``invalid_field``),
            or FAILED without an error (``error_required``).
    """
    if parent_session_id is None:
        parent_session_id = env.inherited_parent(session_id)
    if root_session_id is None:
        root_session_id = env.inherited_root(session_id, parent_session_id)
    try:
        return build_event(
            session_id=session_id,
            action=action,
            stage=stage.upper(),
            status=status.upper(),
            agent=agent,
            role=role,
            parent_session_id=parent_session_id,
            duration_ms=duration_ms,
            error=error,
            attrs=attrs,
            root_session_id=root_session_id,
        )
    except (ValueError, TypeError) as exc:
        # The schema's one rule across fields gets the collector's own reason; the rest is a bad field.
        lacks_error = stage.upper() in Stage.__members__ and status.upper() == Status.FAILED and not error
        reason = RejectReason.ERROR_REQUIRED if lacks_error else RejectReason.INVALID_FIELD
        raise TypedEventError(str(exc), reason=reason) from exc
