"""The load: the same events, pre-encoded for each system before any clock starts.

Every session belongs to exactly one of the sender connections (session ``s`` to sender ``s % N``),
so a session's events arrive in order and its READ → PENDING → FINISH cycles are valid for our
collector's stage protocol. Each sender interleaves its sessions round-robin, the hardest case for
per-file write batching and the same for every system. ``(action, stage)`` is unique within a session,
which is how verification proves that every event is on disk exactly once.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

import msgspec

from gz_ia.client.protocol import MAX_FRAME, PROTOCOL_VERSION, Batch, FrameReader, Hello, Owners, Route, encode_frame
from gz_ia.client.schema import LogEvent, Stage, Status

_CYCLE: Final = (Stage.READ, Stage.PENDING, Stage.FINISH)
_ACTIONS: Final = (
    "read the dependency manifests and lock files",
    "run the unit tests of the storage layer",
    "edit the writer to batch appends per session",
    "summarise the review comments for the planner",
)
BATCH_EVENTS: Final = 1024
"""Events per Batch frame: what the thin client sends under load is of this order (it caps at 4096)."""

_json: Final = msgspec.json.Encoder()
_msgpack: Final = msgspec.msgpack.Encoder()


def session_id(index: int, sessions: int) -> str:
    """The id of session ``index``: fixed width, so that every workload has the same event sizes."""
    return f"bench-{sessions}-{index:06d}"


def parent_of(session: str) -> str:
    """The parent session named by ``session``'s events (subagent events carry one; ~262 B lines)."""
    return "up-" + session


def make_event(session: str, k: int, *, base: datetime) -> LogEvent:
    """Build the ``k``-th event of ``session`` (cycles of READ, PENDING, FINISH OK)."""
    stage = _CYCLE[k % 3]
    return LogEvent(
        timestamp=base + timedelta(microseconds=k * 1013 + 17),
        session_id=session,
        parent_session_id=parent_of(session),
        action=f"task {k // 3:06d}: {_ACTIONS[(k // 3) % len(_ACTIONS)]}",
        stage=stage,
        status=Status.OK,
        agent="claude",
        role="benchmark-runner",
        duration_ms=(k * 37) % 5000 if stage is Stage.FINISH else None,
    )


LogCall = tuple[str, str | None, str, str, int | None]
"""The varying arguments of one ``log()`` call: session, parent, action, stage, duration."""


def log_calls(ids: list[str], per_session: int) -> list[LogCall]:
    """The ``log()`` arguments of ``per_session`` events for each of ``ids``, round-robin, prepared
    before any clock starts (an agent has its own strings at hand)."""
    base = datetime(2025, 11, 29, tzinfo=UTC)
    calls: list[LogCall] = []
    for k in range(per_session):
        for sid in ids:
            event = make_event(sid, k, base=base)
            calls.append((sid, event.parent_session_id, event.action, event.stage.value, event.duration_ms))
    return calls


def log_all(log: Callable[..., None], calls: list[LogCall]) -> None:
    """Make every call with the fields the load's events share (the measured loop of an agent)."""
    for sid, parent, action, stage, duration in calls:
        log(
            session_id=sid,
            parent_session_id=parent,
            action=action,
            stage=stage,
            agent="claude",
            role="benchmark-runner",
            duration_ms=duration,
        )


class Load(msgspec.Struct, kw_only=True):
    """One workload, pre-encoded per sender.

    ``json[i]`` is sender ``i``'s newline-delimited JSON (for the peers); ``frames[i]`` its Batch
    frames for our collector (without the Hello, which carries a per-connection producer id).
    """

    events: int
    sessions: int
    senders: int
    expected: dict[str, int]
    json_bytes: int
    json: list[bytes]
    frames: list[bytes]
    frame_events: list[int]


def build_load(events: int, sessions: int, senders: int, *, with_json: bool = True) -> Load:
    """Encode ``events`` events over ``sessions`` sessions for ``senders`` connections."""
    if events % sessions:
        raise ValueError("events must be a multiple of sessions")
    per_session = events // sessions
    base = datetime(2025, 11, 29, 12, 0, 0, tzinfo=UTC)
    ids = [session_id(s, sessions) for s in range(sessions)]
    json_parts: list[list[bytes]] = [[] for _ in range(senders)]
    frames: list[bytearray] = [bytearray() for _ in range(senders)]
    counts = [0] * senders
    for sender in range(senders):
        mine = ids[sender::senders]
        bodies: list[msgspec.Raw] = []
        lines = json_parts[sender]
        for k in range(per_session):
            for sid in mine:
                event = make_event(sid, k, base=base)
                bodies.append(msgspec.Raw(_msgpack.encode(event)))
                if with_json:
                    lines.append(_json.encode(event))
        counts[sender] = len(bodies)
        for start in range(0, len(bodies), BATCH_EVENTS):
            chunk = bodies[start : start + BATCH_EVENTS]
            frames[sender] += encode_frame(Batch(first=start + 1, events=chunk))
    json_blobs = [b"\n".join(parts) + b"\n" if parts else b"" for parts in json_parts]
    return Load(
        events=events,
        sessions=sessions,
        senders=senders,
        expected=dict.fromkeys(ids, per_session),
        json_bytes=sum(len(blob) for blob in json_blobs),
        json=json_blobs,
        frames=[bytes(frame) for frame in frames],
        frame_events=counts,
    )


def hello_frame(root: str, *, routes: bool = False) -> bytes:
    """A Hello frame with a fresh producer id, as one client connection would send."""
    return encode_frame(
        Hello(
            proto=PROTOCOL_VERSION,
            producer=secrets.token_hex(8),
            pid=os.getpid(),
            root=root,
            program="bench",
            routes=routes,
        )
    )


class _SessionOf(msgspec.Struct):
    session_id: str


_session_of: Final = msgspec.msgpack.Decoder(_SessionOf)
_batch_decoder: Final = msgspec.msgpack.Decoder(Batch)


def routed(frames: bytes, shares: int) -> bytes:
    """``frames`` as a client that routes sends them to a collector of ``shares`` shares, as the thin
    client does: each batch's events grouped by share (a session's keep their order), each group a
    Route frame and a Batch numbered on from the previous group."""
    if shares == 1:
        return frames
    owners = Owners(shares)
    out = bytearray()
    for body in FrameReader(MAX_FRAME).feed(frames):
        batch = _batch_decoder.decode(body)
        groups: list[list[msgspec.Raw]] = [[] for _ in range(shares)]
        for event in batch.events:
            groups[owners[_session_of.decode(event).session_id]].append(event)
        first = batch.first
        for share, group in enumerate(groups):
            if group:
                out += encode_frame(Route(share=share)) + encode_frame(Batch(first=first, events=group))
                first += len(group)
    return bytes(out)
