"""Export holds: which archived segments an exporter has not sent yet, so retention keeps them (up to a bound).

An exporter (``gz-ia export otel``) reads a root from outside the collector and keeps its positions
in its own state directory. After each pass it writes, per session, the first segment it still
needs into ``<root>/state/export-holds/<exporter key>.json``; retention reads every such file and
spares those segments from ``max_archives`` and ``max_age_days`` (never from ``max_root_bytes``,
the disk guard), at most ``max_held_archives`` per session. A session missing from the file is not
held; a file that cannot be read holds nothing, so a broken exporter can never stop retention.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Final

import msgspec

from gz_ia.client.schema import is_safe_session_id

from .roots import RootDirs, write_file_atomically

__all__ = ["HOLDS_DIR", "hold_name", "read_holds", "write_hold"]

HOLDS_DIR: Final = "export-holds"
"""A directory of its own, so that retention lists a few hold files, not every checkpoint."""
_SUFFIX: Final = ".json"
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_HOLD_BYTES: Final = 64 << 20


class _Hold(msgspec.Struct, kw_only=True):
    """One exporter's hold file: the first segment it still needs, per session."""

    sessions: dict[str, int] = msgspec.field(default_factory=dict)


def hold_name(key: str) -> str:
    """Return the file name of the exporter ``key``'s hold (``key``: letters, digits, ``-``, ``_``)."""
    if not key or not all(ch.isalnum() or ch in "-_" for ch in key):
        raise ValueError(f"{key!r} is not a hold key")
    return f"{key}{_SUFFIX}"


def read_holds(dirs: RootDirs) -> dict[str, int]:
    """Return, per session, the lowest segment any exporter still needs (empty: nothing held)."""
    held: dict[str, int] = {}
    if dirs.state_fd is None:
        return held
    try:
        holds_fd = os.open(HOLDS_DIR, _DIR_FLAGS, dir_fd=dirs.state_fd)
    except OSError:
        return held  # no exporter ever held anything here
    try:
        for name in os.listdir(holds_fd):
            if name.startswith(".") or not name.endswith(_SUFFIX):
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=holds_fd)
            except OSError:
                continue
            try:
                hold = msgspec.json.decode(os.read(fd, _MAX_HOLD_BYTES), type=_Hold)
            except (OSError, msgspec.DecodeError, msgspec.ValidationError):
                continue
            finally:
                os.close(fd)
            for session_id, segment in hold.sessions.items():
                if segment >= 1:
                    held[session_id] = min(segment, held.get(session_id, segment))
    finally:
        os.close(holds_fd)
    return held


def write_hold(dirs: RootDirs, key: str, sessions: Mapping[str, int]) -> None:
    """Replace exporter ``key``'s hold atomically (nothing when the root has no ``state/`` directory)."""
    if dirs.state_fd is None:
        return
    body = msgspec.json.encode(
        _Hold(sessions={sid: segment for sid, segment in sessions.items() if is_safe_session_id(sid)})
    )
    with contextlib.suppress(FileExistsError):
        os.mkdir(HOLDS_DIR, 0o700, dir_fd=dirs.state_fd)
    holds_fd = os.open(HOLDS_DIR, _DIR_FLAGS, dir_fd=dirs.state_fd)
    try:
        write_file_atomically(holds_fd, hold_name(key), body, durable=False)
    finally:
        os.close(holds_fd)
