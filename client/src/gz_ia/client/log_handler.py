"""A stdlib :class:`logging.Handler` for programs that already log: tagged records become events.

A record becomes a stage event when its ``extra`` names a gz-ia action and stage; every other record
is ignored, so the handler can sit on the root logger beside any other::

    import logging
    from gz_ia.client.log_handler import GzIaHandler

    logging.getLogger().addHandler(GzIaHandler(agent="indexer"))
    log = logging.getLogger("indexer")
    log.info("indexing", extra={"gz_action": "Index deps", "gz_stage": "READ", "gz_session": "3f9a12c8"})
    log.info("done", extra={"gz_action": "Index deps", "gz_stage": "FINISH", "gz_session": "3f9a12c8",
                            "gz_duration_ms": 420, "gz_attrs": {"files": 12}})

The keys of ``extra`` (the contract):

- ``gz_action`` (str) and ``gz_stage`` (``READ``, ``PENDING`` or ``FINISH``): required; a record
  without both is not an event.
- ``gz_session``: the session id; default the handler's ``session_id``, else the session scope the
  record is logged in (:func:`gz_ia.client.current_session`). Without any, the record is ignored
  and counted in :attr:`GzIaHandler.ignored`.
- ``gz_status``: ``OK`` or ``FAILED``; default ``FAILED`` for a FINISH logged with an exception
  (``log.exception(...)``, ``exc_info=True``) or at level ERROR and above, else ``OK``.
- ``gz_error``: the error of a FAILED FINISH; default the exception (``Type: message``), else the
  record's message.
- ``gz_duration_ms`` (int), ``gz_attrs`` (a small dict of measurements), ``gz_agent``, ``gz_role``.

The record's message itself is not sent (it can be long and private); put what should be kept in
``gz_attrs``. Sending is the client's ``log()``: it never blocks and never raises because of delivery.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from .schema import Stage, Status

__all__ = ["GzIaHandler"]

_STAGES: Final = {stage.value: stage for stage in Stage}
_STATUSES: Final = {status.value: status for status in Status}


class GzIaHandler(logging.Handler):
    """Log records tagged with ``gz_action`` and ``gz_stage`` as gz-ia stage events.

    Args:
        agent: the ``agent`` of every event unless a record says ``gz_agent``.
        session_id: the session of records that name none; default the current session scope's.
        role: the default ``role``.
        client: what sends the events; default the process's client (:func:`gz_ia.client.get_client`,
            a no-op with ``GZ_IA_DISABLED=1``).
        level: the handler's level, as for any handler.
    """

    def __init__(
        self,
        agent: str,
        *,
        session_id: str | None = None,
        role: str | None = None,
        client: Any = None,
        level: int = logging.NOTSET,
    ) -> None:
        super().__init__(level)
        self.agent = agent
        self.session_id = session_id
        self.role = role
        self._client = client
        self.sent = 0
        """Records turned into events."""
        self.ignored = 0
        """Tagged records that could not become an event (no session, bad stage or status)."""

    def emit(self, record: logging.LogRecord) -> None:
        """Send ``record`` if it is tagged; never raises."""
        fields = record.__dict__
        action = fields.get("gz_action")
        stage_name = fields.get("gz_stage")
        if action is None or stage_name is None:
            return
        try:
            self._send(record, fields, str(action), str(stage_name).upper())
        except Exception:
            self.ignored += 1

    def _send(self, record: logging.LogRecord, fields: dict[str, Any], action: str, stage_name: str) -> None:
        from ._scope import current_session, describe_exception, get_client

        scope = current_session()
        session_id = fields.get("gz_session") or self.session_id or (scope.session_id if scope else None)
        stage = _STAGES.get(stage_name)
        failing = record.exc_info is not None or record.levelno >= logging.ERROR
        default_status = "FAILED" if stage is Stage.FINISH and failing else "OK"
        status = _STATUSES.get(str(fields.get("gz_status", default_status)).upper())
        if not session_id or stage is None or status is None:
            self.ignored += 1
            return
        error = fields.get("gz_error")
        if status is Status.FAILED and not error:
            exc = record.exc_info[1] if record.exc_info else None
            error = describe_exception(exc) if exc is not None else record.getMessage()
        # The scope the record is logged in lends its client, agent and parent only to its own session.
        owner = scope if scope is not None and scope.session_id == session_id else None
        client = self._client if self._client is not None else (owner.client if owner else get_client())
        client.log(
            session_id=str(session_id),
            action=action,
            stage=stage,
            status=status,
            agent=str(fields.get("gz_agent") or (owner.agent if owner else self.agent)),
            role=fields.get("gz_role") or self.role or (owner.role if owner else None),
            parent_session_id=owner.parent_session_id if owner else None,
            root_session_id=owner.root_session_id if owner else None,
            duration_ms=fields.get("gz_duration_ms"),
            error=str(error) if error else None,  # the client cuts it to its limit, marked
            attrs=fields.get("gz_attrs"),
        )
        self.sent += 1
