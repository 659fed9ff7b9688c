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
``why_failed``
    The first FAILED cycle of a session's tree (subagents included), the chain of sessions down to
    it, and what the tree did after it (``gz-ia session why``).
``hung_actions``
    The action cycles open longer than a time, across the root or in one session's tree
    (``gz-ia sessions --hung``).

Every tool but ``log_event`` is annotated read-only; ``log_event`` only ever adds (not destructive)
and is not idempotent (each call logs an event). The server reports the collector's version.

This module needs the ``[mcp]`` extra (the official ``mcp`` SDK, 2.x); the command line checks for
it before importing this module. It is an adapter: each tool is a function of this module taking a
:class:`ToolContext` (the root, the socket, the client it opens) and the tool's arguments, registered
from :data:`TABLE`; reading goes through :mod:`gz_ia.collector.reading` (pages, events, the session
list, multi-session cursors) and :mod:`gz_ia.collector.query` (the FAILED search), logging through
:class:`gz_ia.client.Client`.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Annotated, Any, Final, Literal, NamedTuple, NotRequired

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, Field, with_config

# pydantic builds output schemas from TypedDicts only from typing_extensions' on Python < 3.12.
from typing_extensions import TypedDict

from gz_ia.client import Client
from gz_ia.client.errors import CollectorUnavailable, EventRejected, GzIaError
from gz_ia.client.schema import Status
from gz_ia.collector import query, reading
from gz_ia.collector.live.follow import subscribe_or_none
from gz_ia.collector.oneshot.typed_event import TypedEventError, typed_event
from gz_ia.collector.views.answers import DEFAULT_HUNG_AFTER, OpenCycleIndex, hung, last_below, why
from gz_ia.collector.views.timeline import load_tree, summarize

__all__ = ["TABLE", "TOOLS", "Tool", "ToolContext", "build_server", "serve"]

MAX_LIMIT: Final = 1000
INSTRUCTIONS: Final = (
    "gz-ia records what AI agents do as stage events: each task (action) goes READ (exploring) -> "
    "PENDING (editing, running tools) -> FINISH (status OK, or FAILED with an error). Use log_event to "
    "report your own progress in a session, and the read tools to see what agents and subagents did."
)

StageName = Literal["READ", "PENDING", "FINISH"]
StatusName = Literal["OK", "FAILED"]
AttrValue = bool | int | float | str

SessionIdArg = Annotated[str, Field(description="The session's id (letters, digits, '_', '-', '.').")]
SessionIdsArg = Annotated[list[str] | None, Field(description="Only these sessions; none: all of them.")]
LimitArg = Annotated[int, Field(description=f"Most events to return (1 to {MAX_LIMIT}).", ge=1)]

_READ_ONLY: Final = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_LOGS: Final = ToolAnnotations(
    title="Log a stage event",
    read_only_hint=False,
    destructive_hint=False,
    idempotent_hint=False,
    open_world_hint=False,
)


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
    tokens: Annotated[int, Field(description="Tokens of the session's usage records, with its subagents'.")]
    cost_usd: Annotated[float, Field(description="Cost in US dollars, with its subagents'.")]
    model: str | None


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
    summary: Annotated[dict[str, Any], Field(description="Counts, failures, open actions, durations, tokens and cost.")]


class FailureAnswer(TypedDict):
    """What why_failed answers."""

    failed: Annotated[bool, Field(description="Whether any cycle of the tree failed.")]
    first_failure: NotRequired[
        Annotated[
            dict[str, Any], Field(description="session_id, action, error and timestamp of the first FAILED FINISH.")
        ]
    ]
    chain: NotRequired[Annotated[list[str], Field(description="The session ids from the top down to the failing one.")]]
    after: NotRequired[
        Annotated[
            dict[str, Any],
            Field(description="actions started after it, duration_ms to the tree's last event, tokens and cost_usd."),
        ]
    ]
    message: NotRequired[Annotated[str, Field(description="Why there is no failure to show.")]]


class HungSession(TypedDict):
    """A session with cycles open longer than asked."""

    session_id: str
    agent: str
    parent_session_id: str | None
    hung: Annotated[list[dict[str, Any]], Field(description="Each open cycle: action, stage, open_for_s.")]


class HungList(TypedDict):
    """What hung_actions answers."""

    after_seconds: float
    sessions: list[HungSession]


class ToolContext:
    """What the tools share: the root they read, the socket ``log_event`` sends to, and its one client."""

    def __init__(self, *, socket_path: Path, root: Path) -> None:
        self.socket_path = socket_path
        self.root = root
        self._client: Client | None = None

    def client(self) -> Client:
        """The client ``log_event`` sends with, opened on first use."""
        if self._client is None:
            self._client = Client(socket_path=self.socket_path, root=self.root, connect_timeout=1.0)
        return self._client

    def close(self) -> None:
        """Close the client, if one was opened (flushing what it queued)."""
        if self._client is not None:
            self._client.close(timeout=1.0)


