"""The web view's JSON: pages of sessions, a session's tree, windows of its events, a transcript.

Every answer is bounded whatever the root holds: a page of at most :data:`MAX_PAGE` sessions, a
window of at most :data:`MAX_EVENTS` events read backwards from a cursor (a million-event session
costs what a small one does), and the per-session token and cost sums are read for the sessions of
the page only, over at most :data:`SCANNED_EVENTS` events each. The functions block (they read
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

from gz_ia.client.usage import COST_USD, PLAIN_KEYS, TOKEN_KEYS, recorded_usage
from gz_ia.collector import reading
from gz_ia.collector.reading import SessionSummary
from gz_ia.collector.views.answers import DEFAULT_HUNG_AFTER, OpenCycle, OpenCycleIndex, hung, last_below, why

__all__ = [
    "MAX_EVENTS",
    "MAX_PAGE",
    "SCANNED_EVENTS",
    "SESSION_FIELDS",
    "event_window",
    "first_failure",
    "open_cycles",
    "session_family",
    "session_page",
    "session_tree",
    "transcript_of",
]

MAX_PAGE: Final = 200
MAX_EVENTS: Final = 2000
SCANNED_EVENTS: Final = 2000
MAX_TRANSCRIPT: Final = 8 << 20
SESSION_FIELDS: Final = ("agent", "parent_session_id", "role", "root_session_id", "session_id", "status")
"""What a ``FIELD=VALUE`` of the sessions list may name."""
_TOKEN_KEYS: Final = (*TOKEN_KEYS, *PLAIN_KEYS)
_COST_KEYS: Final = (COST_USD, "cost_usd")
_LIST_TTL: Final = 3.0
"""Seconds a root's listing of the sessions not in the collector's memory is reused: those are idle,
and the ones being written come fresh from memory at every call (``known``)."""

_EPOCH_START: Final = datetime.min.replace(tzinfo=UTC)
_listings: dict[str, tuple[float, list[SessionSummary]]] = {}
_usage: dict[tuple[str, str, int], dict[str, Any]] = {}
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
    return "running" if summary.open_actions else "failed" if summary.failed else "ok"


def _usage_of(root: Path, summary: SessionSummary) -> dict[str, Any]:
    """Role of the first event, and tokens and cost added up over the first SCANNED_EVENTS events."""
    key = (str(root), summary.session_id, summary.events)
    found = _usage.get(key)
    if found is not None:
        return found
    role: str | None = None
    tokens = 0
    cost = 0.0
    known_tokens = known_cost = False
    transcript: str | None = None
    scanned = 0
    try:
        for entry in reading.iter_events(root, summary.session_id, page_size=500):
            event = entry.event
            if scanned == 0:
                role = event.role
            scanned += 1
            attrs = event.attrs
            if attrs:
                used = recorded_usage(attrs)
                if used is not None:
                    counts, spent, _model = used
                    tokens += sum(counts)
                    cost += spent
                    known_tokens = known_tokens or any(key in attrs for key in _TOKEN_KEYS)
                    known_cost = known_cost or any(key in attrs for key in _COST_KEYS)
                else:
                    total = attrs.get("tokens")  # a bare total, as some hand-written attrs give it
                    if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
                        tokens += total
                        known_tokens = True
                path = attrs.get("transcript_path")
                if isinstance(path, str):
                    transcript = path
            if scanned >= SCANNED_EVENTS:
                break
    except reading.SessionNotFound:
        pass
    found = {
        "role": role,
        "tokens": tokens if known_tokens else None,
        "cost_usd": round(cost, 6) if known_cost else None,
        "usage_partial": scanned >= SCANNED_EVENTS and summary.events > SCANNED_EVENTS,
        "transcript": transcript is not None,
    }
    if len(_usage) > 20_000:
        _usage.clear()
    _usage[key] = found
    return found


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
    kept: list[SessionSummary] = []
    for summary in _listing(root, known or {}):
        fields = {
            "agent": summary.agent,
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
        kept = [summary for summary in kept if (_usage_of(root, summary)["role"] or "") in roles]
    page = kept[offset : offset + limit]
    now = datetime.now(UTC)
    opened, busy = open_cycles(root, known or {})
    sessions = []
    for summary in page:
        stuck = [cycle.as_json(now) for cycle in hung(opened.get(summary.session_id, ()), now, hung_after, busy)]
        row = {**_summary_dict(summary), **_usage_of(root, summary), "hung": stuck}
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
        nodes.append({**_summary_dict(node.summary), "depth": depth, "status": node.status})
    return {"session_id": session_id, "nodes": nodes}


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
