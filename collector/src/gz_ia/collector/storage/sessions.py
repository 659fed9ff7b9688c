"""What the writer keeps in memory per root and per session between writes.

A :class:`SessionState` is the session's active file (an :class:`.open_files.AppendFile`) and its
tally (:class:`.tally.SessionTally`), which staging updates in place; a :class:`RootStore` is one
root's directories, its sessions' states and its rejects file. The files stay the source of truth:
a state dropped from memory is rebuilt from them (:mod:`.recovery`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import LogEvent

from .checkpoints import Checkpoint, encode_checkpoint
from .names import REJECTS_STEM, active_name, state_name
from .open_files import AppendFile
from .roots import RootDirs, write_file_atomically
from .tally import QUIET_GAP, TALLY_FIELDS, SessionTally

__all__ = ["RootStore", "SessionState"]

log = logging.getLogger("gz_ia.collector")

_NEVER: Final = datetime.min.replace(tzinfo=UTC)
"""Before every timestamp: a session's ``newest_stamp`` before its first event."""
_json: Final = msgspec.json.Encoder()


def _format_timestamp(timestamp: datetime) -> str:
    """``timestamp`` as the session file spells it (RFC 3339, as msgspec encodes it)."""
    return _json.encode(timestamp)[1:-1].decode()


def _parsed(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return _NEVER


class RootStore:
    """One session root: its directories, its sessions' state and its rejects file."""

    __slots__ = ("dirs", "rejects", "rejects_stem", "removed", "sessions")

    def __init__(self, dirs: RootDirs, rejects_stem: str = REJECTS_STEM) -> None:
        self.dirs = dirs
        self.sessions: dict[str, SessionState] = {}
        self.rejects_stem = rejects_stem
        self.rejects = AppendFile(dirs.root_fd, rejects_stem + ".jsonl")
        self.removed = False
        """Set once its directories were found deleted: nothing more may be staged into it (its
        open files are unlinked ones, where lines would be written and lost)."""

    @property
    def path(self) -> Path:
        """The root's path as the client named it."""
        return self.dirs.path


class SessionState(AppendFile, SessionTally):
    """What the collector knows about one session between writes: its file and its tally.

    Staging an event updates the tally in place, except two timestamps kept as ``datetime`` and
    formatted into ``last_time`` and ``newest_time`` only when a checkpoint needs them.
    """

    __slots__ = (
        *TALLY_FIELDS,
        "last_stamp",
        "newest_stamp",
        "root",
        "segment_seq",
        "session_id",
        "snapshot_at",
        "snapshot_size",
    )

    def __init__(self, root: RootStore, session_id: str) -> None:
        super().__init__(root.dirs.sessions_fd, active_name(session_id))
        self.root = root
        self.session_id = session_id
        self.clear_tally()
        self.segment_seq = 0
        self.last_stamp: datetime | None = None
        """Timestamp of the last event staged, not yet formatted into ``last_time``."""
        self.newest_stamp = _NEVER
        """The greatest timestamp staged (one comparison per event: timestamps may go backwards)."""
        self.snapshot_at = 0.0
        self.snapshot_size = -1
        """Active-segment size at the last checkpoint (-1: none for this segment)."""

    def note_first(self, event: LogEvent) -> None:
        """Take the session's summary fields from its first event."""
        self.first_time = _format_timestamp(event.timestamp)
        self.quiet_after = event.timestamp + QUIET_GAP  # no quiet point in a session's first second
        self.parent = event.parent_session_id or ""
        self.tree_root = event.root_session_id or ""
        self.agent = event.agent

    def restore(self, fold: SessionTally) -> None:
        """Take the tally rebuilt by recovery."""
        self.copy_tally(fold)
        self.last_stamp = None
        self.newest_stamp = _parsed(self.newest_time) if self.newest_time else _NEVER

    def checkpoint(self, *, offset: int | None = None, started: float | None = None) -> Checkpoint:
        """Return the state as of the end of what is staged, written at ``offset`` of the active file.

        With no pending bytes the default ``offset`` (the file's size) is that end. A checkpoint
        must never cover lines that are not in the file: recovery would take their producers'
        numbers as delivered and drop the clients' resends as duplicates.
        """
        if self.last_stamp is not None:
            self.last_time = _format_timestamp(self.last_stamp)
            self.last_stamp = None
        if self.newest_time is not None and self.newest_stamp is not _NEVER:
            self.newest_time = _format_timestamp(self.newest_stamp)
        return self.tally_checkpoint(
            segment=self.segment,
            offset=self.size if offset is None else offset,
            segment_seq=self.segment_seq,
            started=self.started if started is None else started,
        )

    def save_checkpoint(self, now: float, checkpoint: Checkpoint | None = None) -> None:
        """Write ``checkpoint`` (default: the state now, which must have nothing pending) to ``state/``."""
        dirs = self.root.dirs
        if dirs.state_fd is None:
            return
        try:
            write_file_atomically(
                dirs.state_fd,
                state_name(self.session_id),
                encode_checkpoint(checkpoint if checkpoint is not None else self.checkpoint()),
                durable=False,
            )
        except OSError as exc:
            log.warning("cannot write the checkpoint of %s: %s", self.session_id, exc)
        self.snapshot_at = now
        self.snapshot_size = self.size
