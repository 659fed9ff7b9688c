"""The answers a session tree gives beyond its records: is it stuck, why did it fail and what came
after, how do two runs differ.

Every answer is read off the one fold of a session (:class:`.timeline.TimelineBuilder`, through
:func:`.timeline.load_tree`): ``gz-ia sessions --hung``, ``gz-ia session why``, ``gz-ia session diff``,
the collector's open-cycle gauges, the MCP tools and the page all call this module, so that they
cannot disagree on what a cycle, a failure or a token is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Final

from gz_ia.client.schema import Status
from gz_ia.collector import reading
from gz_ia.collector.reading import SessionSummary
from gz_ia.collector.reading.after import after_moment, counts_of_spans
from gz_ia.collector.reading.segments import open_dirs

from .timeline import ActionSpan, SessionNode, load_tree

__all__ = [
    "DEFAULT_HUNG_AFTER",
    "MAX_ALIGNED",
    "After",
    "Failure",
    "OpenCycle",
    "OpenCycleIndex",
    "SessionDiff",
    "Totals",
    "Why",
    "diff_sessions",
    "hung",
    "last_below",
    "open_cycles",
    "waiting_cycles",
    "why",
    "why_of",
]

DEFAULT_HUNG_AFTER: Final = 300.0
"""Seconds a cycle stays open before it counts as hung, unless the caller says otherwise."""


def _iso(stamp: datetime) -> str:
    return stamp.isoformat().replace("+00:00", "Z")


def _begun(span: ActionSpan) -> datetime:
    return span.begun


# --- is it stuck -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenCycle:
    """A cycle with no FINISH: the stage it waits in, and since when (its first event)."""

    session_id: str
    agent: str
    action: str
    stage: str
    since: datetime

    def open_for_s(self, now: datetime) -> float:
        """Seconds it has been open at ``now``."""
        return max(0.0, (now - self.since).total_seconds())

    def as_json(self, now: datetime) -> dict[str, Any]:
        """``{action, stage, open_for_s}``, as ``gz-ia sessions --hung --json`` prints it."""
        return {"action": self.action, "stage": self.stage, "open_for_s": round(self.open_for_s(now), 3)}


def open_cycles(node: SessionNode) -> list[OpenCycle]:
    """The open cycles of a folded session tree where each session's activity stopped, the oldest first.

    A cycle inside which later cycles of its session began is a container (an agent's session, a
    turn waiting while its tool calls run and return): it is open as long as the agent works and
    says nothing about being stuck. Only the open cycles that no cycle of their session began after
    are kept; several when they began together.
    """
    found = []
    for _, current in node.walk():
        latest = max((_begun(span) for span in current.actions), default=None)
        found += [
            OpenCycle(current.session_id, current.agent, span.action, "PENDING" if span.pending_at else "READ", begun)
            for span in current.actions
            if span.is_open and (begun := _begun(span)) == latest
        ]
    found.sort(key=lambda cycle: cycle.since)
    return found


def hung(
    cycles: Iterable[OpenCycle], now: datetime, after: float, busy_below: Mapping[str, datetime] | None = None
) -> list[OpenCycle]:
    """The cycles open at least ``after`` seconds at ``now`` whose subagents have been quiet as long.

    ``busy_below``: by session, the last event of any session below it (:func:`last_below`); a
    session waiting on a subagent that still logs is not stuck, the subagent is where to look.
    """
    quiet_since = now.timestamp() - after
    kept = []
    for cycle in cycles:
        if cycle.open_for_s(now) < after:
            continue
        below = busy_below.get(cycle.session_id) if busy_below is not None else None
        if below is not None and below.timestamp() > quiet_since:
            continue
        kept.append(cycle)
    return kept


def last_below(summaries: Iterable[SessionSummary]) -> dict[str, datetime]:
    """For each session with subagents, the time of the newest last event of any session below it."""
    parents: dict[str, str] = {}
    lasts: list[tuple[str, datetime]] = []
    for summary in summaries:
        if summary.parent_session_id:
            parents[summary.session_id] = summary.parent_session_id
        if summary.last_time is not None:
            lasts.append((summary.session_id, summary.last_time))
    found: dict[str, datetime] = {}
    for session_id, last in lasts:
        above = parents.get(session_id)
        seen = {session_id}
        while above is not None and above not in seen and len(seen) <= reading.MAX_TREE_DEPTH:
            seen.add(above)
            if above not in found or found[above] < last:
                found[above] = last
            above = parents.get(above)
    return found


def waiting_cycles(summary: SessionSummary) -> tuple[OpenCycle, ...] | None:
    """:func:`open_cycles` of one session read off its tally (its checkpoint, or the collector's
    memory) instead of its file; None when the tally does not say (an earlier gz-ia's checkpoint)."""
    if summary.waiting is None:
        return None
    found = [
        OpenCycle(summary.session_id, summary.agent, action, stage, since) for action, stage, since in summary.waiting
    ]
    found.sort(key=lambda cycle: cycle.since)
    return tuple(found)


class OpenCycleIndex:
    """The open cycles of a root's sessions, a session folded again only when it has more events.

    The caller passes the listing's summaries; only those whose tally has open cycles count, and
    their tally says where each waits (:func:`waiting_cycles`); a session whose tally does not is
    read, and folded again only when it has more events, so that asking often (every scrape) costs
    the sessions that changed, not the root.
    """

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], tuple[int, tuple[OpenCycle, ...]]] = {}

    def cycles(self, root: Path, summaries: Iterable[SessionSummary]) -> dict[str, tuple[OpenCycle, ...]]:
        """Return the open cycles of each of ``summaries`` that has any."""
        place = str(root)
        kept: dict[tuple[str, str], tuple[int, tuple[OpenCycle, ...]]] = {}
        found: dict[str, tuple[OpenCycle, ...]] = {}
        for summary in summaries:
            if not summary.open_actions:
                continue
            session_id, events = summary.session_id, summary.events
            tallied = waiting_cycles(summary)
            if tallied is not None:
                if tallied:
                    found[session_id] = tallied
                continue
            key = (place, session_id)
            cached = self._known.get(key)
            if cached is not None and cached[0] == events:
                cycles = cached[1]
            else:
                try:
                    cycles = tuple(open_cycles(load_tree(root, session_id, tree=False)))
                except reading.SessionNotFound:
                    continue  # removed since it was listed
            kept[key] = (events, cycles)
            if cycles:
                found[session_id] = cycles
        others = {key: value for key, value in self._known.items() if key[0] != place}
        self._known = others | kept
        return found


