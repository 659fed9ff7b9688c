"""The session roots this collector has served, remembered so that a restart can repair them at once.

Clients name their root in each handshake, so without a memory a restarted collector would only look
at a root again when its next client connects. ``<state dir>/roots.json`` lists every root served
(with the uid that owns it); at start the collector repairs the torn last lines of their session
files before it says READY. The state directory is ``$GZ_IA_STATE_DIR``, else
``$XDG_STATE_HOME/gz-ia`` (``~/.local/state/gz-ia``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

__all__ = ["KnownRoots", "default_state_dir"]

log = logging.getLogger("gz_ia.collector")

GZ_IA_STATE_DIR = "GZ_IA_STATE_DIR"


def default_state_dir() -> Path:
    """Return ``$GZ_IA_STATE_DIR``, else ``$XDG_STATE_HOME/gz-ia``."""
    explicit = os.environ.get(GZ_IA_STATE_DIR)
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "gz-ia"


class _Entry(msgspec.Struct, frozen=True):
    path: str
    uid: int


class KnownRoots:
    """A small persistent set of ``(root path, owner uid)``."""

    def __init__(self, directory: Path) -> None:
        self.file = directory / "roots.json"
        self._entries: dict[tuple[str, int], None] = {}
        try:
            for entry in msgspec.json.decode(self.file.read_bytes(), type=list[_Entry]):
                self._entries[(entry.path, entry.uid)] = None
        except FileNotFoundError:
            pass
        except (OSError, msgspec.DecodeError) as exc:
            log.warning("ignoring unreadable %s: %s", self.file, exc)

    def __iter__(self) -> Iterator[tuple[Path, int]]:
        return iter([(Path(path), uid) for path, uid in self._entries])

    def add(self, path: Path, uid: int) -> None:
        """Remember ``path``; written at once (atomically) the first time it is seen."""
        key = (str(path), uid)
        if key in self._entries:
            return
        self._entries[key] = None
        self._save()

    def discard(self, paths: list[tuple[Path, int]]) -> None:
        """Forget roots that no longer exist (a removed workspace, a test's temporary directory)."""
        before = len(self._entries)
        for path, uid in paths:
            self._entries.pop((str(path), uid), None)
        if len(self._entries) != before:
            self._save()

    def _save(self) -> None:
        data = json.dumps([{"path": p, "uid": u} for p, u in self._entries], indent=1).encode()
        temporary = self.file.with_name(f".{self.file.name}.{os.getpid()}.tmp")
        try:
            self.file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            temporary.write_bytes(data)
            os.replace(temporary, self.file)
        except OSError as exc:
            log.warning("cannot update %s: %s", self.file, exc)
            with contextlib.suppress(OSError):
                temporary.unlink()
