"""The gz-ia MCP server: agents log and read sessions through MCP tools (``gz-ia mcp``, stdio).

Tools (every result is a JSON object, given as MCP structured content with a typed output schema;
every parameter is described, stages and statuses are enums):

``log_event``
    Send one event, with the same validation and verdict as ``gz-ia session log``: the collector
    answers ``accepted`` with the event's ``seq``, or a reject ``reason`` and ``detail``.
``read_session``
    One page of a session's stored events, oldest first (or newest first), and the cursor of the
    next page.
``get_event``
    One event, by session id and ``seq``.
``events_since``
    Follow-style and non-blocking: the events written after a cursor, in one session, several,
    or all of them, and the cursor to pass next time. An empty list means nothing new yet.
``failed_events``
    FAILED events across sessions (optionally since a time), oldest first, each with its error.
``list_sessions``
    The sessions under the root, most recently active first, with agent, parent and counts.
``session_summary``
    A session's subagent tree and its summary: counts, failures, open actions, durations.

Every tool but ``log_event`` is annotated read-only; ``log_event`` only ever adds (not destructive)
and is not idempotent (each call logs an event). The server reports the collector's version.

This module needs the ``[mcp]`` extra (the official ``mcp`` SDK, 2.x); the command line checks for
it before importing this module. Reading goes through :mod:`gz_ia.collector.reading`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final, Literal, NotRequired

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, Field, with_config

# pydantic builds output schemas from TypedDicts only from typing_extensions' on Python < 3.12.
from typing_extensions import TypedDict

from gz_ia.client import Client
from gz_ia.client.errors import CollectorUnavailable, EventRejected
from gz_ia.client.schema import Status
from gz_ia.collector import reading
from gz_ia.collector.oneshot.typed_event import TypedEventError, typed_event
from gz_ia.collector.views.timeline import load_tree, summarize

__all__ = ["TOOLS", "build_server", "serve"]

MAX_LIMIT: Final = 1000
INSTRUCTIONS: Final = (
    "gz-ia records what AI agents do as stage events: each task (action) goes READ (exploring) -> "
    "PENDING (editing, running tools) -> FINISH (status OK, or FAILED with an error). Use log_event to "
    "report your own progress in a session, and the read tools to see what agents and subagents did."
)
TOOLS: Final = (
    "log_event",
    "read_session",
    "get_event",
    "events_since",
    "failed_events",
    "list_sessions",
    "session_summary",
)

StageName = Literal["READ", "PENDING", "FINISH"]
StatusName = Literal["OK", "FAILED"]
AttrValue = bool | int | float | str

SessionIdArg = Annotated[str, Field(description="The session's id (letters, digits, '_', '-', '.').")]
SessionIdsArg = Annotated[list[str] | None, Field(description="Only these sessions; none: all of them.")]
LimitArg = Annotated[int, Field(description=f"Most events to return (1 to {MAX_LIMIT}).", ge=1)]

_READ_ONLY: Final = ToolAnnotations(read_only_hint=True, open_world_hint=False)


@with_config(ConfigDict(extra="allow"))
class Event(TypedDict):
    """One stored event, as the collector wrote it (fields newer collectors add are passed through)."""

    timestamp: Annotated[str, Field(description="When the agent logged it (ISO 8601, with offset).")]
    session_id: str
    parent_session_id: NotRequired[Annotated[str, Field(description="The parent session of a subagent.")]]
    action: Annotated[str, Field(description="The task this stage belongs to.")]
    cycle: NotRequired[Annotated[str, Field(description="Which run of the action, when several are open.")]]
    stage: StageName
    status: StatusName
    agent: str
    role: NotRequired[str]
    duration_ms: NotRequired[int]
    error: NotRequired[Annotated[str, Field(description="Why it failed (with status FAILED).")]]
    attrs: NotRequired[dict[str, AttrValue]]
    seq: Annotated[int, Field(description="The event's number in its session, from 1 without gaps.")]


class Verdict(TypedDict):
    """The collector's answer to log_event."""

    accepted: bool
    session_id: str
    seq: NotRequired[Annotated[int, Field(description="The stored event's number (accepted).")]]
    duplicate: NotRequired[Annotated[bool, Field(description="Already stored by an earlier send.")]]
    reason: NotRequired[Annotated[str, Field(description="Why it was rejected: a stable reason code.")]]
    detail: NotRequired[Annotated[str, Field(description="Why it was rejected, for people.")]]


class SessionPage(TypedDict):
    """One page of a session."""

    session_id: str
    events: list[Event]
    next_cursor: Annotated[str | None, Field(description="Pass it back to read the next page.")]
    end: Annotated[bool, Field(description="Nothing more in this direction for now.")]
    incomplete: Annotated[bool, Field(description="Part of the session could not be read.")]
    expired: Annotated[bool, Field(description="Retention deleted what followed the cursor.")]


