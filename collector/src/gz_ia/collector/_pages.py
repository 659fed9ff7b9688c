"""The one seam between the ecosystem tools (MCP, OTel export, timeline) and the session reader.

The MCP server, the OpenTelemetry exporter and the timeline read sessions only through this module.
It uses the rotation-safe reader's paged API (``storage.reader.read_page`` / ``list_sessions``) when
that API is present, and otherwise a small stand-in over the active segment, with a byte-offset
cursor, that is exact as long as files are not rotated. When the paged reader has landed everywhere
the stand-in can go and the names below become re-exports.

Cursors are opaque strings to every caller. Callers that must survive a change of reader (the OTel
exporter persists its position) also keep the event's ``seq``, which the collector assigns per
session without gaps, and never trust a cursor alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from gz_ia.client.schema import Status, StoredEvent, is_safe_session_id

from .storage import reader as _reader
from .storage._layout import LayoutError, active_name, open_root, session_id_of

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

_decoder: Final = msgspec.json.Decoder(StoredEvent)
_CHUNK: Final = 1 << 16

# The paged reader's functions, when this installation has them (None until it lands).
_paged_read: Any = getattr(_reader, "read_page", None)
_paged_list: Any = getattr(_reader, "list_sessions", None)


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
    if _paged_read is not None:
        page = _paged_read(root, session_id, cursor=cursor, limit=limit, reverse=reverse)
        return Page(
            entries=[Entry(entry.line, entry.event, entry.cursor) for entry in page.entries],
            next_cursor=page.next_cursor,
            incomplete=bool(page.incomplete),
            end=bool(page.end),
            expired=bool(getattr(page, "expired", False)),
        )
    return _offset_page(root, session_id, cursor=cursor, limit=limit, reverse=reverse)


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
    if _paged_list is not None:
        try:
            return sorted({summary.session_id for summary in _paged_list(root)})
        except (LayoutError, LookupError, OSError):
            return []
    try:
        dirs = open_root(root, owner=None, create=False)
    except LayoutError:
        return []
    try:
        names = os.listdir(dirs.sessions_fd)
    finally:
        dirs.close()
    return sorted(session_id for name in names if (session_id := session_id_of(name)) is not None)


# --- the stand-in: the active segment with a byte-offset cursor -----------------------------------


def _parse_cursor(cursor: str | None, *, reverse: bool) -> int | None:
    if cursor is None:
        return None
    kind, _, number = cursor.partition(":")
    if kind != ("r" if reverse else "o") or not number.isdigit():
        raise ValueError(f"cursor {cursor!r} is not valid here")
    return int(number)


def _open_session(root: Path, session_id: str) -> int:
    if not is_safe_session_id(session_id):
        raise SessionNotFound(f"{session_id!r} is not a valid session id")
    try:
        dirs = open_root(root, owner=None, create=False)
    except LayoutError as exc:
        raise SessionNotFound(str(exc)) from exc
    try:
        return os.open(active_name(session_id), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs.sessions_fd)
    except OSError as exc:
        raise SessionNotFound(f"no session {session_id!r} under {root}") from exc
    finally:
        dirs.close()


def _offset_page(root: Path, session_id: str, *, cursor: str | None, limit: int, reverse: bool) -> Page:
    position = _parse_cursor(cursor, reverse=reverse)
    fd = _open_session(root, session_id)
    try:
        if reverse:
            return _reverse_page(fd, position, limit)
        return _forward_page(fd, position or 0, limit)
    finally:
        os.close(fd)


def _forward_page(fd: int, offset: int, limit: int) -> Page:
    entries: list[Entry] = []
    incomplete = False
    buffer = b""
    read_at = offset
    line_start = offset
    while len(entries) < limit:
        chunk = os.pread(fd, _CHUNK, read_at)
        if not chunk:
            break
        read_at += len(chunk)
        buffer += chunk
        while len(entries) < limit:
            newline = buffer.find(b"\n")
            if newline < 0:
                break
            raw, buffer = buffer[:newline], buffer[newline + 1 :]
            line_start += newline + 1
            try:
                event = _decoder.decode(raw)
            except msgspec.DecodeError:
                incomplete = True  # an unreadable line is skipped, and the page says so
                continue
            entries.append(Entry(raw.decode(errors="replace"), event, f"o:{line_start}"))
    # A trailing fragment without its newline is a line still being written: never shown half.
    end = len(entries) < limit
    return Page(entries, f"o:{line_start}", incomplete, end)


def _reverse_page(fd: int, before: int | None, limit: int) -> Page:
    size = os.fstat(fd).st_size
    stop = size if before is None else min(before, size)
    data = os.pread(fd, stop, 0)
    if before is None:
        data = data[: data.rfind(b"\n") + 1]  # drop a line still being written
    starts: list[int] = []
    position = 0
    for raw in data.splitlines(keepends=True):
        starts.append(position)
        position += len(raw)
    entries: list[Entry] = []
    incomplete = False
    lines = data.splitlines()
    index = len(lines) - 1
    while index >= 0 and len(entries) < limit:
        raw = lines[index]
        try:
            entries.append(Entry(raw.decode(errors="replace"), _decoder.decode(raw), f"r:{starts[index]}"))
        except msgspec.DecodeError:
            incomplete = True
        index -= 1
    next_cursor = f"r:{starts[index + 1]}" if lines and index + 1 < len(starts) else "r:0"
    return Page(entries, next_cursor, incomplete, index < 0)


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
