"""The web view's JSON: pages of sessions, a session's tree, windows of its events, a transcript.

Every answer is bounded whatever the root holds: a page of at most :data:`MAX_PAGE` sessions, a
window of at most :data:`MAX_EVENTS` events read backwards from a cursor (a million-event session
costs what a small one does). The tokens and cost of each session are the collector's own tally of
it (:class:`gz_ia.client.usage.UsageSum`, the numbers ``gz-ia sessions`` shows), and rolled up over
its subagents as ``gz-ia sessions`` rolls them up; the first :data:`SCANNED_EVENTS` events of the
sessions of the page are read for the role and the transcript only. The functions block (they read
files): the routes run them in a thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from gz_ia.client.usage import TOKEN_KINDS
from gz_ia.collector import reading
from gz_ia.collector.reading import SessionSummary
from gz_ia.collector.reading.cycles import ActionSpan, SessionNode, TimelineBuilder
from gz_ia.collector.views.answers import DEFAULT_HUNG_AFTER, OpenCycle, OpenCycleIndex, hung, last_below, why

from .titles import session_title

__all__ = [
    "MAX_CYCLES",
    "MAX_EVENTS",
    "MAX_PAGE",
    "SCANNED_EVENTS",
    "SESSION_FIELDS",
    "event_window",
    "first_failure",
    "open_cycles",
    "session_cycles",
    "session_family",
    "session_page",
    "session_tree",
    "transcript_of",
    "usage_json",
]

MAX_PAGE: Final = 200
MAX_EVENTS: Final = 2000
SCANNED_EVENTS: Final = 2000
MAX_TRANSCRIPT: Final = 8 << 20
MAX_CYCLES: Final = 2000
"""Cycles of a tree the cycles answer draws (the newest); the older ones are counted in ``left_out``."""
CYCLE_EVENTS: Final = 20_000
"""Events read, the newest, per session of the tree for the cycles answer."""
SESSION_FIELDS: Final = ("agent", "host", "parent_session_id", "role", "root_session_id", "session_id", "status")
"""What a ``FIELD=VALUE`` of the sessions list may name (``host``: the machine, on a fleet hub's root)."""
_LIST_TTL: Final = 3.0
"""Seconds a root's listing of the sessions not in the collector's memory is reused: those are idle,
and the ones being written come fresh from memory at every call (``known``)."""

_EPOCH_START: Final = datetime.min.replace(tzinfo=UTC)
_listings: dict[str, tuple[float, list[SessionSummary]]] = {}
_scans: dict[tuple[str, str, int], dict[str, Any]] = {}
_open_index = OpenCycleIndex()
_open_lock = threading.Lock()
"""The page's threads and the metrics server's share the index."""


def _listing(root: Path, known: Mapping[str, SessionSummary]) -> list[SessionSummary]:
    """Every session of the root: those in ``known`` as given, the others from the files (cached)."""
    key = str(root)
    now = time.monotonic()
    cached = _listings.get(key)
    if cached is None or now - cached[0] >= _LIST_TTL:
        summaries = reading.list_sessions(root, known=known)
        if len(_listings) > 64:
            _listings.clear()
        _listings[key] = cached = (now, summaries)
    merged = {summary.session_id: summary for summary in cached[1]}
    merged.update(known)
    return list(merged.values())


def open_cycles(
    root: Path, known: Mapping[str, SessionSummary]
) -> tuple[dict[str, tuple[OpenCycle, ...]], dict[str, datetime]]:
    """The open cycles of every session of the root that has any, by session id (where each
    session's activity stopped: :func:`~gz_ia.collector.views.answers.open_cycles`), and the last
    event below each session with subagents (:func:`~gz_ia.collector.views.answers.last_below`).

    The listing is the page's (cached for the idle sessions); of the sessions it says have open
    cycles, only those with new events since the last call are read again.
    """
    listing = _listing(root, known)
    with _open_lock:
        return _open_index.cycles(root, listing), last_below(listing)


def _status(summary: SessionSummary) -> str:
    return summary.status


def _scanned(root: Path, summary: SessionSummary) -> dict[str, Any]:
    """Role of the first event, and whether the first SCANNED_EVENTS events name a transcript."""
    key = (str(root), summary.session_id, summary.events)
    found = _scans.get(key)
    if found is not None:
        return found
    role: str | None = None
    transcript = False
    scanned = 0
    try:
        for entry in reading.iter_events(root, summary.session_id, page_size=500):
            event = entry.event
            if scanned == 0:
                role = event.role
            scanned += 1
            if event.attrs and isinstance(event.attrs.get("transcript_path"), str):
                transcript = True
                break
            if scanned >= SCANNED_EVENTS:
                break
    except reading.SessionNotFound:
        pass
    found = {"role": role, "transcript": transcript}
    if len(_scans) > 20_000:
        _scans.clear()
    _scans[key] = found
    return found


def _tokens_json(tokens: tuple[int, int, int, int]) -> dict[str, int]:
    return {**dict(zip(TOKEN_KINDS, tokens, strict=True)), "total": sum(tokens)}


def usage_json(summary: SessionSummary, tree: reading.TreeUsage | None) -> dict[str, Any]:
    """A session's usage as the page reads it: ``tokens`` (every kind; null with no usage) and
    ``cost_usd`` its own, ``tokens_by_kind`` and ``model``, and ``tree_tokens`` / ``tree_cost_usd``
    with every subagent's below it: the numbers ``gz-ia sessions --json`` gives; ``hooks_usage_counts``
    whether its hooks' own readings are what counts (the page's rows count them only then)."""
    own = summary.tokens
    used = bool(sum(own) or summary.cost_usd)
    tree_tokens, tree_cost = tree if tree is not None else (own, summary.cost_usd)
    return {
        "tokens": sum(own) if used else None,
        "cost_usd": round(summary.cost_usd, 6) if used else None,
        "tokens_by_kind": _tokens_json(own),
        "model": summary.model or None,
        "tree_tokens": _tokens_json(tree_tokens),
        "tree_cost_usd": round(tree_cost, 6),
        "hooks_usage_counts": summary.hooks_usage_counts,
        "usage_partial": False,
    }


def _summary_dict(summary: SessionSummary) -> dict[str, Any]:
    first, last = summary.first_time, summary.last_time
    return {
        "session_id": summary.session_id,
        "parent_session_id": summary.parent_session_id,
        "root_session_id": summary.root_session_id,
        "agent": summary.agent,
        "status": _status(summary),
        "first_time": first.isoformat() if first else None,
        "last_time": last.isoformat() if last else None,
        "duration_s": (last - first).total_seconds() if first and last else None,
        "events": summary.events,
        "open_actions": summary.open_actions,
        "failures": summary.failures,
    }


def _parse_matches(matches: Iterable[str]) -> dict[str, set[str]]:
    wanted: dict[str, set[str]] = {}
    for argument in matches:
        name, sep, value = argument.partition("=")
        name = name.strip()
        if not sep or name not in SESSION_FIELDS:
            raise ValueError(f"{argument!r}: the sessions list matches {', '.join(SESSION_FIELDS)} (FIELD=VALUE)")
        wanted.setdefault(name, set()).add(value)
    return wanted


def session_page(
    root: Path,
    *,
    offset: int,
    limit: int,
    text: str,
    matches: Iterable[str],
    known: Mapping[str, SessionSummary] | None = None,
    hung_after: float = DEFAULT_HUNG_AFTER,
) -> dict[str, Any]:
    """A page of the root's sessions, the most recently active first, filtered; each with ``hung``,
    its cycles open at least ``hung_after`` seconds (``status`` ``hung`` when there are any).

    Raises:
        ValueError: a ``FIELD=VALUE`` of a field sessions do not have.
    """
    wanted = _parse_matches(matches)
    needle = text.strip().lower()
    limit = max(1, min(limit, MAX_PAGE))
    hub = reading.is_hub_root(root)
    kept: list[SessionSummary] = []
    for summary in _listing(root, known or {}):
        fields = {
            "agent": summary.agent,
            "host": (reading.host_of(summary.session_id) or "") if hub else "",
            "parent_session_id": summary.parent_session_id or "",
            "root_session_id": summary.root_session_id or "",
            "session_id": summary.session_id,
            "status": _status(summary),
        }
        if any(name != "role" and fields[name] not in values for name, values in wanted.items()):
            continue
        if needle and not any(needle in value.lower() for value in fields.values()):
            continue
        kept.append(summary)
    kept.sort(key=lambda item: (item.last_time or item.first_time or _EPOCH_START, item.session_id), reverse=True)
    if "role" in wanted:
        roles = wanted["role"]
        kept = [summary for summary in kept if (_scanned(root, summary)["role"] or "") in roles]
    page = kept[offset : offset + limit]
    now = datetime.now(UTC)
    opened, busy = open_cycles(root, known or {})
    rolled = reading.tree_usage(_listing(root, known or {}))
    sessions = []
    for summary in page:
        stuck = [cycle.as_json(now) for cycle in hung(opened.get(summary.session_id, ()), now, hung_after, busy)]
        usage = usage_json(summary, rolled.get(summary.session_id))
        row = {**_summary_dict(summary), **_scanned(root, summary), **usage, "hung": stuck}
        row["title"] = session_title(root, summary.session_id)
        if hub:
            row["host"] = reading.host_of(summary.session_id)
        if stuck:
            row["status"] = "hung"
        sessions.append(row)
    hung_total = sum(1 for cycles in opened.values() if hung(cycles, now, hung_after, busy))
    return {"total": len(kept), "offset": offset, "limit": limit, "sessions": sessions, "hung_sessions": hung_total}


def first_failure(root: Path, session_id: str) -> dict[str, Any]:
    """The first failure of the session's tree and what came after (``first_failure`` null: none).

    Raises:
        SessionNotFound: no such session (nor anyone's parent).
    """
    answer = why(root, session_id)
    return {"first_failure": None, "chain": [], "after": None} if answer is None else answer.as_json()


def session_tree(root: Path, session_id: str, known: Mapping[str, SessionSummary] | None = None) -> dict[str, Any]:
    """The session's subagent tree, flattened depth first (summaries only, no events).

    Raises:
        SessionNotFound: no such session (nor anyone's parent).
    """
    top = reading.session_tree(root, session_id, known=known)
    nodes = []
    for depth, node in top.walk():
        usage = usage_json(node.summary, (node.tree_tokens, node.tree_cost_usd))
        title = session_title(root, node.session_id)
        nodes.append({**_summary_dict(node.summary), **usage, "depth": depth, "status": node.status, "title": title})
    return {"session_id": session_id, "nodes": nodes}


def _stamp(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _cycle_json(span: ActionSpan) -> dict[str, Any]:
    return {
        "action": span.action,
        "tool": span.tool,
        "cycle": span.cycle,
        "role": span.role,
        "status": span.status.value if span.status is not None else None,
        "error": span.error,
        "start": _stamp(span.start),
        "end": _stamp(span.end),
        "read_at": _stamp(span.read_at),
        "pending_at": _stamp(span.pending_at),
        "finished_at": _stamp(span.finished_at),
        "duration_ms": span.elapsed_ms,
        "first_seq": span.first_seq,
        "last_seq": span.last_seq,
        "events": span.events,
        "tokens": _tokens_json((span.token_kinds[0], span.token_kinds[1], span.token_kinds[2], span.token_kinds[3])),
        "cost_usd": round(span.cost_usd, 6),
        "model": span.model or None,
    }


def session_cycles(root: Path, session_id: str, known: Mapping[str, SessionSummary] | None = None) -> dict[str, Any]:
    """The one model of a session tree (:mod:`gz_ia.collector.reading.cycles`) as the page draws it:
    per session (depth first) its summary, usage (its own and with its subagents', the tally's) and
    its cycles in time order, each with its stages' times, status and usage. Bounded: the newest
    :data:`CYCLE_EVENTS` events of each session are read and the newest :data:`MAX_CYCLES` cycles kept;
    ``left_out`` counts the rest (a cycle begun before the events read starts at its first one read).

    Raises:
        SessionNotFound: no such session (nor anyone's parent).
    """
    top = reading.session_tree(root, session_id, known=known)

    def skeleton(item: Any) -> SessionNode:
        return SessionNode(item.session_id, children=[skeleton(child) for child in item.children])

    builder = TimelineBuilder(skeleton(top), max_cycles=MAX_CYCLES)
    partial = False
    for _depth, item in top.walk():
        try:
            page = reading.read_page(root, item.session_id, limit=CYCLE_EVENTS, reverse=True)
        except reading.SessionNotFound:
            continue  # known only as a parent
        partial = partial or not page.end
        for entry in reversed(page.entries):
            builder.add(entry.event)
    model = builder.finish()
    folded = {node.session_id: node for _depth, node in model.walk()}
    nodes = []
    for depth, item in top.walk():
        node = folded[item.session_id]
        usage = usage_json(item.summary, (item.tree_tokens, item.tree_cost_usd))
        cycles = sorted(node.actions, key=lambda span: (span.start, span.first_seq))
        nodes.append(
            {
                **_summary_dict(item.summary),
                **usage,
                "depth": depth,
                "status": item.status,
                "role": node.role,
                "title": session_title(root, item.session_id),
                "cycles": [_cycle_json(span) for span in cycles],
            }
        )
    left = builder.left_out
    return {
        "session_id": session_id,
        "nodes": nodes,
        "left_out": {"cycles": left.cycles, "events": left.events, "failed": left.failed},
        "partial": partial,
    }


def session_family(root: Path, session_id: str, known: Mapping[str, SessionSummary] | None = None) -> list[str]:
    """The session ids of a session's stored subtree (itself included; [] when unknown)."""
    try:
        top = reading.session_tree(root, session_id, known=known)
    except reading.SessionNotFound:
        return []
    return [node.session_id for _depth, node in top.walk()]


def event_window(root: Path, session_id: str, *, before: str | None, limit: int) -> dict[str, Any]:
    """The newest ``limit`` events of a session before ``before`` (a cursor; None: the end), oldest first.

    Raises:
        SessionNotFound, InvalidCursor: as :func:`reading.read_page`.
    """
    limit = max(1, min(limit, MAX_EVENTS))
    page = reading.read_page(root, session_id, cursor=before, limit=limit, reverse=True)
    entries = list(reversed(page.entries))
    events = [msgspec.json.decode(entry.line) for entry in entries]
    return {
        "session_id": session_id,
        "events": events,
        "older": page.next_cursor if not page.end else None,
        "incomplete": page.incomplete,
    }


def transcript_of(root: Path, session_id: str) -> tuple[str, bytes] | None:
    """The transcript the session's agent named (``attrs.transcript_path``, the newest one among the
    newest events): its path and its first :data:`MAX_TRANSCRIPT` bytes; None without one."""
    page = reading.read_page(root, session_id, limit=MAX_EVENTS, reverse=True)
    for entry in page.entries:
        attrs = entry.event.attrs
        path = attrs.get("transcript_path") if attrs else None
        if isinstance(path, str) and os.path.isabs(path):
            if not os.path.isfile(path):  # never a FIFO or a device, whatever an agent wrote
                return path, b""
            try:
                with open(path, "rb") as handle:
                    return path, handle.read(MAX_TRANSCRIPT)
            except OSError:
                return path, b""
    return None
