"""The wire protocol between agents and the collector (documented in ``docs/protocol.md``).

A ``SOCK_STREAM`` Unix socket carries frames: a 4-byte big-endian body length, then a MessagePack
body holding one tagged message Struct. The first frame a client sends is :class:`Hello`; then any
number of :class:`Batch` frames, each carrying many events. The collector answers a Hello with
:class:`Welcome` and every Batch, in order, with one :class:`Verdicts`. A client that offers to
route (``Hello.routes``) and is told by the Welcome that the collector has several shares precedes
each Batch with a :class:`Route` frame naming the share that owns all of its events
(:func:`owner_of`), which gets no reply; without routes, each Batch must hold one share's sessions.
A frame the collector cannot accept gets an :class:`Error`; a ``fatal`` one is followed by the
collector closing the connection.

Only the envelope is tagged, never :class:`~gz_ia.client.schema.LogEvent`, so stored lines carry no
``type`` key. Encoders and decoders are built once here and reused.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import msgspec

from .errors import GzIaError
from .limits import MAX_FRAME, PROTOCOL_VERSION
from .reasons import RejectReason

__all__ = [
    "HEADER_SIZE",
    "MAX_BATCH_EVENTS",
    "MAX_EVENT_BYTES",
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "Batch",
    "Cancel",
    "ClientMessage",
    "Collect",
    "CollectorMessage",
    "Ended",
    "Error",
    "FrameReader",
    "FrameTooLarge",
    "Frames",
    "Hello",
    "Lagged",
    "LiveMessage",
    "Owners",
    "Query",
    "RejectReason",
    "Rejection",
    "Report",
    "Route",
    "Subscribe",
    "Subscribed",
    "Verdicts",
    "Welcome",
    "encode_frame",
    "owner_of",
]

MAX_BATCH_EVENTS: Final = 4096
HEADER_SIZE: Final = 4
_HEADER: Final = struct.Struct(">I")


# --- client -> collector -------------------------------------------------------------------------


class Hello(msgspec.Struct, tag="hello", kw_only=True):
    """First frame of a connection: who is sending, and into which session root.

    ``producer`` is a random id per client instance (per process after a fork) that, with the
    per-producer event number, makes delivery idempotent. ``root`` is the absolute path of the
    ``.harness`` directory the events go to.
    """

    proto: int
    producer: str
    pid: int
    root: str
    program: str = ""
    routes: bool = False
    """The client will route its batches (:class:`Route`) if the Welcome names several shares;
    then it sends nothing but Route + Batch pairs after the Welcome."""


class Batch(msgspec.Struct, tag="batch", kw_only=True):
    """Events numbered ``first``, ``first + 1``, … by their producer, as pre-encoded bodies.

    ``verdicts=True`` asks for each accepted event's ``seq``; otherwise the reply only lists
    rejections (cheaper when nobody waits for the answer).
    """

    first: int
    events: list[msgspec.Raw]
    verdicts: bool = False


class Route(msgspec.Struct, tag="route", kw_only=True):
    """Sent before a Batch by a client that routes: every event of that batch belongs to ``share``.

    A sharded collector hands the batch to that share unread. No reply; an event of another share is
    rejected ``misrouted``. A client that does not route has each batch routed by the front, which
    refuses (``misrouted``) a batch whose sessions belong to several shares.
    """

    share: int


def owner_of(session_id: str, shares: int) -> int:
    """Which of ``shares`` share processes owns ``session_id``: the same in every process and run."""
    return zlib.crc32(session_id.encode()) % shares


_OWNERS_KEPT: Final = 65_536
"""Session ids an :class:`Owners` remembers before it forgets them all at once."""


class Owners(dict[str, int]):
    """:func:`owner_of` for one number of shares, remembered per session id.

    A lookup costs half of hashing the id again, and it runs for every event of every batch (in
    every share, and in a client that routes). Bounded: forgotten all at once past ``_OWNERS_KEPT``.
    """

    def __init__(self, shares: int) -> None:
        super().__init__()
        self.shares = shares

    def __missing__(self, session_id: str) -> int:
        if len(self) >= _OWNERS_KEPT:
            self.clear()
        owner = self[session_id] = owner_of(session_id, self.shares)
        return owner


class Query(msgspec.Struct, tag="query", kw_only=True):
    """Ask the collector about itself instead of sending events (``gz-ia status``)."""

    what: str = "status"


class Collect(msgspec.Struct, tag="collect", kw_only=True):
    """Ask the collector to apply retention to a root now (``gz-ia gc``), answered by a
    :class:`Report` ``{"gc": ...}``: it deletes in its own writer, with its running retention
    settings, and never a session it is writing."""

    root: str
    older_than: float = 0.0
    """Remove whole sessions idle for longer than this many seconds (0: none)."""
    vacuum_bytes: int = 0
    """Delete the oldest archives until the root takes at most this many bytes (0: no such limit)."""
    vacuum_seconds: float = 0.0
    """Delete archives older than this many seconds (0: no such limit)."""
    dry_run: bool = False


class Subscribe(msgspec.Struct, tag="subscribe", kw_only=True):
    """Ask for the events written to ``root`` from now on, or replayed from ``since_seq`` (needs no hello).

    ``since_seq`` and ``epoch`` are those of a frame received earlier: the frames after it still
    buffered are replayed, then the subscription goes on live; without ``since_seq``, only what is
    written from now on comes. ``sessions`` (with ``subtree``: and their subagents) and ``matches``
    (``FIELD=VALUE``, as ``gz-ia logs`` takes them) narrow it. Answered by :class:`Subscribed`, then
    :class:`Frames` and :class:`Lagged` until :class:`Cancel` or the connection closes.
    """

    root: str
    since_seq: int | None = None
    epoch: str = ""
    sessions: list[str] | None = None
    subtree: bool = False
    matches: list[str] = []


class Cancel(msgspec.Struct, tag="cancel", kw_only=True):
    """End one subscription of this connection (closing the connection ends them all)."""

    subscription: int


# --- collector -> client -------------------------------------------------------------------------


class Welcome(msgspec.Struct, tag="welcome", kw_only=True):
    """Answer to :class:`Hello`: the collector's protocol and limits."""

    proto: int
    version: str
    max_frame: int = MAX_FRAME
    max_batch: int = MAX_BATCH_EVENTS
    shares: int = 1
    """How many share processes divide the sessions; above 1, a client that offered to route does."""


