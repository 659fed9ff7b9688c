"""Where shipping stands in one root: per session, the last ``seq`` the stream acknowledged and the
reader's cursor right after it.

Kept in ``<state dir>/fleet/ship-<root id>.json``, replaced atomically (written, synced, renamed),
and only ever moved to what JetStream acknowledged. A crash between an acknowledgement and the save
makes the next start publish those events again under the same ids, which the stream drops within
its de-duplication window and a hub drops after it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import msgspec

__all__ = ["Shipped", "ShippingPositions"]

log = logging.getLogger("gz_ia.collector")


class Shipped(msgspec.Struct, array_like=True):
    """One session's position: the last acknowledged ``seq`` and the cursor after it."""

    seq: int
    cursor: str


class _File(msgspec.Struct):
    root: str
    sessions: dict[str, Shipped] = {}


class ShippingPositions:
    """The positions of one root, loaded at start and saved after every acknowledged round."""

    def __init__(self, directory: Path, root: Path, root_id: str) -> None:
        self.file = directory / f"ship-{root_id}.json"
        self.root = root
        self.sessions: dict[str, Shipped] = {}
        try:
            loaded = msgspec.json.decode(self.file.read_bytes(), type=_File)
            if loaded.root == str(root):
                self.sessions = loaded.sessions
        except FileNotFoundError:
            pass
        except (OSError, msgspec.DecodeError) as exc:
            # Shipping from the start again is safe: every resend carries its id, and hubs drop what they hold.
            log.warning("fleet: unreadable %s (%s): shipping this root from its start", self.file, exc)

    def save(self) -> None:
        """Replace the file atomically and durably."""
        self.file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = msgspec.json.encode(_File(root=str(self.root), sessions=self.sessions))
        temporary = self.file.with_name(f".{self.file.name}.{os.getpid()}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.file)
        with contextlib.suppress(OSError):
            directory = os.open(self.file.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
