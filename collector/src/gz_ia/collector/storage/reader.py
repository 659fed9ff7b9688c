"""Reading sessions back (standard library, msgspec and gz_ia.client only)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import StoredEvent, is_safe_session_id

from ._layout import LayoutError, active_name, open_root

__all__ = ["SessionNotFound", "read_session_lines"]

_decoder: Final = msgspec.json.Decoder(StoredEvent)


class SessionNotFound(LookupError):
    """No file exists for the session id under the root."""


def read_session_lines(root: Path, session_id: str) -> Iterator[tuple[str, StoredEvent]]:
    """Yield ``(stored line, decoded event)`` for every complete line of a session, oldest first."""
    if not is_safe_session_id(session_id):
        raise SessionNotFound(f"{session_id!r} is not a valid session id")
    try:
        dirs = open_root(root, owner=None, create=False)
    except LayoutError as exc:
        raise SessionNotFound(str(exc)) from exc
    try:
        fd = os.open(active_name(session_id), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs.sessions_fd)
    except OSError as exc:
        raise SessionNotFound(f"no session {session_id!r} under {root}") from exc
    finally:
        dirs.close()
    with os.fdopen(fd, "rb") as file:
        for raw in file:
            if not raw.endswith(b"\n"):
                break  # a line still being written: never shown half
            yield raw[:-1].decode(), _decoder.decode(raw)