class Rejection(msgspec.Struct, array_like=True):
    """One refused event of a batch: its index in the batch, the reason and a readable sentence."""

    index: int
    reason: RejectReason
    detail: str


class Verdicts(msgspec.Struct, tag="verdicts", kw_only=True):
    """Answer to one :class:`Batch`, sent once every accepted event of it is written.

    ``seqs`` (only when asked for) holds one entry per event: its session ``seq``, ``0`` for a
    rejected event, and ``-1`` for a resend the collector had already written.
    """

    first: int
    count: int
    seqs: list[int] = []
    rejected: list[Rejection] = []


class Error(msgspec.Struct, tag="error", kw_only=True):
    """A frame the collector could not take as a whole; ``fatal`` means it closes the connection."""

    reason: RejectReason
    detail: str
    fatal: bool = False


class Report(msgspec.Struct, tag="report", kw_only=True):
    """Answer to :class:`Query`: a JSON-compatible document (see ``gz-ia status``)."""

    data: dict[str, object]


class Subscribed(msgspec.Struct, tag="subscribed", kw_only=True):
    """Answer to :class:`Subscribe`: its id, the collector's epoch and the source's newest seq."""

    subscription: int
    epoch: str
    newest_seq: int


class Frames(msgspec.Struct, tag="frames", kw_only=True):
    """Written events of a subscription, in seq order: ``seqs[i]`` numbers ``lines[i]`` (a stored
    JSON line, without its newline) in the source; seqs skip only the events the filters left out."""

    subscription: int
    seqs: list[int]
    lines: list[bytes]


