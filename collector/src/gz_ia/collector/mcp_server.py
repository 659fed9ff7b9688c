"""The gz-ia MCP server: agents log and read sessions through MCP tools (``gz-ia mcp``, stdio).

Tools (every result is a JSON object, given as MCP structured content):

``log_event``
    Send one event, with the same validation and verdict as ``gz-ia session log``: the collector
    answers ``accepted`` with the event's ``seq``, or a reject ``reason`` and ``detail``.
``read_session``
    One page of a session's stored events, oldest first (or newest first), and the cursor of the
    next page.
``events_since``
    Follow-style and non-blocking: the events written after a cursor, in one session, several,
    or all of them, and the cursor to pass next time. An empty list means nothing new yet.
``list_sessions``
    The sessions under the root, most recently active first, with agent, parent and counts.
``session_summary``
    A session's subagent tree and its summary: counts, failures, open actions, durations.

This module needs the ``[mcp]`` extra (the official ``mcp`` SDK, 2.x); the command line checks for
it before importing this module. Reading goes through :mod:`gz_ia.collector._pages`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from gz_ia.client import Client
from gz_ia.client.errors import CollectorUnavailable, EventRejected
from gz_ia.client.protocol import RejectReason

from . import _pages
from .timeline import load_tree, summarize
from .typed_event import typed_event

__all__ = ["build_server", "serve"]

MAX_LIMIT: Final = 1000
INSTRUCTIONS: Final = (
    "gz-ia records what AI agents do as stage events: each task (action) goes READ (exploring) -> "
    "PENDING (editing, running tools) -> FINISH (status OK, or FAILED with an error). Use log_event to "
    "report your own progress in a session, and the read tools to see what agents and subagents did."
)


def _event_dict(line: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(line)
    value.pop("delivery", None)  # the collector's idempotency key: noise for a reader
    return value


def _clamp(limit: int) -> int:
    if limit < 1:
        raise ToolError("limit must be at least 1")
    return min(limit, MAX_LIMIT)


def _encode_cursors(cursors: dict[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(cursors, sort_keys=True).encode()).decode().rstrip("=")


def _decode_cursors(cursor: str) -> dict[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise ToolError(f"cursor {cursor!r} was not made by events_since") from exc
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ToolError(f"cursor {cursor!r} was not made by events_since")
    return value


def _tree_dict(node: Any) -> dict[str, Any]:
    return {
        "session_id": node.session_id,
        "agent": node.agent,
        "role": node.role,
        "events": node.events,
        "children": [_tree_dict(child) for child in node.children],
    }


def build_server(*, socket_path: Path, root: Path) -> tuple[MCPServer[Any], Callable[[], None]]:
    """Build the MCP server whose tools send to ``socket_path`` and read ``root``.

    Returns:
        The server, and a function that closes the client it opened (flushing what it queued).
    """
    server: MCPServer[Any] = MCPServer(name="gz-ia", instructions=INSTRUCTIONS)
    clients: list[Client] = []

    def client() -> Client:
        if not clients:
            clients.append(Client(socket_path=socket_path, root=root, connect_timeout=1.0))
        return clients[0]

    @server.tool()
    def log_event(
        session_id: str,
        action: str,
        stage: str,
        agent: str,
        status: str = "OK",
        role: str | None = None,
        parent_session_id: str | None = None,
        duration_ms: int | None = None,
        error: str | None = None,
        attrs: dict[str, bool | int | float | str] | None = None,
    ) -> dict[str, Any]:
        """Log one stage event into a session and return the collector's verdict.

        stage is READ, PENDING or FINISH; status is OK or FAILED (FAILED needs error). Returns
        {"accepted": true, "seq": n} or {"accepted": false, "reason": ..., "detail": ...}.
        """
        try:
            event = typed_event(
                session_id=session_id,
                action=action,
                stage=stage,
                status=status,
                agent=agent,
                role=role,
                parent_session_id=parent_session_id,
                duration_ms=duration_ms,
                error=error,
                attrs=attrs,
            )
        except (ValueError, TypeError) as exc:
            # The same check `gz-ia session log` makes before sending (a usage error there), named
            # with the collector's own reasons so that callers handle one vocabulary.
            reason = (
                RejectReason.ERROR_REQUIRED if "requires a non-empty error" in str(exc) else RejectReason.INVALID_FIELD
            )
            return {"accepted": False, "session_id": session_id, "reason": str(reason), "detail": str(exc)}
        try:
            verdict = client().send(event, timeout=5.0)
        except EventRejected as exc:
            return {"accepted": False, "session_id": session_id, "reason": str(exc.reason), "detail": exc.detail}
        except CollectorUnavailable as exc:
            raise ToolError(
                f"no gz-ia collector is reachable at {socket_path} ({exc}); start one with `gz-ia-collector` "
                "or `systemctl --user start gz-ia-collector.socket`"
            ) from exc
        return {"accepted": True, "session_id": session_id, "seq": verdict.seq, "duplicate": verdict.duplicate}

    @server.tool()
    def read_session(
        session_id: str, cursor: str | None = None, limit: int = 100, newest_first: bool = False
    ) -> dict[str, Any]:
        """Read one page of a session's stored events; pass next_cursor back to get the next page."""
        try:
            page = _pages.read_page(root, session_id, cursor=cursor, limit=_clamp(limit), reverse=newest_first)
        except _pages.SessionNotFound as exc:
            raise ToolError(str(exc)) from exc
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        return {
            "session_id": session_id,
            "events": [_event_dict(entry.line) for entry in page.entries],
            "next_cursor": page.next_cursor,
            "end": page.end,
            "incomplete": page.incomplete,
            "expired": page.expired,
        }

    @server.tool()
    def events_since(
        cursor: str | None = None, session_ids: list[str] | None = None, limit: int = 100
    ) -> dict[str, Any]:
        """Return events written after cursor (all sessions, or only session_ids), without waiting.

        Start with no cursor (from the beginning), then pass the returned cursor each time: only
        new events come back, none twice. An empty list means nothing new yet.
        """
        limit = _clamp(limit)
        positions = _decode_cursors(cursor) if cursor else {}
        wanted = session_ids if session_ids is not None else _pages.list_session_ids(root)
        merged: list[tuple[str, _pages.Entry]] = []
        more = False
        for session_id in wanted:
            try:
                page = _pages.read_page(root, session_id, cursor=positions.get(session_id), limit=limit)
            except _pages.SessionNotFound:
                continue  # a session asked for that has not started yet: nothing to report
            except ValueError as exc:
                raise ToolError(str(exc)) from exc
            more = more or not page.end
            merged += [(session_id, entry) for entry in page.entries]
        merged.sort(key=lambda item: (item[1].event.timestamp, item[0], item[1].event.seq))
        if len(merged) > limit:
            merged, more = merged[:limit], True
        for session_id, entry in merged:
            positions[session_id] = entry.cursor
        return {
            "events": [_event_dict(entry.line) for _, entry in merged],
            "cursor": _encode_cursors(positions),
            "more": more,
        }

    @server.tool()
    def list_sessions(limit: int = 100) -> dict[str, Any]:
        """List sessions under the root, most recently active first, with agent, parent and counts."""
        limit = _clamp(limit)
        rows: list[dict[str, Any]] = []
        for session_id in _pages.list_session_ids(root):
            try:
                first = _pages.read_page(root, session_id, limit=1).entries
                last = _pages.read_page(root, session_id, limit=1, reverse=True).entries
            except (_pages.SessionNotFound, ValueError):
                continue
            if not first or not last:
                continue
            head, tail = first[0].event, last[0].event
            rows.append(
                {
                    "session_id": session_id,
                    "parent_session_id": head.parent_session_id,
                    "agent": head.agent,
                    "role": head.role,
                    "events": tail.seq,  # seq counts a session's events from 1 without gaps
                    "first_timestamp": head.timestamp.isoformat(),
                    "last_timestamp": tail.timestamp.isoformat(),
                    "last_action": tail.action,
                    "last_stage": tail.stage.value,
                    "last_status": tail.status.value,
                }
            )
        rows.sort(key=lambda row: row["last_timestamp"], reverse=True)
        return {"root": str(root), "sessions": rows[:limit], "total": len(rows)}

    @server.tool()
    def session_summary(session_id: str, include_subagents: bool = True) -> dict[str, Any]:
        """Return a session's subagent tree and summary: counts, failures, open actions, durations."""
        try:
            node = load_tree(root, session_id, tree=include_subagents)
        except _pages.SessionNotFound as exc:
            raise ToolError(str(exc)) from exc
        return {"tree": _tree_dict(node), "summary": summarize(node)}

    def close() -> None:
        for opened in clients:
            opened.close(timeout=1.0)

    return server, close


def serve(*, socket_path: Path, root: Path) -> None:
    """Run the MCP server on standard input and output until the client disconnects."""
    server, close = build_server(socket_path=socket_path, root=root)
    try:
        server.run("stdio")
    finally:
        close()