def _event_dict(line: str) -> Event:
    value: dict[str, Any] = json.loads(line)
    value.pop("delivery", None)  # the collector's idempotency key: noise for a reader
    return value  # type: ignore[return-value]  # a stored line has Event's fields (and maybe newer ones)


def _clamp(limit: int) -> int:
    if limit < 1:
        raise ToolError("limit must be at least 1")
    return min(limit, MAX_LIMIT)


def _sessions(root: Path) -> list[reading.SessionSummary]:
    """The reader's session list (none for a missing root)."""
    try:
        return reading.list_sessions(root)
    except reading.LayoutError as exc:
        raise ToolError(str(exc)) from exc


def _tree_dict(node: Any) -> TreeNode:
    return {
        "session_id": node.session_id,
        "agent": node.agent,
        "role": node.role,
        "events": node.events,
        "children": [_tree_dict(child) for child in node.children],
    }


def log_event(
    context: ToolContext,
    session_id: SessionIdArg,
    action: Annotated[str, Field(description="The task, e.g. 'Run the tests'; its stages form one cycle.")],
    stage: Annotated[StageName, Field(description="READ (exploring), PENDING (changing things), FINISH (done).")],
    agent: Annotated[str, Field(description="Who does it, e.g. 'claude'.")],
    status: Annotated[StatusName, Field(description="OK, or FAILED (then error is required).")] = "OK",
    role: Annotated[str | None, Field(description="The agent's role in the session, e.g. 'tester'.")] = None,
    parent_session_id: Annotated[str | None, Field(description="For a subagent: the session that started it.")] = None,
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
        verdict = context.client().send(event, timeout=5.0)
    except EventRejected as exc:
        return {"accepted": False, "session_id": session_id, "reason": str(exc.reason), "detail": exc.detail}
    except CollectorUnavailable as exc:
        raise ToolError(
            f"no gz-ia collector is reachable at {context.socket_path} ({exc}); start one with `gz-ia-collector` "
            "or `systemctl --user start gz-ia-collector.socket`"
        ) from exc
    return {"accepted": True, "session_id": session_id, "seq": verdict.seq, "duplicate": verdict.duplicate}


def read_session(
    context: ToolContext,
    session_id: SessionIdArg,
    cursor: Annotated[str | None, Field(description="next_cursor of the previous page; none: the start.")] = None,
    limit: LimitArg = 100,
    newest_first: Annotated[bool, Field(description="Read from the newest event backwards.")] = False,
) -> SessionPage:
    """Read one page of a session's stored events; pass next_cursor back to get the next page."""
    try:
        page = reading.read_page(context.root, session_id, cursor=cursor, limit=_clamp(limit), reverse=newest_first)
    except (reading.SessionNotFound, ValueError) as exc:  # ValueError: a cursor of another session or root
        raise ToolError(str(exc)) from exc
    return {
        "session_id": session_id,
        "events": [_event_dict(entry.line) for entry in page.entries],
        "next_cursor": page.next_cursor,
        "end": page.end,
        "incomplete": page.incomplete,
        "expired": page.expired,
    }


def get_event(
    context: ToolContext,
    session_id: SessionIdArg,
    seq: Annotated[int, Field(description="The event's number in its session (from 1).", ge=1)],
) -> OneEvent:
    """Return one event of a session by its seq (as read_session and failed_events show it)."""
    try:
        entry = reading.event_at(context.root, session_id, seq)
    except reading.SessionNotFound as exc:
        raise ToolError(str(exc)) from exc
    if entry is None:
        raise ToolError(f"session {session_id!r} has no event {seq} (not written yet, or deleted by retention)")
    return {"event": _event_dict(entry.line)}


def events_since(
    context: ToolContext,
    cursor: Annotated[str | None, Field(description="The cursor events_since returned last; none: the start.")] = None,
    session_ids: SessionIdsArg = None,
    limit: LimitArg = 100,
    wait_seconds: Annotated[
        float, Field(description="If nothing is new, wait up to this long (at most 30 s) for the next event.", ge=0)
    ] = 0,
) -> NewEvents:
    """Return events written after cursor (all sessions, or only session_ids).

    Start with no cursor (from the beginning), then pass the returned cursor each time: only
    new events come back, none twice. An empty list means nothing new yet (within wait_seconds).
    """
    found = _new_events(context, cursor, session_ids, limit)
    wait = min(max(wait_seconds, 0.0), _MAX_WAIT)
    if found["events"] or wait <= 0:
        return found
    deadline = time.monotonic() + wait
    # Subscribed before the files are read again, so an event written in between still wakes us;
    # what is returned always comes from the files, as without a collector.
    live = subscribe_or_none(context.root, context.socket_path, sessions=session_ids)
    try:
        while True:
            found = _new_events(context, cursor, session_ids, limit)
            remaining = deadline - time.monotonic()
            if found["events"] or remaining <= 0:
                return found
            if live is None:
                time.sleep(min(_POLL, remaining))
                continue
            live.settimeout(remaining)
            try:
                live.receive()
            except TimeoutError:
                continue
            except GzIaError:
                live.close()
                live = None
    finally:
        if live is not None:
            live.close()


def _new_events(context: ToolContext, cursor: str | None, session_ids: list[str] | None, limit: int) -> NewEvents:
    """The events after ``cursor`` in the files (see :func:`events_since`)."""
    limit = _clamp(limit)
    try:  # the reader's multi-session cursor (reading.combine_cursors): one boundary per session
        known = set(reading.cursor_sessions(cursor)) if cursor else set()
    except reading.InvalidCursor as exc:
        raise ToolError(str(exc)) from exc
    root = context.root
    wanted = session_ids if session_ids is not None else [summary.session_id for summary in _sessions(root)]
    merged: list[reading.Entry] = []
    more = False
    for session_id in wanted:
        try:
            page = reading.read_page(root, session_id, cursor=cursor if session_id in known else None, limit=limit)
        except reading.SessionNotFound:
            continue  # a session asked for that has not started yet: nothing to report
        except ValueError as exc:  # the cursor was made on another root
            raise ToolError(str(exc)) from exc
        more = more or not page.end
        merged += page.entries
    merged.sort(key=lambda entry: (entry.event.timestamp, entry.session_id, entry.event.seq))
    if len(merged) > limit:
        merged, more = merged[:limit], True
    latest = {entry.session_id: entry.cursor for entry in merged}
    try:
        combined = reading.combine_cursors([*([cursor] if cursor else []), *latest.values()])
    except reading.InvalidCursor as exc:
        raise ToolError(str(exc)) from exc
    return {"events": [_event_dict(entry.line) for entry in merged], "cursor": combined, "more": more}


def failed_events(
    context: ToolContext,
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
    if session_ids == []:
        return {"events": [], "more": False}
    failed = reading.Filters(statuses=frozenset({Status.FAILED}), since=since)
    selection = query.Selection(
        matches=query.parse_matches(f"session_id={session_id}" for session_id in session_ids or ())
    )
    try:
        found = list(islice(query.search(context.root, failed, selection), limit + 1))
    except reading.LayoutError as exc:
        raise ToolError(str(exc)) from exc
    return {"events": [_event_dict(entry.line) for entry in found[:limit]], "more": len(found) > limit}


def list_sessions(
    context: ToolContext,
    limit: Annotated[int, Field(description=f"Most sessions to return (1 to {MAX_LIMIT}).", ge=1)] = 100,
) -> SessionList:
    """List sessions under the root, most recently active first, with agent, parent and counts."""
    root = context.root
    summaries = _sessions(root)
    rolled = reading.tree_usage(summaries)
    recent = query.select_sessions(summaries, query.SessionQuery(limit=_clamp(limit)), role_of=lambda _: None)
    rows: list[SessionRow] = []
    for summary in reversed(recent):  # select_sessions puts the most recently active last
        try:
            first = reading.read_page(root, summary.session_id, limit=1).entries
            last = reading.read_page(root, summary.session_id, limit=1, reverse=True).entries
        except (reading.SessionNotFound, ValueError):
            continue  # removed since the listing
        if not first or not last:
            continue
        head, tail = first[0].event, last[0].event
        rows.append(
            {
                "session_id": summary.session_id,
                "parent_session_id": summary.parent_session_id,
                "agent": summary.agent,
                "role": head.role,
                "events": summary.events,
                "first_timestamp": (summary.first_time or head.timestamp).isoformat(),
                "last_timestamp": (summary.last_time or tail.timestamp).isoformat(),
                "last_action": tail.action,
                "last_stage": tail.stage.value,
                "last_status": tail.status.value,
                "tokens": sum(rolled.get(summary.session_id, (summary.tokens, 0.0))[0]),
                "cost_usd": rolled.get(summary.session_id, (summary.tokens, summary.cost_usd))[1],
                "model": summary.model or None,
            }
        )
    return {"root": str(root), "sessions": rows, "total": len(summaries)}


def session_summary(
    context: ToolContext,
    session_id: SessionIdArg,
    include_subagents: Annotated[bool, Field(description="Include every subagent session below it.")] = True,
) -> SessionTree:
    """Return a session's subagent tree and summary: counts, failures, open actions, durations."""
    try:
        node = load_tree(context.root, session_id, tree=include_subagents)
    except reading.SessionNotFound as exc:
        raise ToolError(str(exc)) from exc
    return {"tree": _tree_dict(node), "summary": summarize(node)}


def why_failed(context: ToolContext, session_id: SessionIdArg) -> FailureAnswer:
    """Return the first FAILED cycle in a session's tree, subagents included, in time order: where it
    failed (the chain of session ids down to it), its error, and what the tree did after it (actions,
    wall time, tokens, cost). Use it on your own session to see which subagent failed first."""
    try:
        answer = why(context.root, session_id)
    except reading.SessionNotFound as exc:
        raise ToolError(str(exc)) from exc
    if answer is None:
        return {"failed": False, "message": f"no cycle of session {session_id} or its subagents failed"}
    found = answer.as_json()
    return {"failed": True, "first_failure": found["first_failure"], "chain": found["chain"], "after": found["after"]}


def hung_actions(
    context: ToolContext,
    session_id: Annotated[
        str | None, Field(description="Only this session and its subagents; none: every session of the root.")
    ] = None,
    after_seconds: Annotated[
        float, Field(description="How long a cycle must have been open (READ or PENDING without FINISH).", ge=0)
    ] = DEFAULT_HUNG_AFTER,
) -> HungList:
    """Return the sessions with an action cycle open longer than after_seconds, each with the open
    action, its stage and how long it has been open: a tool call that never returned, a subagent
    that stopped answering."""
    try:
        summaries = reading.list_sessions(context.root)
        busy = last_below(summaries)
        if session_id is not None:
            tree = reading.session_tree(context.root, session_id)
            family = {node.session_id for _, node in tree.walk()}
            summaries = [summary for summary in summaries if summary.session_id in family]
    except (reading.SessionNotFound, reading.LayoutError) as exc:
        raise ToolError(str(exc)) from exc
    now = datetime.now(UTC)
    found = OpenCycleIndex().cycles(context.root, summaries)
    rows: list[HungSession] = []
    for summary in summaries:
        stuck = hung(found.get(summary.session_id, ()), now, after_seconds, busy)
        if stuck:
            rows.append(
                {
                    "session_id": summary.session_id,
                    "agent": summary.agent,
                    "parent_session_id": summary.parent_session_id,
                    "hung": [cycle.as_json(now) for cycle in stuck],
                }
            )
    return {"after_seconds": after_seconds, "sessions": rows}


class Tool(NamedTuple):
    """One row of :data:`TABLE`: a tool's name, its function (the docstring is its description), title, hints."""

    name: str
    function: Callable[..., Any]
    title: str
    annotations: ToolAnnotations

    @property
    def description(self) -> str:
        """The function's docstring, as agents read it."""
        return inspect.cleandoc(self.function.__doc__ or "")


_MAX_WAIT: Final = 30.0
"""The longest events_since waits for a new event."""
_POLL: Final = 0.02
"""Seconds between looks at the files while events_since waits without a collector's stream."""


TABLE: Final = (
    Tool("log_event", log_event, "Log a stage event", _LOGS),
    Tool("read_session", read_session, "Read a session", _READ_ONLY),
    Tool("get_event", get_event, "Get one event", _READ_ONLY),
    Tool("events_since", events_since, "Follow new events", _READ_ONLY),
    Tool("failed_events", failed_events, "Failed events across sessions", _READ_ONLY),
    Tool("list_sessions", list_sessions, "List sessions", _READ_ONLY),
    Tool("session_summary", session_summary, "Summarise a session tree", _READ_ONLY),
    Tool("why_failed", why_failed, "First failure of a session tree", _READ_ONLY),
    Tool("hung_actions", hung_actions, "Actions open too long", _READ_ONLY),
)
"""Every tool the server offers; each function takes the :class:`ToolContext` first, then its arguments."""
TOOLS: Final = tuple(tool.name for tool in TABLE)


def build_server(*, socket_path: Path, root: Path, version: str = "") -> tuple[MCPServer[Any], Callable[[], None]]:
    """Build the MCP server whose tools send to ``socket_path`` and read ``root``: :data:`TABLE`, registered.

    Returns:
        The server, and a function that closes the client it opened (flushing what it queued).
    """
    server: MCPServer[Any] = MCPServer(name="gz-ia", instructions=INSTRUCTIONS, version=version)
    context = ToolContext(socket_path=socket_path, root=root)
    for tool in TABLE:
        # A partial without __wrapped__: the SDK reads the signature less the context, and its name.
        bound = functools.partial(tool.function, context)
        bound.__name__ = tool.name  # type: ignore[attr-defined]
        server.add_tool(
            bound, name=tool.name, title=tool.title, description=tool.description, annotations=tool.annotations
        )
    return server, context.close


def serve(*, socket_path: Path, root: Path, version: str = "") -> None:
    """Run the MCP server on standard input and output until the client disconnects."""
    server, close = build_server(socket_path=socket_path, root=root, version=version)
    try:
        server.run("stdio")
    finally:
        close()