class Lagged(msgspec.Struct, tag="lagged", kw_only=True):
    """Frames ``from_seq`` to ``resume_seq - 1`` will not come (evicted before this subscriber read
    them); delivery goes on at ``resume_seq``. ``epoch_changed``: the ``since_seq`` asked for was of
    another epoch, or came without one, and delivery starts with the oldest frame still buffered."""

    subscription: int
    from_seq: int
    resume_seq: int
    epoch_changed: bool = False


class Ended(msgspec.Struct, tag="ended", kw_only=True):
    """The last frame of a cancelled subscription."""

    subscription: int


ClientMessage = Hello | Batch | Route | Query | Collect | Subscribe | Cancel
CollectorMessage = Welcome | Verdicts | Error | Report
LiveMessage = Subscribed | Frames | Lagged | Ended | Error
"""What a subscribing connection receives (:data:`live_message_decoder`)."""

_encoder: Final = msgspec.msgpack.Encoder()

MAX_EVENT_BYTES: Final = MAX_FRAME - len(
    _encoder.encode(Batch(first=2**64 - 1, events=[msgspec.Raw(b"")], verdicts=True))
)
"""Largest encoded event a Batch frame can carry (alone, under any producer number). An event within
the schema's limits is far smaller; the client refuses a larger one (``frame_too_large``) by itself."""


def encode_frame(message: ClientMessage | CollectorMessage | LiveMessage) -> bytes:
    """Encode ``message`` as one frame: length prefix and MessagePack body.

    Raises:
        FrameTooLarge: the body exceeds :data:`MAX_FRAME`.
    """
    buffer = bytearray(HEADER_SIZE)
    _encoder.encode_into(message, buffer, HEADER_SIZE)
    size = len(buffer) - HEADER_SIZE
    if size > MAX_FRAME:
        raise FrameTooLarge(size)
    _HEADER.pack_into(buffer, 0, size)
    return bytes(buffer)


class FrameTooLarge(GzIaError, ValueError):
    """A frame announced or produced a body larger than :data:`MAX_FRAME`: the sender's; ``.size``."""

    def __init__(self, size: int) -> None:
        super().__init__(f"frame body of {size} bytes exceeds the {MAX_FRAME}-byte limit")
        self.size = size


class FrameReader:
    """Cut a byte stream into frame bodies, without copying more than needed.

    ``feed()`` returns every complete body received so far and keeps any partial frame for the next
    call. A length prefix above ``max_frame`` raises :class:`FrameTooLarge`: after it the stream
    cannot be trusted, so the caller ends the connection.
    """

    __slots__ = ("_buffer", "_max_frame")

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buffer = bytearray()
        self._max_frame = max_frame

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a complete frame."""
        return len(self._buffer)

    def detach(self) -> bytes:
        """Return the bytes of the frame not yet complete, and forget them (to pass the rest of the
        stream on unparsed)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data`` and return the complete frame bodies it finished."""
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        offset = 0
        end = len(buffer)
        while end - offset >= HEADER_SIZE:
            (size,) = _HEADER.unpack_from(buffer, offset)
            if size > self._max_frame:
                raise FrameTooLarge(size)
            start = offset + HEADER_SIZE
            if end - start < size:
                break
            frames.append(bytes(buffer[start : start + size]))
            offset = start + size
        if offset:
            del buffer[:offset]
        return frames


client_message_decoder: Final = msgspec.msgpack.Decoder(ClientMessage)
route_decoder: Final = msgspec.msgpack.Decoder(Route)
collector_message_decoder: Final = msgspec.msgpack.Decoder(CollectorMessage)
live_message_decoder: Final = msgspec.msgpack.Decoder(LiveMessage)