# --- why did it fail, and what came after --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Failure:
    """The first FAILED cycle of a tree: where, what, and when its FINISH was stamped."""

    session_id: str
    action: str
    error: str | None
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class After:
    """What the tree did after its first failure."""

    actions: int
    """Cycles whose first event came after the failing FINISH."""
    duration_ms: int
    """From the failing FINISH to the tree's last event."""
    tokens: int
    """Tokens (every kind) of the cycles whose usage was recorded after it (at their last usage record)."""
    cost_usd: float


@dataclass(frozen=True, slots=True)
class Why:
    """The answer of ``gz-ia session why``."""

    first_failure: Failure
    chain: tuple[str, ...]
    """The session ids from the tree's top down to the failing session."""
    after: After

    def as_json(self) -> dict[str, Any]:
        """The JSON of ``gz-ia session why --json``."""
        failure = self.first_failure
        return {
            "first_failure": {
                "session_id": failure.session_id,
                "action": failure.action,
                "error": failure.error,
                "timestamp": _iso(failure.timestamp),
            },
            "chain": list(self.chain),
            "after": {
                "actions": self.after.actions,
                "duration_ms": self.after.duration_ms,
                "tokens": self.after.tokens,
                "cost_usd": round(self.after.cost_usd, 6),
            },
        }


