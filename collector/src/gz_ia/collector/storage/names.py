"""Where things live under a session root: every file name, how it is built and how it is parsed.

A root is a workspace's ``.harness`` directory::

    <root>/layout.json                          {"layout": 1, "epoch": "..."}: layout version, root id
    <root>/sessions/<id>.events.jsonl           the active segment of a session
    <root>/sessions/<id>.events.<n>.jsonl[.gz]  archived segment n (6+ digits, n = 1, 2, ...)
    <root>/sessions/<id>.events.torn            torn fragments cut off at recovery
    <root>/state/<id>.session.json              the session's checkpoint (never data)
    <root>/state/rejects.state.json             the rejects file's checkpoint
    <root>/rejects.jsonl                        refused events, each with its reason
    <root>/rejects.<n>.jsonl[.gz]               archived rejects segment n
    <root>/rejects-<k>.jsonl, ...               the same, of share k of a sharded collector (k >= 1)

Segments are numbered per session, monotonically: the active file is always the highest number, and
rotation renames it to its archive name (never copies). Order is always the number, never an mtime.
Nothing in ``state/`` is ever read as events, and retention deletes only names listed above. Names
are only ever built from validated session ids (:func:`gz_ia.client.schema.is_safe_session_id`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from gz_ia.client.schema import is_safe_session_id

__all__ = [
    "ACTIVE_SUFFIX",
    "LAYOUT_FILE",
    "LAYOUT_VERSION",
    "REJECTS_STATE_SUFFIX",
    "REJECTS_STEM",
    "SESSIONS_DIR",
    "STATE_DIR",
    "STATE_SUFFIX",
    "TORN_SUFFIX",
    "active_name",
    "archive_name",
    "is_rejects_file",
    "is_rejects_state",
    "parse_archive_name",
    "parse_rejects_archive_name",
    "rejects_archive",
    "rejects_archive_name",
    "session_archive",
    "session_id_of",
    "session_id_of_state",
    "state_name",
    "stored_session_id",
    "torn_name",
]

LAYOUT_VERSION: Final = 1
LAYOUT_FILE: Final = "layout.json"
SESSIONS_DIR: Final = "sessions"
STATE_DIR: Final = "state"
REJECTS_STEM: Final = "rejects"
ACTIVE_SUFFIX: Final = ".events.jsonl"
TORN_SUFFIX: Final = ".events.torn"
STATE_SUFFIX: Final = ".session.json"
REJECTS_STATE_SUFFIX: Final = ".state.json"
"""Suffix of a rejects file's checkpoint in ``state/`` (``rejects.state.json``, ``rejects-1.state.json``)."""

_ARCHIVE: Final = re.compile(r"\.events\.([0-9]{6,})\.jsonl(\.gz)?\Z")
_REJECTS_ARCHIVE: Final = re.compile(r"\Arejects(?:-[0-9]+)?\.([0-9]{6,})\.jsonl(\.gz)?\Z")
_REJECTS_FILE: Final = re.compile(r"\Arejects(?:-[0-9]+)?\.jsonl\Z")
_REJECTS_STATE: Final = re.compile(r"\Arejects(?:-[0-9]+)?\.state\.json\Z")


def active_name(session_id: str) -> str:
    """Return the active segment's file name for a validated session id."""
    if not is_safe_session_id(session_id):
        raise ValueError(f"unsafe session id {session_id!r}")
    return session_id + ACTIVE_SUFFIX


def torn_name(session_id: str) -> str:
    """Return the name of the file that keeps torn fragments repaired out of a session."""
    return session_id + TORN_SUFFIX


def session_id_of(file_name: str) -> str | None:
    """Return the session id of an active segment's file name, or None for any other file."""
    if not file_name.endswith(ACTIVE_SUFFIX):
        return None
    session_id = file_name[: -len(ACTIVE_SUFFIX)]
    return session_id if is_safe_session_id(session_id) else None


def stored_session_id(file_name: str) -> str | None:
    """Return the session id of a session segment's file name, active or archived; None for any other file."""
    session_id = session_id_of(file_name)
    if session_id is None:
        archive = parse_archive_name(file_name)
        session_id = archive[0] if archive is not None else None
    return session_id


def archive_name(session_id: str, segment: int, *, compressed: bool = False) -> str:
    """Return the file name of a session's archived segment ``segment`` (``<id>.events.000042.jsonl``)."""
    if not is_safe_session_id(session_id):
        raise ValueError(f"unsafe session id {session_id!r}")
    if segment < 1:
        raise ValueError("segment numbers start at 1")
    return f"{session_id}.events.{segment:06d}.jsonl" + (".gz" if compressed else "")


def parse_archive_name(file_name: str) -> tuple[str, int, bool] | None:
    """Return ``(session id, segment, compressed)`` of an archive's file name, or None for any other file."""
    match = _ARCHIVE.search(file_name)
    if match is None:
        return None
    session_id = file_name[: match.start()]
    if not is_safe_session_id(session_id):
        return None
    return session_id, int(match.group(1)), match.group(2) is not None


def session_archive(session_id: str, number: int) -> Callable[[bool], str]:
    """Return a ``compressed -> file name`` function of one archived segment of a session."""
    # The id was validated when the caller got it; only the format is applied here (hot in listings).
    plain = f"{session_id}.events.{number:06d}.jsonl"
    packed = plain + ".gz"
    return lambda compressed: packed if compressed else plain


def rejects_archive_name(segment: int, *, compressed: bool = False, stem: str = REJECTS_STEM) -> str:
    """Return the file name of the rejects file's archived segment ``segment``."""
    return f"{stem}.{segment:06d}.jsonl" + (".gz" if compressed else "")


def rejects_archive(number: int, stem: str = REJECTS_STEM) -> Callable[[bool], str]:
    """Return a ``compressed -> file name`` function of one archived rejects segment."""
    return lambda compressed: rejects_archive_name(number, compressed=compressed, stem=stem)


def is_rejects_file(file_name: str) -> bool:
    """Tell whether ``file_name`` is an active rejects file (any share's)."""
    return _REJECTS_FILE.match(file_name) is not None


def is_rejects_state(file_name: str) -> bool:
    """Tell whether ``file_name`` is a rejects file's checkpoint (any share's)."""
    return _REJECTS_STATE.match(file_name) is not None


def parse_rejects_archive_name(file_name: str) -> tuple[int, bool] | None:
    """Return ``(segment, compressed)`` of a rejects archive's file name (any share's), or None."""
    match = _REJECTS_ARCHIVE.match(file_name)
    return None if match is None else (int(match.group(1)), match.group(2) is not None)


def state_name(session_id: str) -> str:
    """Return the checkpoint's file name (in ``state/``) of a validated session id."""
    if not is_safe_session_id(session_id):
        raise ValueError(f"unsafe session id {session_id!r}")
    return session_id + STATE_SUFFIX


def session_id_of_state(file_name: str) -> str | None:
    """Return the session id of a checkpoint's file name, or None for any other file."""
    if not file_name.endswith(STATE_SUFFIX):
        return None
    session_id = file_name[: -len(STATE_SUFFIX)]
    return session_id if is_safe_session_id(session_id) else None
