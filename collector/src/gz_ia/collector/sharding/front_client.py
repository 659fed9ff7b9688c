"""One client of a sharded collector's front: its frames handed to the shares, their replies passed back.

The front opens one connection to every share for each client (a :class:`ShareLink` each), passes
them the client's hello, and each share answers it. Every batch after the hello goes to the one
share that owns its sessions (:func:`gz_ia.client.protocol.owner_of`), after a Route frame naming
that share:

- A client that routes (its hello offers ``routes``, as the thin client's does) sends each batch
  after a Route frame of its own; the front passes both on as they are, without decoding the batch.
- For any other client the front reads the session ids of each batch (nothing else of it) and
  routes it itself when they all belong to one share; a batch mixing shares is refused with a
  ``misrouted`` error that is not fatal: the client keeps its connection, and no event of the
  batch is written.

A query (status, metrics, gc) before any hello goes to every share, and their answers are merged
into one (:func:`.metrics.merge_replies`). The replies reach the client in the order of its frames, each
from where that frame went (:meth:`FrontClient.merge`).

The delivery guarantees hold because each session lives in exactly one share, which sees each
producer's batches in order on one connection and closes that connection when a write fails
(docs/architecture.md, step 6). When a share fails or exits, the front closes the client's
connection once the earlier replies are passed on; the client resends what has no verdict. While
a share is down (restarting), a new client is refused the same way, except ``gz-ia status``, which
the front answers alone: unhealthy, with the shares that are down.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import socket
from collections import deque
from typing import TYPE_CHECKING, Final, Protocol

import msgspec

from gz_ia.client.protocol import (
    HEADER_SIZE,
    MAX_FRAME,
    Batch,
    Cancel,
    Collect,
    Error,
    FrameReader,
    FrameTooLarge,
    Hello,
    Query,
    RejectReason,
    Report,
    Route,
    Subscribe,
    client_message_decoder,
    encode_frame,
    route_decoder,
)
from gz_ia.collector.service.admission import admit

from .metrics import merge_replies
from .share_link import CollectorMessage, ShareLink
from .wire import peer_frame

if TYPE_CHECKING:
    from gz_ia.client.protocol import Owners
    from gz_ia.collector.config import CollectorConfig
    from gz_ia.collector.metrics import Metrics
    from gz_ia.collector.service.admission import ConnectionLimits

    from .shares import Shares

__all__ = ["EVERY", "MIXED_BATCH", "FrontClient", "FrontServices"]

log = logging.getLogger("gz_ia.collector")

_CONNECT_RETRIES: Final = 500
_CONNECT_RETRY_DELAY: Final = 0.01
"""Up to 5 s of retries while a share's accept queue is full."""
_SHARE_LOST: Final = "a share of the collector stopped; reconnect and resend"
EVERY: Final = -1
"""In :attr:`FrontClient.order`: the frame went to every share, whose answers are merged."""
MIXED_BATCH: Final = (
    "this batch holds events of sessions of different shares of the collector ({shares}), which "
    "takes a batch into one share only: offer to route in the hello (Hello.routes) and send each "
    "batch after a Route frame naming its share, or send the events of one session per batch"
)


class _SessionOf(msgspec.Struct, gc=False):
    """Just the session id of an event: the other fields are skipped without being built."""

    session_id: str


class _BatchSessions(msgspec.Struct, tag="batch", kw_only=True, gc=False):
    """A batch with only its events' session ids read, to route it."""

    first: int
    events: list[_SessionOf]
    verdicts: bool = False


_batch_sessions_decoder: Final = msgspec.msgpack.Decoder(_BatchSessions)
_batch_decoder: Final = msgspec.msgpack.Decoder(Batch)
_session_of_decoder: Final = msgspec.msgpack.Decoder(_SessionOf)


class FrontServices(Protocol):
    """What a client connection uses of the front that accepted it (:class:`.front.Front` is one).

    The front's settings and counters, its shares, the sets it keeps its clients in, and the calls a
    client makes of it: taking a root's lock, forgetting a finished connection attempt, a status
    answer. A client sets none of these attributes. It is also what :func:`.metrics.merge_replies`
    needs of the front (a :class:`.metrics.MergingFront`).
    """

    uid: int
    """The front's own uid, always allowed (beside ``config.allow_uids``)."""
    config: CollectorConfig
    metrics: Metrics
    shares: Shares
    owners: Owners
    """The share of each session, for the batches of clients that do not route."""
    route_frames: list[bytes]
    """The Route frame naming each share."""
    connection_limits: ConnectionLimits
    clients: set[FrontClient]
    """The clients admitted and not lost yet."""
    paused: set[FrontClient]
    """The clients not read for backpressure."""
    connecting: set[asyncio.Future[None]]
    """Connection attempts to the shares in progress, referenced until they end."""
    root_refusal: str
    """Why the last root was refused (after :meth:`take_root` said False)."""

    @property
    def stopping(self) -> bool:
        """Whether the front is draining."""
        ...

    def take_root(self, root: str, uid: int) -> bool:
        """Take the lock of the root a hello names; False when another collector holds it."""
        ...

    def connected(self, connecting: asyncio.Future[None]) -> None:
        """Forget a finished connection attempt (one of :attr:`connecting`)."""
        ...

    def status(self, reports: list[dict[str, object]]) -> dict[str, object]:
        """``gz-ia status`` of the whole collector, from the shares' ``reports``."""
        ...