def why(root: Path, session_id: str) -> Why | None:
    """The first failure of ``session_id``'s tree and what came after it; None when nothing failed.

    Reads what the answer needs off the sessions' tallies (:attr:`reading.SessionSummary.history`):
    the first failure is the earliest each tally with a FAILED event records, and what a session
    did after it is its totals less what its quiet points count before it, with only the stretch
    around the failure read again (:func:`reading.after.after_moment`). A session whose tally does
    not say (an earlier gz-ia's checkpoint, two failures at one time) is folded whole, as every
    session was before. A session that ended before the failure adds nothing.

    Raises:
        SessionNotFound: nothing stored for the session.
    """
    top = reading.session_tree(root, session_id, history=True)
    items = [item for _, item in top.walk()]
    folded: dict[str, SessionNode] = {}

    def fold(session: str) -> SessionNode:
        try:
            node = load_tree(root, session, tree=False)
        except reading.SessionNotFound:
            node = SessionNode(session)  # known only as a parent, or removed since
        folded[session] = node
        return node

    first: tuple[datetime, int, str, str, str | None] | None = None
    for order, item in enumerate(items):
        summary = item.summary
        if not (summary.failures or summary.incomplete):
            continue
        history = None if summary.incomplete else summary.history
        if history is not None and (history.first_failed is None or not history.first_failed.tied):
            known = history.first_failed
            found = None if known is None else (known.at, order, item.session_id, known.action, known.error)
        else:
            spans = [
                span
                for span in fold(item.session_id).actions
                if span.status is Status.FAILED and span.finished_at is not None
            ]
            earliest = min(spans, key=lambda span: span.finished_at or span.start, default=None)
            found = None
            if earliest is not None and earliest.finished_at is not None:
                found = (earliest.finished_at, order, item.session_id, earliest.action, earliest.error)
        if found is not None and (first is None or found[:2] < first[:2]):
            first = found
    if first is None:
        return None
    stamp, _, failed_session, failed_action, failed_error = first
    actions = tokens = 0
    cost = 0.0
    last: datetime | None = None
    dirs = None
    try:
        for item in items:
            summary = item.summary
            node = folded.get(item.session_id)
            ended = summary.last_time is None or summary.last_time <= stamp
            if node is None and ended and not (summary.failures or summary.incomplete):
                continue  # ended before the failure
            counts = None
            newest: datetime | None = None
            if node is None and summary.history is not None:
                if dirs is None:
                    dirs = open_dirs(root)
                counts = after_moment(dirs, summary, stamp)
                newest = summary.history.newest
            if counts is None:
                node = node if node is not None else fold(item.session_id)
                counts = counts_of_spans(node.actions, stamp, hooks_count=node.usage.from_hooks)
                newest = node.last
            actions += counts.actions
            tokens += counts.tokens
            cost += counts.cost_usd
            if newest is not None and (last is None or newest > last):
                last = newest
    finally:
        if dirs is not None:
            dirs.close()
    wall = max(0, int(((last or stamp) - stamp).total_seconds() * 1000))
    return Why(
        Failure(failed_session, failed_action, failed_error, stamp),
        _chain(top, failed_session),
        After(actions, wall, tokens, cost),
    )


def _chain(top: reading.TreeNode, session_id: str) -> tuple[str, ...]:
    """The session ids from ``top`` down to ``session_id``, as :func:`why_of` walks them up."""
    parent_of: dict[str, str] = {}
    for _, item in top.walk():
        for child in item.children:
            parent_of.setdefault(child.session_id, item.session_id)
    chain = [session_id]
    while chain[-1] != top.session_id and chain[-1] in parent_of and len(chain) <= len(parent_of):
        chain.append(parent_of[chain[-1]])
    return tuple(reversed(chain))


