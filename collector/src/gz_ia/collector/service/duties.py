"""What one collector process answers for, when it is a part of a collector rather than the whole.

A collector run as one process serves every session, measures its roots, adopts dead clients'
spools, remembers the roots it served and limits its connections: :data:`WHOLE`. A process that
serves part of the sessions beside others is given a :class:`Role` saying which of these it does,
so that the process's code has no branch of its own for that case.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from gz_ia.collector.ingest.rules import misrouted
from gz_ia.collector.ingest.validation import DecodedBatch
from gz_ia.collector.storage.names import REJECTS_STEM

__all__ = ["WHOLE", "Role", "reject_unserved"]


def _not_served(session_id: str) -> str:
    return f"session {session_id!r} is not served by this collector process"


@dataclass(frozen=True, kw_only=True)
class Role:
    """The duties of one collector process; the defaults are those of a whole collector."""

    serves: Mapping[str, bool] | None = None
    """Whether this process serves a session, by session id (looked up per event, so a dict that
    fills itself in on a miss): an event of another is rejected ``misrouted``, and gc removes only
    these sessions' files. None: every session."""
    unserved: Callable[[str], str] = _not_served
    """The detail of the ``misrouted`` rejection of an event of a session this process does not serve."""
    rejects_stem: str = REJECTS_STEM
    """The name (without ``.jsonl``) of the rejects file it appends to: every file has one writer."""
    root_wide: bool = True
    """It does the work that concerns a root as a whole: measures its size, applies its size budget,
    trims its rejects files."""
    adopts_spools: bool = True
    """It adopts the spools of clients that died (see :mod:`.adoption`)."""
    records_known_roots: bool = True
    """It keeps the known-roots file of the roots it served; otherwise it only reads it."""
    repairs_known_roots: bool = True
    """At start, it takes the known roots and repairs their torn last lines before serving."""
    limits_connections: bool = True
    """It applies the connection limits (see :mod:`.admission`)."""
    lock_holder: int | None = None
    """The pid of the process that holds the roots' locks for this one (see .storage.root_lock)."""
    open_actions_divisor: int = 1
    """``max_open_actions_total`` is divided by this: the sessions are spread evenly over this many
    processes, each holding its part of the bound."""
    started_message: str | None = None
    """Logged once serving, instead of the collector's "ready" line, which another process gives."""

    def open_actions_total(self, configured: int) -> int:
        """This process's part of ``max_open_actions_total``."""
        return max(1, configured // self.open_actions_divisor)


WHOLE = Role()
"""A collector that is one process."""


def reject_unserved(batch: DecodedBatch, role: Role) -> None:
    """Reject every event of ``batch`` whose session this process does not serve (``misrouted``): a
    client's routing bug must cost those events loudly, never write them in the wrong process."""
    serves = role.serves
    if serves is None:
        return
    for index, event in enumerate(batch.events):
        if event is not None and not serves[event.session_id]:
            batch.events[index] = None
            batch.raw[index] = msgspec.msgpack.encode(event)  # for the rejects file
            batch.rejections[index] = misrouted(role.unserved(event.session_id))
