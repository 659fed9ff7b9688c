"""What the client reports about delivery: a verdict for each event a caller waits for, and counters.

Its own module, light to import: the package's public names include these types, while the machinery
that delivers (:mod:`._sender`) is imported only when a client is made.
"""

from __future__ import annotations

import msgspec

__all__ = ["SenderStats", "Verdict"]


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