def why_of(top: SessionNode) -> Why | None:
    """:func:`why` of a folded tree (the sessions left out of it must have nothing after its first failure)."""
    parent_of: dict[str, str] = {}
    first: tuple[datetime, int, SessionNode, ActionSpan] | None = None
    last: datetime | None = None
    for order, (_, node) in enumerate(top.walk()):
        for child in node.children:
            parent_of.setdefault(child.session_id, node.session_id)
        if node.last is not None and (last is None or node.last > last):
            last = node.last
        for span in node.actions:
            if span.status is Status.FAILED and span.finished_at is not None:
                key = (span.finished_at, order)
                if first is None or key < first[:2]:
                    first = (span.finished_at, order, node, span)
    if first is None:
        return None
    stamp, _, failed_node, failed_span = first
    chain = [failed_node.session_id]
    while chain[-1] != top.session_id and chain[-1] in parent_of and len(chain) <= len(parent_of):
        chain.append(parent_of[chain[-1]])
    after = [
        span for _, node in top.walk() for span in node.actions if span.usage_at is not None and span.usage_at > stamp
    ]
    actions = sum(1 for _, node in top.walk() for span in node.actions if _begun(span) > stamp)
    tokens = sum(span.tokens for span in after)
    cost = sum(span.cost_usd for span in after)
    wall = max(0, int(((last or stamp) - stamp).total_seconds() * 1000))
    return Why(
        Failure(failed_node.session_id, failed_span.action, failed_span.error, stamp),
        tuple(reversed(chain)),
        After(actions, wall, tokens, cost),
    )


# --- how do two runs differ ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Totals:
    """What one session of a diff adds up to."""

    actions: int
    failed: int
    duration_ms: int
    tokens: int
    cost_usd: float

    def as_json(self) -> dict[str, Any]:
        """The JSON of one side of ``totals``."""
        return {
            "actions": self.actions,
            "failed": self.failed,
            "duration_ms": self.duration_ms,
            "tokens": self.tokens,
            "cost_usd": round(self.cost_usd, 6),
        }


def _cycle_json(span: ActionSpan) -> dict[str, Any]:
    return {
        "action": span.action,
        "tool": span.tool,
        "status": span.status.value if span.status is not None else None,
        "started": _iso(_begun(span)),
        "duration_ms": span.elapsed_ms,
        "tokens": span.tokens,
        "cost_usd": round(span.cost_usd, 6),
    }


def _totals(node: SessionNode) -> Totals:
    wall = int((node.last - node.first).total_seconds() * 1000) if node.first and node.last else 0
    failed = sum(1 for span in node.actions if span.status is Status.FAILED)
    return Totals(len(node.actions), failed, max(0, wall), sum(node.tokens), node.cost_usd)


@dataclass(frozen=True, slots=True)
class SessionDiff:
    """Two sessions' cycles aligned in order; ``rows`` are ``(tag, a, b)`` with tag ``=``, ``~``, ``-``, ``+``."""

    a: SessionNode
    b: SessionNode
    rows: tuple[tuple[str, ActionSpan | None, ActionSpan | None], ...]
    first_divergence: tuple[int, ActionSpan | None, ActionSpan | None] | None

    def as_json(self) -> dict[str, Any]:
        """The JSON of ``gz-ia session diff --json``."""
        divergence = None
        if self.first_divergence is not None:
            index, a, b = self.first_divergence
            divergence = {
                "index": index,
                "a": _cycle_json(a) if a is not None else None,
                "b": _cycle_json(b) if b is not None else None,
            }
        return {
            "a": self.a.session_id,
            "b": self.b.session_id,
            "first_divergence": divergence,
            "totals": {"a": _totals(self.a).as_json(), "b": _totals(self.b).as_json()},
            "cycles": [
                {
                    "tag": tag,
                    "a": _cycle_json(a) if a is not None else None,
                    "b": _cycle_json(b) if b is not None else None,
                }
                for tag, a, b in self.rows
            ],
        }