class OneEvent(TypedDict):
    """A single event."""

    event: Event


class NewEvents(TypedDict):
    """What events_since found."""

    events: list[Event]
    cursor: Annotated[str, Field(description="Pass it back next time: only newer events come back.")]
    more: Annotated[bool, Field(description="More is waiting: call again at once.")]


class FailedEvents(TypedDict):
    """FAILED events across sessions."""

    events: list[Event]
    more: Annotated[bool, Field(description="The limit cut the list: narrow it with since.")]


class SessionRow(TypedDict):
    """One session in list_sessions."""

    session_id: str
    parent_session_id: str | None
    agent: str
    role: str | None
    events: int
    first_timestamp: str
    last_timestamp: str
    last_action: str
    last_stage: StageName
    last_status: StatusName


class SessionList(TypedDict):
    """The sessions under the root."""

    root: str
    sessions: list[SessionRow]
    total: Annotated[int, Field(description="Sessions under the root (the list may be cut by limit).")]


class TreeNode(TypedDict):
    """A session and its subagent sessions."""

    session_id: str
    agent: str
    role: str | None
    events: int
    children: list[TreeNode]


class SessionTree(TypedDict):
    """A session's subagent tree and its summary."""

    tree: TreeNode
    summary: Annotated[dict[str, Any], Field(description="Counts, failures, open actions, durations.")]


def _event_dict(line: str) -> Event:
    value: dict[str, Any] = json.loads(line)
    value.pop("delivery", None)  # the collector's idempotency key: noise for a reader
    return value  # type: ignore[return-value]  # a stored line has Event's fields (and maybe newer ones)


def _session_ids(root: Path) -> list[str]:
    """Every session stored under ``root``, sorted; none when the root cannot be read."""
    try:
        return sorted(summary.session_id for summary in reading.list_sessions(root))
    except (reading.LayoutError, LookupError, OSError):
        return []


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


def _tree_dict(node: Any) -> TreeNode:
    return {
        "session_id": node.session_id,
        "agent": node.agent,
        "role": node.role,
        "events": node.events,
        "children": [_tree_dict(child) for child in node.children],
    }


