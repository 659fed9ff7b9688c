"""How the fleet names things on the stream and on the hub: subjects, message ids, producers, sessions.

One subject per machine and root (``gzia.events.<host>.<root id>``) lets a NATS account allow a
machine to publish only as itself (``gzia.events.<host>.>``), and lets hubs split the machines
between them by subject. A message carries one session's stored lines from ``seq`` first to last; its
id (``<host>/<root id>/<session>/<first>-<last>``, ``.../<seq>`` for one line) is what JetStream
de-duplicates a re-publish by. The stored ``seq`` never changes, so a resend of the same lines carries
the same id; a resend cut differently (after a crash) has another id, and the hub drops what it
already holds of it line by line.
"""

from __future__ import annotations

import hashlib
from typing import Final

from gz_ia.client.schema import MAX_SESSION_ID_LENGTH

__all__ = [
    "HEADER_AFTER",
    "HEADER_HOST",
    "MSG_ID",
    "SUBJECT_PREFIX",
    "hub_session_id",
    "message_id",
    "parse_subject",
    "producer_of",
    "subject",
]

SUBJECT_PREFIX: Final = "gzia.events"
MSG_ID: Final = "Nats-Msg-Id"
HEADER_HOST: Final = "Gz-Ia-Host"
"""The host a message claims to come from; a hub refuses it unless the subject names the same."""
HEADER_AFTER: Final = "Gz-Ia-After"
"""The ``seq`` of the event shipped before a message's first line in its session (0 for the first): a
hub writes a message only once it holds that one, so a message the stream stored out of order waits
for its gap. Each further line of a message follows the line before it."""


def subject(host: str, root_id: str) -> str:
    """The subject a machine publishes one root's events to."""
    return f"{SUBJECT_PREFIX}.{host}.{root_id}"


def parse_subject(name: str) -> tuple[str, str] | None:
    """``(host, root id)`` of a fleet subject, or None when it is not one."""
    parts = name.split(".")
    if len(parts) != 4 or ".".join(parts[:2]) != SUBJECT_PREFIX or not parts[2] or not parts[3]:
        return None
    return parts[2], parts[3]


def message_id(host: str, root_id: str, session_id: str, first: int, last: int | None = None) -> str:
    """The id JetStream de-duplicates a re-publish by: the same for every resend of the same stored
    events (``first`` to ``last`` of one session)."""
    if last is None or last == first:
        return f"{host}/{root_id}/{session_id}/{first}"
    return f"{host}/{root_id}/{session_id}/{first}-{last}"


def producer_of(host: str, root_id: str) -> str:
    """The producer a hub writes one machine's root as (32 hex digits, as the socket asks): stable across
    restarts, so the collector's own watermark, read back from the files, drops a redelivery."""
    return hashlib.sha256(f"gz-ia fleet {host} {root_id}".encode()).hexdigest()[:32]


def hub_session_id(host: str, session_id: str) -> str:
    """The session's id on a hub: ``<host>.<id>``, so two machines' sessions of one id are kept apart
    (a host has no dot, so the first dot splits them). An id too long for that is shortened to a
    digest, the same every time, so a subagent's parent id still names its parent."""
    qualified = f"{host}.{session_id}"
    if len(qualified) <= MAX_SESSION_ID_LENGTH:
        return qualified
    return f"{host}.{hashlib.sha256(session_id.encode()).hexdigest()[:40]}"
