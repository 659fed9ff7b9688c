"""What a session tree looks like over time: actions with their stages, and a summary of them.

:func:`load_tree` rebuilds a session and, optionally, its subagents (the reader's session tree) from
the stored files. Each action cycle becomes an :class:`ActionSpan` with its stages as segments:
READ until PENDING, PENDING until FINISH, and the FINISH status. The same model feeds
``gz-ia session view`` (:func:`gz_ia.collector.timeline_html.render_html`) and the MCP summary tool
(:func:`summarize`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gz_ia.client.schema import Stage, Status, StoredEvent

from . import reading

__all__ = [
    "ActionSpan",
    "SessionNode",
    "build_session",
    "load_tree",
    "summarize",
]


@dataclass(slots=True)
class ActionSpan:
    """One READ → PENDING → FINISH cycle of one action (still open if ``status`` is None)."""

    action: str
    role: str | None
    start: datetime
    end: datetime
    read_at: datetime | None = None
    pending_at: datetime | None = None
    finished_at: datetime | None = None
    status: Status | None = None
    error: str | None = None
    duration_ms: int | None = None
    first_seq: int = 0
    last_seq: int = 0

    @property
    def is_open(self) -> bool:
        """True while no FINISH closed the cycle."""
        return self.status is None

    @property
    def elapsed_ms(self) -> int:
        """The reported duration, else the time between the first and last event."""
        if self.duration_ms is not None:
            return self.duration_ms
        return max(0, int((self.end - self.start).total_seconds() * 1000))


@dataclass(slots=True)
class SessionNode:
    """One session: who ran it, its action cycles, its subagent sessions."""

    session_id: str
    parent_session_id: str | None = None
    agent: str = ""
    role: str | None = None
    events: int = 0
    stages: dict[str, int] = field(default_factory=dict)
    actions: list[ActionSpan] = field(default_factory=list)
    children: list[SessionNode] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None
    last_seq: int = 0

    def walk(self, depth: int = 0) -> Iterable[tuple[int, SessionNode]]:
        """Yield ``(depth, node)`` for this node and its descendants, depth first."""
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)


def build_session(session_id: str, events: Iterable[StoredEvent]) -> SessionNode:
    """Fold a session's events (in ``seq`` order) into a :class:`SessionNode` without children."""
    node = SessionNode(session_id)
    # Keyed like the stage protocol: runs of one action that name their cycle are separate spans.
    open_spans: dict[str | tuple[str, str], ActionSpan] = {}
    for event in events:
        node.events += 1
        node.last_seq = max(node.last_seq, event.seq)
        node.stages[event.stage.value] = node.stages.get(event.stage.value, 0) + 1
        if node.events == 1:
            node.parent_session_id = event.parent_session_id
            node.agent = event.agent
            node.role = event.role
        stamp = event.timestamp
        node.first = stamp if node.first is None else min(node.first, stamp)
        node.last = stamp if node.last is None else max(node.last, stamp)
        key = event.action if event.cycle is None else (event.action, event.cycle)
        span = open_spans.get(key)
        if span is None:
            span = ActionSpan(event.action, event.role, start=stamp, end=stamp, first_seq=event.seq)
            node.actions.append(span)
            if event.stage is not Stage.FINISH:
                open_spans[key] = span
        span.end = max(span.end, stamp)
        span.last_seq = event.seq
        if event.stage is Stage.READ and span.read_at is None:
            span.read_at = stamp
        elif event.stage is Stage.PENDING and span.pending_at is None:
            span.pending_at = stamp
        elif event.stage is Stage.FINISH:
            span.finished_at = stamp
            span.status = event.status
            span.error = event.error
            span.duration_ms = event.duration_ms
            if event.duration_ms is not None:
                # The reported duration is measured by the agent; make the bar at least that long.
                span.start = min(span.start, stamp - timedelta(milliseconds=event.duration_ms))
            open_spans.pop(key, None)
        if event.status is Status.FAILED and event.stage is not Stage.FINISH:
            span.error = event.error
    return node


def _load_one(root: Path, session_id: str) -> SessionNode:
    return build_session(session_id, (entry.event for entry in reading.iter_events(root, session_id)))


def load_tree(root: Path, session_id: str, *, tree: bool = True) -> SessionNode:
    """Load ``session_id`` and, with ``tree``, every subagent session below it.

    The tree is the reader's (:func:`gz_ia.collector.reading.session_tree`), the one
    ``gz-ia session tree`` and ``--tree`` show: a session known only as a parent is its top.

    Raises:
        SessionNotFound: the session has no file under ``root`` (and, with ``tree``, is nobody's parent).
    """
    if not tree:
        return _load_one(root, session_id)
    top = reading.session_tree(root, session_id)

    def load(item: Any) -> SessionNode:  # as deep as the reader's tree: at most MAX_TREE_DEPTH
        try:
            node = _load_one(root, item.session_id)
        except reading.SessionNotFound:
            node = build_session(item.session_id, ())  # known only as a parent
        node.children = [load(child) for child in item.children]
        return node

    return load(top)


def summarize(node: SessionNode) -> dict[str, Any]:
    """Return counts, failures, open actions and durations of a session tree, as JSON-ready data."""
    sessions: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    open_actions: list[dict[str, Any]] = []
    totals = {"events": 0, "actions": 0, "finished_ok": 0, "failed": 0, "open": 0}
    for depth, current in node.walk():
        ok = sum(1 for span in current.actions if span.status is Status.OK)
        failed = [span for span in current.actions if span.status is Status.FAILED]
        still_open = [span for span in current.actions if span.is_open]
        totals["events"] += current.events
        totals["actions"] += len(current.actions)
        totals["finished_ok"] += ok
        totals["failed"] += len(failed)
        totals["open"] += len(still_open)
        wall = int((current.last - current.first).total_seconds() * 1000) if current.first and current.last else 0
        finished = [span for span in current.actions if not span.is_open]
        sessions.append(
            {
                "session_id": current.session_id,
                "parent_session_id": current.parent_session_id,
                "depth": depth,
                "agent": current.agent,
                "role": current.role,
                "events": current.events,
                "stages": dict(current.stages),
                "actions": len(current.actions),
                "finished_ok": ok,
                "failed": len(failed),
                "open": len(still_open),
                "first_timestamp": current.first.isoformat() if current.first else None,
                "last_timestamp": current.last.isoformat() if current.last else None,
                "wall_ms": wall,
                "action_ms_total": sum(span.elapsed_ms for span in finished),
                "last_seq": current.last_seq,
            }
        )
        failures += [
            {
                "session_id": current.session_id,
                "action": span.action,
                "error": span.error,
                "duration_ms": span.elapsed_ms,
                "seq": span.last_seq,
            }
            for span in failed
        ]
        open_actions += [
            {
                "session_id": current.session_id,
                "action": span.action,
                "stage": "PENDING" if span.pending_at else "READ",
                "since": span.start.isoformat(),
            }
            for span in still_open
        ]
    longest = sorted(
        ((current.session_id, span) for _, current in node.walk() for span in current.actions if not span.is_open),
        key=lambda item: item[1].elapsed_ms,
        reverse=True,
    )[:5]
    return {
        "session_id": node.session_id,
        "totals": totals,
        "sessions": sessions,
        "failures": failures,
        "open_actions": open_actions,
        "longest_actions": [
            {"session_id": session_id, "action": span.action, "duration_ms": span.elapsed_ms}
            for session_id, span in longest
        ],
    }