MAX_ALIGNED: Final = 4_000
"""Cycles a side past their common start and end that the alignment searches; past it the rest is
paired position by position (the search costs up to the product of the two sides)."""

Opcode = tuple[str, int, int, int, int]


def _opcodes(keys_a: list[tuple[str, str | None]], keys_b: list[tuple[str, str | None]]) -> list[Opcode]:
    """The alignment of two key lists: their common start and end as they are, the middle by
    :class:`difflib.SequenceMatcher` when it is small enough, else position by position."""
    head = 0
    while head < len(keys_a) and head < len(keys_b) and keys_a[head] == keys_b[head]:
        head += 1
    tail = 0
    while tail < len(keys_a) - head and tail < len(keys_b) - head and keys_a[-1 - tail] == keys_b[-1 - tail]:
        tail += 1
    end_a, end_b = len(keys_a) - tail, len(keys_b) - tail
    codes: list[Opcode] = [("equal", 0, head, 0, head)] if head else []
    middle_a, middle_b = keys_a[head:end_a], keys_b[head:end_b]
    if max(len(middle_a), len(middle_b)) <= MAX_ALIGNED:
        matcher = SequenceMatcher(None, middle_a, middle_b, autojunk=False)
        codes += [(tag, a1 + head, a2 + head, b1 + head, b2 + head) for tag, a1, a2, b1, b2 in matcher.get_opcodes()]
    else:
        paired = min(len(middle_a), len(middle_b))
        for step in range(paired):
            tag = "equal" if middle_a[step] == middle_b[step] else "replace"
            codes.append((tag, head + step, head + step + 1, head + step, head + step + 1))
        if len(middle_a) > paired:
            codes.append(("delete", head + paired, end_a, end_b, end_b))
        elif len(middle_b) > paired:
            codes.append(("insert", end_a, end_a, head + paired, end_b))
    if tail:
        codes.append(("equal", end_a, len(keys_a), end_b, len(keys_b)))
    return codes


def diff_sessions(a: SessionNode, b: SessionNode) -> SessionDiff:
    """Align the cycles of two folded sessions by ``(action, tool)``, each in the order they began.

    The alignment is a longest common subsequence (:class:`difflib.SequenceMatcher`, with no
    heuristic dropping frequent keys: an agent's commonest tool is the one most worth aligning) of
    what lies between the runs' common start and end, up to :data:`MAX_ALIGNED` cycles a side;
    the first divergence is its first opcode that is not ``equal``, and its index is the number of
    cycles the two runs share before it.
    """
    spans_a = sorted(a.actions, key=_begun)
    spans_b = sorted(b.actions, key=_begun)
    codes = _opcodes([(span.action, span.tool) for span in spans_a], [(span.action, span.tool) for span in spans_b])
    rows: list[tuple[str, ActionSpan | None, ActionSpan | None]] = []
    first: tuple[int, ActionSpan | None, ActionSpan | None] | None = None
    for tag, a1, a2, b1, b2 in codes:
        if tag != "equal" and first is None:
            first = (a1, spans_a[a1] if a1 < a2 else None, spans_b[b1] if b1 < b2 else None)
        if tag == "equal":
            rows += [("=", spans_a[a1 + step], spans_b[b1 + step]) for step in range(a2 - a1)]
        elif tag == "replace":
            for step in range(max(a2 - a1, b2 - b1)):
                left = spans_a[a1 + step] if a1 + step < a2 else None
                right = spans_b[b1 + step] if b1 + step < b2 else None
                rows.append(("~" if left and right else "-" if left else "+", left, right))
        elif tag == "delete":
            rows += [("-", span, None) for span in spans_a[a1:a2]]
        else:
            rows += [("+", None, span) for span in spans_b[b1:b2]]
    return SessionDiff(a, b, tuple(rows), first)
