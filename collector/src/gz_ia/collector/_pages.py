"""The one seam between the ecosystem tools (MCP, OTel export, timeline) and the session reader.

The MCP server, the OpenTelemetry exporter and the timeline read sessions only through this module,
which narrows the rotation-safe reader (:mod:`gz_ia.collector.storage.reader`) to what they need.

Cursors are opaque strings to every caller. Callers that must survive a change of reader (the OTel
exporter persists its position) also keep the event's ``seq``, which the collector assigns per
session without gaps, and never trust a cursor alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from gz_ia.client.schema import Status, StoredEvent

from .storage import reader as _reader
from .storage._layout import LayoutError

__all__ = [
    "Entry",
    "Page",
    "SessionNotFound",
    "SessionSummary",
    "cursor_segment",
    "event_at",
    "failed_events",
    "iter_session",
    "list_session_ids",
    "list_sessions",
    "read_page",
    "session_summaries",
    "session_tree",
]

SessionNotFound = _reader.SessionNotFound
SessionSummary = _reader.SessionSummary
session_tree = _reader.session_tree
"""The one tree of subagent sessions (``gz-ia session tree``, ``--tree``, the timeline, MCP)."""
list_sessions = _reader.list_sessions


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored line: the raw JSON, the decoded event, and the cursor that resumes after it."""

    line: str
    event: StoredEvent
    cursor: str


@dataclass(frozen=True, slots=True)
class Page:
    """A page of entries; ``next_cursor`` continues in the same direction.

    ``end``: nothing more in this direction for now; ``expired``: retention deleted the events after
    the cursor, so the history ends there.
    """

    entries: list[Entry] = field(default_factory=list)
    next_cursor: str | None = None
    incomplete: bool = False
    end: bool = True
    expired: bool = False


def read_page(
    root: Path, session_id: str, *, cursor: str | None = None, limit: int = 100, reverse: bool = False
) -> Page:
    """Read up to ``limit`` entries of a session after ``cursor`` (oldest first unless ``reverse``).

    Raises:
        SessionNotFound: the id is unsafe or no file exists for it under ``root``.
        ValueError: ``cursor`` is not one this reader made, or ``limit`` is not positive.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    page = _reader.read_page(root, session_id, cursor=cursor, limit=limit, reverse=reverse)
    return Page(
        entries=[Entry(entry.line, entry.event, entry.cursor) for entry in page.entries],
        next_cursor=page.next_cursor,
        incomplete=bool(page.incomplete),
        end=bool(page.end),
        expired=bool(page.expired),
    )


def iter_session(root: Path, session_id: str, *, page_size: int = 1000) -> Iterator[Entry]:
    """Yield every entry of a session, oldest first, page by page."""
    cursor: str | None = None
    while True:
        page = read_page(root, session_id, cursor=cursor, limit=page_size)
        yield from page.entries
        if not page.entries or page.next_cursor is None:
            return
        cursor = page.next_cursor


def list_session_ids(root: Path) -> list[str]:
    """Return the ids of every session stored under ``root``, sorted; empty for a missing root."""
    try:
        return sorted({summary.session_id for summary in _reader.list_sessions(root)})
    except (LayoutError, LookupError, OSError):
        return []


def session_summaries(root: Path) -> dict[str, SessionSummary]:
    """Return every session's summary (first event's parent and agent, times, counts), keyed by id."""
    try:
        return dict(_reader.session_summaries(root))
    except (LayoutError, LookupError, OSError):
        return {}


def failed_events(root: Path, session_id: str, *, since: datetime | None = None) -> Iterator[Entry]:
    """Yield a session's FAILED events (at or after ``since``), oldest first, without decoding the rest twice."""
    filters = _reader.Filters(statuses=frozenset({Status.FAILED}), since=since)
    for entry in _reader.iter_events(root, session_id, filters=filters):
        yield Entry(entry.line, entry.event, entry.cursor)


def event_at(root: Path, session_id: str, seq: int) -> Entry | None:
    """Return the session's event number ``seq``, or None when it does not exist (or retention deleted it).

    Raises:
        SessionNotFound: nothing is stored for the session.
    """
    found = _reader.event_at(root, session_id, seq)
    return None if found is None else Entry(found.line, found.event, found.cursor)


def cursor_segment(cursor: str | None, session_id: str) -> int:
    """Return the segment a cursor's boundary lies in (1 for no cursor, or one this reader cannot read)."""
    if cursor is None:
        return 1
    try:
        return int(_reader.cursor_segment(cursor, session_id))
    except (ValueError, LookupError):
        return 1
