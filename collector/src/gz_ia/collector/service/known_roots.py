"""The session roots this collector has served, remembered so that a restart can repair them at once.

Clients name their root in each handshake, so without a memory a restarted collector would only look
at a root again when its next client connects. ``<state dir>/roots.json`` lists every root served,
with the uid that owns it and the socket of the collector that served it last; at start a collector
takes the roots it served (their lock, :mod:`..storage.root_lock`) and repairs the torn last lines of
their session files before it says READY. Two collectors of one user share the file: each takes only
the roots served through its own socket. The state directory is ``$GZ_IA_STATE_DIR``, else
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

from gz_ia.client import env

__all__ = ["KnownRoots", "default_state_dir"]

log = logging.getLogger("gz_ia.collector")


def default_state_dir() -> Path:
    """Return ``$GZ_IA_STATE_DIR``, else ``$XDG_STATE_HOME/gz-ia``."""
    return env.state_dir()


class _Entry(msgspec.Struct, frozen=True):
    path: str
    uid: int
    socket: str = ""
    """The socket of the collector that served the root last; empty in files of earlier versions."""


class KnownRoots:
    """A small persistent map of ``(root path, owner uid)`` to the socket that served it last."""

    def __init__(self, directory: Path) -> None:
        self.file = directory / "roots.json"
        self._entries: dict[tuple[str, int], str] = {}
        try:
            for entry in msgspec.json.decode(self.file.read_bytes(), type=list[_Entry]):
                self._entries[(entry.path, entry.uid)] = entry.socket
        except FileNotFoundError:
            pass
        except (OSError, msgspec.DecodeError) as exc:
            log.warning("ignoring unreadable %s: %s", self.file, exc)

    def __iter__(self) -> Iterator[tuple[Path, int, str]]:
        return iter([(Path(path), uid, socket) for (path, uid), socket in self._entries.items()])

    def served_through(self, sockets: list[str]) -> list[tuple[Path, int]]:
        """The roots served last through one of ``sockets``, or by a collector that did not say."""
        ours = {os.path.realpath(socket) for socket in sockets}
        return [(path, uid) for path, uid, socket in self if not socket or os.path.realpath(socket) in ours]

    def add(self, path: Path, uid: int, socket: str = "") -> None:
        """Remember that ``path`` is served through ``socket``; written at once (atomically) when new."""
        key = (str(path), uid)
        if self._entries.get(key) == socket:
            return
        self._entries[key] = socket
        self._save()

    def discard(self, paths: list[tuple[Path, int]]) -> None:
        """Forget roots that no longer exist (a removed workspace, a test's temporary directory)."""
        before = len(self._entries)
        for path, uid in paths:
            self._entries.pop((str(path), uid), None)
        if len(self._entries) != before:
            self._save()

    def _save(self) -> None:
        entries = [{"path": path, "uid": uid, "socket": socket} for (path, uid), socket in self._entries.items()]
        data = json.dumps(entries, indent=1).encode()
        temporary = self.file.with_name(f".{self.file.name}.{os.getpid()}.tmp")
        try:
            self.file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            temporary.write_bytes(data)
            os.replace(temporary, self.file)
        except OSError as exc:
            log.warning("cannot update %s: %s", self.file, exc)
            with contextlib.suppress(OSError):
                temporary.unlink()
