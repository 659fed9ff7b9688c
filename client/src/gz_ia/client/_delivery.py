"""What the client reports about delivery: a verdict for each event a caller waits for, and counters.

Its own module, light to import: the package's public names include these types, while the machinery
that delivers (:mod:`._sender`) is imported only when a client is made.
"""

from __future__ import annotations

import msgspec

__all__ = ["Counters", "SenderStats", "Verdict"]


class Verdict(msgspec.Struct, frozen=True):
    """The collector's answer for one accepted event: its ``seq`` in the session file.

    ``duplicate`` is true when the event had already been written by an earlier attempt.
    """

    seq: int
    duplicate: bool = False


class SenderStats(msgspec.Struct, frozen=True):
    """Counters of one client, readable at any time: what happened to the events it was given.

    ``spooled`` counts the events written to the disk spool and not yet delivered: this client
    sends them once the collector answers (those on their way again are ``unacknowledged`` too),
    and what is left at :meth:`~gz_ia.client.Client.close` a collector delivers when it adopts the
    spool. ``invalid`` counts calls that made no event.
    """

    queued: int
    unacknowledged: int
    accepted: int
    rejected: int
    dropped: int
    invalid: int
    reconnects: int
    connected: bool
    last_error: str | None
    spooled: int = 0


class Counters:
    """The sender's counts and its last error, as its parts keep them (under the sender's lock).

    Mutable and plain: each part of the sender (:mod:`._queue`, :mod:`._losses`, :mod:`._batcher`,
    :mod:`._sender`) counts here what happened to the events it handled; :meth:`snapshot` is what
    ``stats()`` returns.
    """

    __slots__ = (
        "accepted",
        "connected",
        "dropped",
        "invalid",
        "last_error",
        "permanent_error",
        "reconnects",
        "rejected",
        "spooled",
    )

    def __init__(self) -> None:
        self.accepted = 0
        self.rejected = 0
        self.dropped = 0
        self.spooled = 0
        self.invalid = 0
        self.reconnects = 0
        self.connected = False
        self.last_error: str | None = None
        self.permanent_error: str | None = None
        """Set when the collector refused this root for good: nothing more is sent until a reconnect."""

    def snapshot(self, *, queued: int, unacknowledged: int) -> SenderStats:
        return SenderStats(
            queued=queued,
            unacknowledged=unacknowledged,
            accepted=self.accepted,
            rejected=self.rejected,
            dropped=self.dropped,
            spooled=self.spooled,
            invalid=self.invalid,
            reconnects=self.reconnects,
            connected=self.connected,
            last_error=self.last_error,
        )
