"""A session's title for the page: what it was asked (its first prompt) or else what it first did.

A session id is a UUID that says nothing to a person scanning a list; the first thing the session
was asked, or its first real action with what it acted on (``Bash: npm test``), does. Agents rarely
store a prompt's text (Claude Code's hooks keep only its length), so the first action is the usual
title; the lifecycle cycles every session of an agent opens alike (``session``, ``prompt``,
``subagent``) name nothing and are passed over. Only a session's first events are read, and a title
once found is kept: those events never change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from gz_ia.collector import reading

__all__ = ["TITLE_CHARS", "TITLE_SCAN", "session_title", "title_of"]

TITLE_CHARS: Final = 120
"""A title is cut to this many characters."""
TITLE_SCAN: Final = 64
"""How many of a session's first events are read for its title."""
_PROMPT_KEYS: Final = ("prompt", "gen_ai.prompt", "title", "task")
"""Attrs that hold what the session was asked, where an agent stores it."""
_SUBJECT_KEYS: Final = ("description", "command", "file_path", "path", "pattern", "url", "query", "tool")
"""Attrs that say what an action acted on (the summaries the agents' hooks keep)."""
_LIFECYCLE: Final = frozenset({"session", "prompt", "subagent", "turn failure"})
_found: dict[tuple[str, str], str] = {}


def _cut(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


def title_of(events: Sequence[tuple[str, Mapping[str, Any] | None]]) -> tuple[str | None, bool]:
    """The title of a session whose first events are ``(action, attrs)``, and whether it is final
    (a prompt or a real action found; False: only lifecycle cycles so far, a later event may say more).
    """
    first_action: str | None = None
    for action, attrs in events:
        for key in _PROMPT_KEYS:
            value = attrs.get(key) if attrs else None
            if isinstance(value, str) and value.strip():
                return _cut(value), True
        if first_action is None:
            first_action = action
        if action in _LIFECYCLE:
            continue
        subject = next(
            (value for key in _SUBJECT_KEYS if isinstance(value := (attrs or {}).get(key), str) and value.strip()),
            None,
        )
        return _cut(f"{action}: {subject}" if subject and subject != action else action), True
    return (_cut(first_action) if first_action else None), False


def session_title(root: Path, session_id: str) -> str | None:
    """The title of a stored session (None: no event yet); blocks, as every reader of the files does."""
    key = (str(root), session_id)
    found = _found.get(key)
    if found is not None:
        return found
    events: list[tuple[str, dict[str, Any] | None]] = []
    try:
        for entry in reading.iter_events(root, session_id, page_size=TITLE_SCAN):
            events.append((entry.event.action, dict(entry.event.attrs) if entry.event.attrs else None))
            if len(events) >= TITLE_SCAN:
                break
    except reading.SessionNotFound:
        return None
    title, final = title_of(events)
    if title is not None and (final or len(events) >= TITLE_SCAN):
        if len(_found) > 50_000:
            _found.clear()
        _found[key] = title
    return title
