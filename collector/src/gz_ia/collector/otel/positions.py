"""Where ``gz-ia export otel`` stands: one small JSON position per session and signal, replaced atomically.

``$XDG_STATE_HOME/gz-ia/otel/<root key>/<session>.json`` holds the log records' position (the last
``seq`` the backend accepted and the reader's cursor after it); ``.../<root key>/traces/<session>.json``
holds the traces' (:class:`~gz_ia.collector.otel.spans.TraceState`, with the cycles still open).
A missing or unreadable file means "from the start": that can only re-send, never lose.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Final, TypeVar

import msgspec

from gz_ia.client import env

from .spans import TraceState

__all__ = ["TRACES_DIR", "CursorStore", "Position", "default_state_dir", "root_key"]

log = logging.getLogger("gz_ia.otel")

TRACES_DIR: Final = "traces"


class Position(msgspec.Struct, kw_only=True):
    """Where log export stands in one session: the last ``seq`` the backend accepted, and the cursor after it."""

    seq: int = 0
    cursor: str | None = None
    session_id: str = ""


_State = TypeVar("_State", Position, TraceState)
_encoder: Final = msgspec.json.Encoder()


def root_key(root: Path) -> str:
    """Return the directory name that keeps one root's positions apart from another's."""
    return hashlib.sha256(str(root.absolute()).encode()).hexdigest()[:16]


def default_state_dir() -> Path:
    """Return ``$XDG_STATE_HOME/gz-ia/otel`` (``~/.local/state/gz-ia/otel``)."""
    return env.state_home() / "gz-ia" / "otel"


class CursorStore:
    """The persisted export positions of one root, one small JSON file per session and signal."""

    def __init__(self, state_dir: Path, root: Path) -> None:
        self.directory = state_dir / root_key(root)
        self.traces = self.directory / TRACES_DIR
        self.traces.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker = self.directory / "root.txt"
        if not marker.exists():
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(str(root.absolute()) + "\n")

    def _path(self, kind: type[Position] | type[TraceState], session_id: str) -> Path:
        return (self.traces if kind is TraceState else self.directory) / f"{session_id}.json"

    def load(self, kind: type[_State], session_id: str) -> _State:
        """Return the session's position; a missing or unreadable file means from the start."""
        path = self._path(kind, session_id)
        try:
            return msgspec.json.decode(path.read_bytes(), type=kind)
        except FileNotFoundError:
            return kind(session_id=session_id)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            # Starting over can only re-send, never lose: the seq check still skips nothing new.
            log.warning("unreadable export position %s (%s): exporting the session from its start", path, exc)
            return kind(session_id=session_id)

    def save(self, position: Position | TraceState) -> None:
        """Replace the session's position atomically (temporary file, fsync, rename)."""
        path = self._path(type(position), position.session_id)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, _encoder.encode(position))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
