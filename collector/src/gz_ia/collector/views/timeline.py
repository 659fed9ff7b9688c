"""A session tree's summary: counts, failures, open actions, durations and usage, as JSON.

The model it reads is the one fold of a session (:mod:`gz_ia.collector.reading.cycles`), re-exported
here for the views that draw it (``gz-ia session view``, :func:`gz_ia.collector.views.html.render_html`).
"""

from __future__ import annotations

from typing import Any

from gz_ia.client.schema import Status
from gz_ia.client.usage import TOKEN_KINDS
from gz_ia.collector.reading.cycles import (
    ActionSpan,
    ActionTotals,
    LeftOut,
    SessionNode,
    TimelineBuilder,
    build_session,
    load_tree,
)

__all__ = [
    "ActionSpan",
    "ActionTotals",
    "LeftOut",
    "SessionNode",
    "TimelineBuilder",
    "build_session",
    "load_tree",
    "summarize",
]


def summarize(node: SessionNode) -> dict[str, Any]:
    """Return counts, failures, open actions and durations of a session tree, as JSON-ready data."""
    sessions: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    open_actions: list[dict[str, Any]] = []
    totals: dict[str, Any] = {"events": 0, "actions": 0, "finished_ok": 0, "failed": 0, "open": 0}
    tree_tokens = [0, 0, 0, 0]
    tree_cost = 0.0
    for depth, current in node.walk():
        ok = sum(1 for span in current.actions if span.status is Status.OK)
        failed = [span for span in current.actions if span.status is Status.FAILED]
        still_open = [span for span in current.actions if span.is_open]
        totals["events"] += current.events
        totals["actions"] += len(current.actions)
        totals["finished_ok"] += ok
        totals["failed"] += len(failed)
        totals["open"] += len(still_open)
        for index, count in enumerate(current.tokens):
            tree_tokens[index] += count
        tree_cost += current.cost_usd
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
                "tokens": {**dict(zip(TOKEN_KINDS, current.tokens, strict=True)), "total": sum(current.tokens)},
                "cost_usd": current.cost_usd,
                "model": current.model or None,
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
    totals["tokens"] = {**dict(zip(TOKEN_KINDS, tree_tokens, strict=True)), "total": sum(tree_tokens)}
    totals["cost_usd"] = tree_cost
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
