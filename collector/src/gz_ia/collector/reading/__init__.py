"""Reading sessions back: paged, rotation-safe, followable. Standard library, msgspec and gz_ia.client only.

The public API, kept stable for the CLI, the MCP server, the OpenTelemetry exporter and the timeline:

* :func:`read_page` reads up to ``limit`` matching events after (or, with ``reverse``, before) a
  cursor and returns a :class:`Page` of :class:`Entry` (``line``, ``event``, ``cursor``).
* :func:`iter_events` iterates page by page; :func:`end_cursor` gives the cursor after the newest event.
* :func:`follow` yields new events of one session, of several, or of every session of a root (new
  sessions included) as they land, with ``tail -F`` semantics across rotation and collector restarts.
* :func:`list_sessions` summarises every session of a root; :func:`session_tree` builds the tree of
  subagent sessions below one session.

Cursors are opaque strings that never skip and never repeat an event; when the events after a
cursor were deleted by retention, the page is empty and ``expired``. What a read could not return
is a :class:`Gap`. The modules, bottom to top (each imports only those before it):

* :mod:`.segments`: one session's segments at one moment, scanned for complete lines;
* :mod:`.cursor`: positions as opaque strings, checked and found again by ``seq``;
* :mod:`.gaps`: what a read could not return, and why;
* :mod:`.pages`: pages of one session, forwards and mirrored backwards;
* :mod:`.follow`: following sessions live;
* :mod:`.sessions` (on :mod:`.segments` alone): summaries of a root's sessions and the tree;
* :mod:`.cycles`: the one model of a session (its cycles, status and usage, per cycle, per session
  and over its subagents) that every window reads; imported as ``reading.cycles``.
* :mod:`.after` (on :mod:`.cycles`): what a session did after a moment, off its checkpoint's quiet
  points (``gz-ia session why``); imported as ``reading.after``.
* :mod:`.hosts` (alone): on a fleet hub's root, which machine a session came from.

Storage's layout helpers are the only thing this package imports from the collector, and storage
imports nothing from it.
"""

from __future__ import annotations

from gz_ia.collector.storage.roots import LayoutError, LayoutTooNew

from .cursor import (
    InvalidCursor,
    check_cursor,
    combine_cursors,
    cursor_segment,
    cursor_seq,
    cursor_sessions,
    end_cursor,
)
from .follow import CursorExpired, follow
from .gaps import Gap
from .hosts import HUB_MARK, host_of, hosted_sessions, is_hub_root
from .pages import Entry, Filters, Page, copy_lines, cursor_before, event_at, iter_events, read_page, time_runs
from .segments import RootNotFound, SessionNotFound, require_root
from .sessions import MAX_TREE_DEPTH, SessionSummary, TreeNode, TreeUsage, list_sessions, session_tree, tree_usage

__all__ = [
    "HUB_MARK",
    "MAX_TREE_DEPTH",
    "CursorExpired",
    "Entry",
    "Filters",
    "Gap",
    "InvalidCursor",
    "LayoutError",
    "LayoutTooNew",
    "Page",
    "RootNotFound",
    "SessionNotFound",
    "SessionSummary",
    "TreeNode",
    "TreeUsage",
    "check_cursor",
    "combine_cursors",
    "copy_lines",
    "cursor_before",
    "cursor_segment",
    "cursor_seq",
    "cursor_sessions",
    "end_cursor",
    "event_at",
    "follow",
    "host_of",
    "hosted_sessions",
    "is_hub_root",
    "iter_events",
    "list_sessions",
    "read_page",
    "require_root",
    "session_tree",
    "time_runs",
    "tree_usage",
]