class FrontClient(asyncio.Protocol):
    """One client connection at the front: its frames go to the shares, their replies come back in order."""

    def __init__(self, front: FrontServices) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.links: list[ShareLink] = []
        self.ready = False
        self.early = bytearray()
        self.eof = False
        """The client sent EOF (a half-close): it sends no more, and may still read."""
        self.closing = False
        self.refused = False
        """The front refused a frame for good: nothing after it is read, the refusal ends the connection."""
        self.without_shares = False
        """A share could not be reached: only a status query is answered, from the front alone."""
        self.peer_full = False
        self._paused = False
        self.pid = 0
        self.uid = -1
        self.routing: bool | None = None
        """Whether the client routes its batches itself (its hello offered to); None before its hello."""
        self.frames = FrameReader(MAX_FRAME)
        self.route: tuple[int, bytes] | None = None
        """The share and the frame of the Route frame read last, whose batch is the next frame."""
        self.order: deque[int | CollectorMessage] = deque()
        """Where the reply to each frame not answered yet comes from, oldest first: a share, every
        share (``EVERY``), or the front itself (the reply)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        front = self.front
        sock: socket.socket = transport.get_extra_info("socket")
        self.pid, self.uid, refusal = admit(
            sock,
            own_uid=front.uid,
            config=front.config,
            metrics=front.metrics,
            limits=front.connection_limits,
        )
        if refusal is not None:
            self.fail(*refusal)
            return
        front.clients.add(self)
        transport.pause_reading()  # type: ignore[attr-defined]  # until every share is connected
        self._paused = True
        connecting = asyncio.ensure_future(self._connect())
        front.connecting.add(connecting)
        connecting.add_done_callback(front.connected)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            for share, path in enumerate(self.front.shares.sockets):
                for attempt in itertools.count():
                    try:
                        transport, link = await loop.create_unix_connection(
                            functools.partial(ShareLink, self, share), str(path)
                        )
                        break
                    except BlockingIOError:
                        # The share's accept queue is full (a burst of clients, each needing a
                        # link to every share): wait for it to drain rather than refuse the client.
                        if attempt >= _CONNECT_RETRIES or self.closing:
                            raise
                        await asyncio.sleep(_CONNECT_RETRY_DELAY)
                transport.write(peer_frame(self.uid, self.pid))
                self.links.append(link)
        except OSError as exc:
            log.warning("cannot reach a share for pid %d: %s", self.pid, exc)
            self._close_links()
            self.links = []
            self._answer_without_shares()
            return
        if self.closing:
            self._close_links()
            return
        self.ready = True
        if self.early:
            early = bytes(self.early)
            self.early.clear()
            self._pass_on(early)
        if self.eof:
            self._pass_eof()
        self.update_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.front.metrics.received_bytes.inc(len(data))
        if not self.ready:
            # Read before every share was connected (reading is paused meanwhile, but a first
            # chunk may already be in): kept, and sent on once they are.
            self.early += data
            if self.without_shares:
                self._answer_without_shares()
            return
        self._pass_on(data)
        self.update_reading()

    def _pass_on(self, data: bytes) -> None:
        """Hand the client's frames to the shares (see the module's docstring)."""
        if self.refused:
            return
        try:
            bodies = self.frames.feed(data)
        except FrameTooLarge as exc:
            self._refuse(RejectReason.FRAME_TOO_LARGE, str(exc))
            bodies = []
        for body in bodies:
            if self.refused:
                break
            if self.routing:
                self._pass_routed(body)
            elif self.routing is None:
                self._before_hello(body)
            else:
                self._route(body)

    def _before_hello(self, body: bytes) -> None:
        """A frame before the hello: a query or the hello go to every share; a batch is refused."""
        try:
            message = client_message_decoder.decode(body)
        except msgspec.DecodeError as exc:
            self._answer(RejectReason.MALFORMED, f"undecodable frame: {exc}")
            return
        match message:
            case Hello():
                if not self.front.take_root(message.root, self.uid):
                    self._refuse(RejectReason.ROOT_LOCKED, self.front.root_refusal)
                    return
                self.routing = message.routes
                self._to_every_share(body)
            case Query() | Collect():
                self._to_every_share(body)
            case Batch():
                self._refuse(RejectReason.HANDSHAKE_REQUIRED, "send a hello frame before any batch")
            case Route():
                self._refuse(RejectReason.HANDSHAKE_REQUIRED, "send a hello frame before any route")
            case Subscribe() | Cancel():
                # Each share writes part of the sessions: there is no one ring per root to read.
                self._refuse(RejectReason.INVALID_SUBSCRIPTION, "live subscriptions need shards = 1")

    def _to_every_share(self, body: bytes) -> None:
        header = len(body).to_bytes(HEADER_SIZE, "big")
        for link in self.links:
            assert link.transport is not None
            link.transport.writelines([header, body])
        self.order.append(EVERY)

    def _pass_routed(self, body: bytes) -> None:
        """A frame of a client that routes: a Route frame, or the batch it names, which goes to that
        share alone (with the Route frame, so that the share reads it as routed), undecoded."""
        if self.route is None:
            try:
                share = route_decoder.decode(body).share
            except msgspec.DecodeError:
                self._refuse(RejectReason.MALFORMED, "a client that routes sends a route frame before each batch")
                return
            if not 0 <= share < len(self.links):
                self._refuse(RejectReason.MISROUTED, f"no share {share}: the collector has {len(self.links)}")
                return
            self.route = (share, len(body).to_bytes(HEADER_SIZE, "big") + body)
            return
        share, route_frame = self.route
        self.route = None
        link = self.links[share]
        assert link.transport is not None
        link.transport.writelines([route_frame, len(body).to_bytes(HEADER_SIZE, "big"), body])
        self.order.append(share)

    def _route(self, body: bytes) -> None:
        """A frame of a client that does not route: a batch goes to the share of its sessions, when
        they all belong to one; anything else is answered here."""
        shares = self._shares_of(body)
        if shares is None:
            return
        if len(shares) > 1:
            self._answer(RejectReason.MISROUTED, MIXED_BATCH.format(shares=", ".join(map(str, sorted(shares)))))
            return
        share = shares.pop() if shares else 0
        link = self.links[share]
        assert link.transport is not None
        link.transport.writelines([self.front.route_frames[share], len(body).to_bytes(HEADER_SIZE, "big"), body])
        self.order.append(share)

    def _shares_of(self, body: bytes) -> set[int] | None:
        """The shares of the sessions of a batch; None for a frame that is no batch, then answered.

        An event whose session id cannot be read belongs to no share: whichever share the batch
        goes to rejects it.
        """
        owners = self.front.owners
        try:
            return {owners[event.session_id] for event in _batch_sessions_decoder.decode(body).events}
        except msgspec.DecodeError:
            pass
        try:
            batch = _batch_decoder.decode(body)
        except msgspec.DecodeError:
            pass
        else:
            shares = set()
            for event in batch.events:
                try:
                    shares.add(owners[_session_of_decoder.decode(event).session_id])
                except msgspec.DecodeError:
                    continue
            return shares
        try:
            message = client_message_decoder.decode(body)
        except msgspec.DecodeError as exc:
            self._answer(RejectReason.MALFORMED, f"undecodable frame: {exc}")
            return None
        if isinstance(message, Hello):
            self._refuse(RejectReason.MALFORMED, "a connection sends hello once")
        else:
            self._refuse(
                RejectReason.MALFORMED,
                "after its hello, a client of a sharded collector sends batches only; "
                "ask queries on a connection of their own",
            )
        return None

    def eof_received(self) -> bool:
        # Passed on: each share answers what it read and closes, as a single collector does on
        # EOF, and the front closes this connection once those answers are passed on.
        self.eof = True
        if self.ready:
            self._pass_eof()
        elif self.without_shares:
            self._answer_without_shares()
        return True

    def _answer_without_shares(self) -> None:
        """With a share down, answer the client's first frame from the front alone, once it is in:
        a status query gets the front's report (unhealthy), anything else ``write_failed``, which
        clients take as "reconnect and resend"."""
        self.without_shares = True
        try:
            bodies = FrameReader(MAX_FRAME).feed(bytes(self.early))
        except FrameTooLarge:
            self.fail(RejectReason.WRITE_FAILED, _SHARE_LOST)
            return
        if not bodies:
            if self.eof:
                self.close()
            elif self._paused and self.transport is not None and not self.closing:
                self._paused = False
                self.transport.resume_reading()
            return
        try:
            first = client_message_decoder.decode(bodies[0])
        except msgspec.DecodeError:
            first = None
        if isinstance(first, Query) and first.what == "status":
            self.send(Report(data=self.front.status([])))
            self.close()
        else:
            self.fail(RejectReason.WRITE_FAILED, _SHARE_LOST)

    def _pass_eof(self) -> None:
        for link in self.links:
            if link.transport is not None and link.transport.can_write_eof():
                link.transport.write_eof()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self in self.front.clients:
            self.front.clients.discard(self)
            self.front.connection_limits.release(self.uid)
        self.front.paused.discard(self)
        self._close_links()

    def stop_reading(self) -> None:
        """Take no more frames (the front is stopping); the replies to what was sent still pass."""
        self.ready = False
        if self.transport is not None and not self.closing:
            self.transport.pause_reading()

    def pause_writing(self) -> None:
        self.peer_full = True
        self.update_reading()

    def resume_writing(self) -> None:
        self.peer_full = False
        self.update_reading()

    def update_reading(self) -> None:
        """Read the client only while every share takes more and the client reads its replies."""
        if self.transport is None or self.closing or not self.ready:
            return
        pause = self.peer_full or any(link.full or link.lost for link in self.links)
        if pause and not self._paused:
            self.transport.pause_reading()
            self.front.paused.add(self)
        elif not pause and self._paused:
            self.transport.resume_reading()
            self.front.paused.discard(self)
        self._paused = pause
        # Replies wait in the shares while the client does not read them.
        for link in self.links:
            if link.transport is not None and not link.lost:
                if self.peer_full:
                    link.transport.pause_reading()
                else:
                    link.transport.resume_reading()

    def merge(self) -> None:
        """Pass on the replies in the order of the client's frames, each from where its frame went:
        one share, every share (merged), or the front; close once a share is gone and a reply it
        owes is next.

        A share sends a batch's verdicts after its write and every other reply at once, but the
        front sends a share nothing but batches after the hello, and only the hello and queries
        before it, so each share's replies come in the order of the frames it was sent.
        """
        links = self.links
        if self.closing or len(links) < self.front.shares.count:
            return
        order = self.order
        try:
            while order:
                where = order[0]
                if where == EVERY:
                    if not all(link.replies for link in links):
                        break
                    reply = merge_replies([link.replies.popleft() for link in links], self.front)
                elif isinstance(where, int):
                    replies = links[where].replies
                    if not replies:
                        break
                    reply = replies.popleft()
                else:
                    reply = where
                order.popleft()
                self.send(reply)
                if isinstance(reply, Error) and reply.fatal:
                    self.close()
                    return
        except ValueError as exc:  # pragma: no cover - a bug in a share
            log.error("cannot merge the shares' replies for pid %d: %s", self.pid, exc)
            self.fail(RejectReason.INTERNAL_ERROR, "the collector failed on this frame; see its log")
            return
        if order:
            where = order[0]
            owing = links if where == EVERY else [links[where]] if isinstance(where, int) else []
            if any(link.lost and not link.replies for link in owing):
                self._lost([link for link in links if link.lost])
        elif any(link.lost for link in links):
            self._lost([link for link in links if link.lost])

    def _lost(self, gone: list[ShareLink]) -> None:
        """Shares went away with nothing more to pass on before: end the client's connection as a
        collector would (its fatal error, or closing while stopping or after EOF), else ask it to
        reconnect and resend."""
        fatal = next((r for link in gone for r in link.replies if isinstance(r, Error) and r.fatal), None)
        if fatal is not None:
            self.send(fatal)
            self.close()
        elif self.front.stopping or self.eof:
            self.close()  # as a collector that stops, or closes after EOF
        else:
            self.fail(RejectReason.WRITE_FAILED, _SHARE_LOST)

    def send(self, message: CollectorMessage) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_frame(message))

    def _answer(self, reason: RejectReason, detail: str) -> None:
        """Answer a frame that no share sees with an error that is not fatal, in its turn; counted
        here, as a share counts the frames it refuses."""
        self.front.metrics.events_rejected.labels(reason.value).inc()
        self.order.append(Error(reason=reason, detail=detail))
        self.merge()

    def _refuse(self, reason: RejectReason, detail: str) -> None:
        """Refuse a frame that no share sees for good: counted here, answered in its turn with a fatal
        error, which ends the connection; nothing the client sends after it is read."""
        self.front.metrics.events_rejected.labels(reason.value).inc()
        self.order.append(Error(reason=reason, detail=detail, fatal=True))
        self.refused = True
        if self.transport is not None and not self.closing:
            self.transport.pause_reading()
        self.merge()

    def fail(self, reason: RejectReason, detail: str) -> None:
        """Send a fatal error and close the connection (and its links to the shares)."""
        self.send(Error(reason=reason, detail=detail, fatal=True))
        self.close()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()
        self._close_links()

    def _close_links(self) -> None:
        for link in self.links:
            if link.transport is not None:
                link.transport.close()