def build_server(*, socket_path: Path, root: Path, version: str = "") -> tuple[MCPServer[Any], Callable[[], None]]:
    """Build the MCP server whose tools send to ``socket_path`` and read ``root``.

    Returns:
        The server, and a function that closes the client it opened (flushing what it queued).
    """
    server: MCPServer[Any] = MCPServer(name="gz-ia", instructions=INSTRUCTIONS, version=version)
    clients: list[Client] = []

    def client() -> Client:
        if not clients:
            clients.append(Client(socket_path=socket_path, root=root, connect_timeout=1.0))
        return clients[0]

    @server.tool(
        title="Log a stage event",
        annotations=ToolAnnotations(
            title="Log a stage event",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    )
    def log_event(
        session_id: SessionIdArg,
        action: Annotated[str, Field(description="The task, e.g. 'Run the tests'; its stages form one cycle.")],
        stage: Annotated[StageName, Field(description="READ (exploring), PENDING (changing things), FINISH (done).")],
        agent: Annotated[str, Field(description="Who does it, e.g. 'claude'.")],
        status: Annotated[StatusName, Field(description="OK, or FAILED (then error is required).")] = "OK",
        role: Annotated[str | None, Field(description="The agent's role in the session, e.g. 'tester'.")] = None,
        parent_session_id: Annotated[
            str | None, Field(description="For a subagent: the session that started it.")
        ] = None,
        duration_ms: Annotated[int | None, Field(description="How long the stage took, in ms.", ge=0)] = None,
        error: Annotated[str | None, Field(description="Why it failed (required with FAILED).")] = None,
        attrs: Annotated[
            dict[str, AttrValue] | None, Field(description="Up to 32 small measurements, e.g. {'tokens': 812}.")
        ] = None,
    ) -> Verdict:
        """Log one stage event into a session and return the collector's verdict.

        Returns {"accepted": true, "seq": n} or {"accepted": false, "reason": ..., "detail": ...}.
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
        except TypedEventError as exc:
            # The same check `gz-ia session log` makes before sending (a usage error there), named
            # with the collector's own reasons so that callers handle one vocabulary.
            return {"accepted": False, "session_id": session_id, "reason": str(exc.reason), "detail": str(exc)}
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

    @server.tool(title="Read a session", annotations=_READ_ONLY)
    def read_session(
        session_id: SessionIdArg,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page; none: the start.")] = None,
        limit: LimitArg = 100,
        newest_first: Annotated[bool, Field(description="Read from the newest event backwards.")] = False,
    ) -> SessionPage:
        """Read one page of a session's stored events; pass next_cursor back to get the next page."""
        try:
            page = reading.read_page(root, session_id, cursor=cursor, limit=_clamp(limit), reverse=newest_first)
        except reading.SessionNotFound as exc:
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

    @server.tool(title="Get one event", annotations=_READ_ONLY)
    def get_event(
        session_id: SessionIdArg,
        seq: Annotated[int, Field(description="The event's number in its session (from 1).", ge=1)],
    ) -> OneEvent:
        """Return one event of a session by its seq (as read_session and failed_events show it)."""
        try:
            entry = reading.event_at(root, session_id, seq)
        except reading.SessionNotFound as exc:
            raise ToolError(str(exc)) from exc
        if entry is None:
            raise ToolError(f"session {session_id!r} has no event {seq} (not written yet, or deleted by retention)")
        return {"event": _event_dict(entry.line)}

    @server.tool(title="Follow new events", annotations=_READ_ONLY)
    def events_since(
        cursor: Annotated[
            str | None, Field(description="The cursor events_since returned last; none: the start.")
        ] = None,
        session_ids: SessionIdsArg = None,
        limit: LimitArg = 100,
    ) -> NewEvents:
        """Return events written after cursor (all sessions, or only session_ids), without waiting.

        Start with no cursor (from the beginning), then pass the returned cursor each time: only
        new events come back, none twice. An empty list means nothing new yet.
        """
        limit = _clamp(limit)
        positions = _decode_cursors(cursor) if cursor else {}
        wanted = session_ids if session_ids is not None else _session_ids(root)
        merged: list[tuple[str, reading.Entry]] = []
        more = False
        for session_id in wanted:
            try:
                page = reading.read_page(root, session_id, cursor=positions.get(session_id), limit=limit)
            except reading.SessionNotFound:
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

    @server.tool(title="Failed events across sessions", annotations=_READ_ONLY)
    def failed_events(
        since: Annotated[
            datetime | None, Field(description="Only failures at or after this time (ISO 8601 with offset).")
        ] = None,
        session_ids: SessionIdsArg = None,
        limit: LimitArg = 100,
    ) -> FailedEvents:
        """Return FAILED events (each with its error) across sessions, oldest first."""
        limit = _clamp(limit)
        if since is not None and since.tzinfo is None:
            raise ToolError("since needs a UTC offset, e.g. 2026-01-01T00:00:00Z")
        failed = reading.Filters(statuses=frozenset({Status.FAILED}), since=since)
        found: list[reading.Entry] = []
        for session_id in session_ids if session_ids is not None else _session_ids(root):
            try:
                found += reading.iter_events(root, session_id, filters=failed)
            except reading.SessionNotFound:
                continue
        found.sort(key=lambda entry: (entry.event.timestamp, entry.event.session_id, entry.event.seq))
        return {"events": [_event_dict(entry.line) for entry in found[:limit]], "more": len(found) > limit}

    @server.tool(title="List sessions", annotations=_READ_ONLY)
    def list_sessions(
        limit: Annotated[int, Field(description=f"Most sessions to return (1 to {MAX_LIMIT}).", ge=1)] = 100,
    ) -> SessionList:
        """List sessions under the root, most recently active first, with agent, parent and counts."""
        limit = _clamp(limit)
        rows: list[SessionRow] = []
        for session_id in _session_ids(root):
            try:
                first = reading.read_page(root, session_id, limit=1).entries
                last = reading.read_page(root, session_id, limit=1, reverse=True).entries
            except (reading.SessionNotFound, ValueError):
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

    @server.tool(title="Summarise a session tree", annotations=_READ_ONLY)
    def session_summary(
        session_id: SessionIdArg,
        include_subagents: Annotated[bool, Field(description="Include every subagent session below it.")] = True,
    ) -> SessionTree:
        """Return a session's subagent tree and summary: counts, failures, open actions, durations."""
        try:
            node = load_tree(root, session_id, tree=include_subagents)
        except reading.SessionNotFound as exc:
            raise ToolError(str(exc)) from exc
        return {"tree": _tree_dict(node), "summary": summarize(node)}

    def close() -> None:
        for opened in clients:
            opened.close(timeout=1.0)

    return server, close


def serve(*, socket_path: Path, root: Path, version: str = "") -> None:
    """Run the MCP server on standard input and output until the client disconnects."""
    server, close = build_server(socket_path=socket_path, root=root, version=version)
    try:
        server.run("stdio")
    finally:
        close()
