"""One client connection: the handshake, then each frame decoded and applied as it arrives.

Each connection is an :class:`asyncio.Protocol` of the :class:`~.server.Collector`'s loop, which it
knows only as a :class:`ConnectionHost` (the calls it makes of it; this module imports no server).
A batch is decoded (:mod:`..ingest.validation`) and handed to the process's :class:`~.intake.Intake`
at once; the connection is the batch's :class:`~.replies.Reply`, which sends its verdicts after the
write pass. A connection with too many batches awaiting verdicts, or whose peer does not read its
replies, is no longer read (backpressure).
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

import msgspec

from gz_ia.client.protocol import (
    MAX_FRAME,
    PROTOCOL_VERSION,
    Batch,
    Cancel,
    Collect,
    CollectorMessage,
    Error,
    FrameReader,
    FrameTooLarge,
    Hello,
    LiveMessage,
    Query,
    RejectReason,
    Report,
    Route,
    Subscribe,
    Verdicts,
    Welcome,
    client_message_decoder,
    encode_frame,
)
from gz_ia.collector.ingest.validation import DecodedBatch, decode_batch
from gz_ia.collector.metrics import write_error_kind
from gz_ia.collector.storage.root_lock import RootLocked
from gz_ia.collector.storage.roots import LayoutError, transient_cause
from gz_ia.collector.storage.sessions import RootStore

from .admission import admit
from .subscriptions import ConnectionSubscriptions

if TYPE_CHECKING:
    from gz_ia.collector.config import CollectorConfig
    from gz_ia.collector.ingest.staging import BatchOutcome
    from gz_ia.collector.live import Hub
    from gz_ia.collector.metrics import Metrics
    from gz_ia.collector.storage.root_lock import RootLocks

    from .admission import ConnectionLimits
    from .health import Health
    from .intake import Intake

__all__ = ["Connection", "ConnectionHost"]

log = logging.getLogger("gz_ia.collector")

_PRODUCER: Final = re.compile(r"[0-9a-f]{1,32}")
_WRITE_FAILED: Final = "the collector could not write this batch (see its log); resend after reconnecting"


class ConnectionHost(Protocol):
    """What a connection uses of the process that accepted it (:class:`.server.Collector` is one).

    The process's settings and counters, the sets it keeps its connections in, its intake, and the
    calls a connection makes of it: opening a root, a status or gc answer. A connection sets none
    of these attributes.
    """

    uid: int
    """The process's own uid, always allowed (beside ``config.allow_uids``)."""
    version: str
    config: CollectorConfig
    metrics: Metrics
    intake: Intake
    """Where its batches are staged, and answered after the write (:meth:`written`, :meth:`lost`)."""
    health: Health
    root_locks: RootLocks
    connection_limits: ConnectionLimits | None
    """The limits a new connection is counted against (see :func:`.admission.admit`); None: not limited."""
    hub: Hub
    """The live subscriptions' rings (``subscribe`` frames)."""
    connections: set[Connection]
    """The connections admitted and not lost yet."""
    paused: set[Connection]
    """The connections not read for backpressure."""
    tasks: set[asyncio.Future[dict[str, object]]]
    """Requests in progress (``gz-ia gc``), referenced until they answer."""

    @property
    def overloaded(self) -> bool:
        """Set while the next write pass holds too much: no connection is read."""
        ...

    def open_root(self, path: Path, uid: int) -> RootStore:
        """The store of root ``path`` (owned by ``uid``), once the process holds its lock."""
        ...

    async def collect(self, request: Collect, uid: int) -> dict[str, object]:
        """Run ``gz-ia gc`` on a root; its report."""
        ...

    def status(self) -> dict[str, object]:
        """The answer to ``gz-ia status``."""
        ...

    def ui_url(self) -> str | None:
        """The web view's address with its key (None: no HTTP side)."""
        ...


class Connection(asyncio.Protocol):
    """One client connection: handshake, then batches answered in order.

    Subclasses (:class:`~..sharding.share_connection.ShareConnection`) extend :meth:`handle_frame`,
    :meth:`handle_route` and :meth:`welcome`, and hand batches to :meth:`handle_batch`.
    """

    def __init__(self, collector: ConnectionHost) -> None:
        self.collector = collector
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(MAX_FRAME)
        self.uid = -1
        self.pid = 0
        self.producer = ""
        self.root: RootStore | None = None
        self.awaiting = 0
        self.closing = False
        self._paused_reading = False
        self._peer_not_reading = False
        self.subscriptions: ConnectionSubscriptions | None = None
        """Its live subscriptions, once it asked for one."""

    # --- asyncio callbacks --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        collector = self.collector
        sock: socket.socket = transport.get_extra_info("socket")
        self.pid, self.uid, refusal = admit(
            sock,
            own_uid=collector.uid,
            config=collector.config,
            metrics=collector.metrics,
            limits=collector.connection_limits,
        )
        if refusal is not None:
            self.fail(*refusal)
            return
        collector.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.subscriptions is not None:
            self.subscriptions.close()
        if self in self.collector.connections:
            self.collector.connections.discard(self)
            if self.collector.connection_limits is not None:
                self.collector.connection_limits.release(self.uid)
        self.collector.paused.discard(self)

    def pause_writing(self) -> None:
        # The peer is not reading its verdicts: stop reading its frames until it does.
        self._peer_not_reading = True
        if self.subscriptions is not None:
            self.subscriptions.writable.clear()
        self.update_reading()

    def resume_writing(self) -> None:
        self._peer_not_reading = False
        if self.subscriptions is not None:
            self.subscriptions.writable.set()
        self.update_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.collector.metrics.received_bytes.inc(len(data))
        try:
            bodies = self.reader.feed(data)
        except FrameTooLarge as exc:
            self.refuse(RejectReason.FRAME_TOO_LARGE, str(exc))
            return
        for body in bodies:
            try:
                self.handle_frame(body)
            except Exception:  # a bug must cost this connection, never the collector or its clients
                log.exception("internal error while handling a frame from pid %d", self.pid)
                self.refuse(RejectReason.INTERNAL_ERROR, "the collector failed on this frame; see its log")
            if self.closing:
                return
        self.update_reading()

    # --- frames --------------------------------------------------------------------------------------

    def handle_frame(self, body: bytes) -> None:
        """Decode and apply one frame of the client's (a batch once the hello is accepted)."""
        if self.root is not None:
            try:
                decoded = decode_batch(body)
            except msgspec.DecodeError:
                pass
            else:
                self.handle_batch(decoded, len(body))
                return
        try:
            message = client_message_decoder.decode(body)
        except msgspec.DecodeError as exc:
            self._count_refused(RejectReason.MALFORMED)
            self.send(Error(reason=RejectReason.MALFORMED, detail=f"undecodable frame: {exc}"))
            return
        match message:
            case Hello():
                self._handle_hello(message)
            case Route():
                self.handle_route(message)
            case Query(what="ui"):
                # The web view's key is a secret of the collector's own user, never of allow_uids.
                if self.uid != self.collector.uid:
                    self.refuse(RejectReason.PERMISSION_DENIED, "only the collector's own user may open its web view")
                else:
                    self.send(Report(data={"ui": self.collector.ui_url()}))
            case Query(what="metrics"):
                self.send(Report(data={"metrics": self.collector.metrics.exposition()}))
            case Query():
                self.send(Report(data=self.collector.status()))
            case Collect():
                self._collect(message)
            case Subscribe():
                self._subscribe(message)
            case Cancel():
                if self.subscriptions is None:
                    self.send(
                        Error(reason=RejectReason.INVALID_SUBSCRIPTION, detail="no subscription on this connection")
                    )
                else:
                    self.subscriptions.cancel(message)
            case Batch():
                self.refuse(RejectReason.HANDSHAKE_REQUIRED, "send a hello frame before any batch")

    def _handle_hello(self, hello: Hello) -> None:
        if self.root is not None:
            self.refuse(RejectReason.MALFORMED, "a connection sends hello once")
            return
        if hello.proto != PROTOCOL_VERSION:
            self.refuse(
                RejectReason.UNSUPPORTED_VERSION,
                f"protocol {hello.proto} is not supported; this collector speaks {PROTOCOL_VERSION}",
            )
            return
        if not _PRODUCER.fullmatch(hello.producer):
            self.refuse(RejectReason.MALFORMED, "producer must be 1-32 lowercase hex digits")
            return
        try:
            self.root = self.collector.open_root(Path(hello.root), self.uid)
        except RootLocked as exc:
            # Another collector writes this root: writing it too would number events it numbers.
            self.collector.root_locks.refused(exc)
            self.refuse(RejectReason.ROOT_LOCKED, str(exc))
            return
        except (LayoutError, OSError) as exc:
            cause = transient_cause(exc)
            if cause is not None:
                # A full or read-only disk is a fault that clears, not a refusal: the client keeps its
                # events and comes back (backoff), instead of giving them up.
                self.collector.metrics.write_errors.labels(write_error_kind(cause)).inc()
                self.collector.health.failed(Path(hello.root), cause)
                self.fail(RejectReason.WRITE_FAILED, f"cannot prepare root {hello.root!r} now: {cause}")
                return
            detail = str(exc) if isinstance(exc, LayoutError) else f"cannot use root {hello.root!r}: {exc}"
            self.refuse(RejectReason.ROOT_NOT_ALLOWED, detail)
            return
        self.producer = hello.producer
        self.send(self.welcome())

    def welcome(self) -> Welcome:
        """The answer to an accepted hello."""
        return Welcome(proto=PROTOCOL_VERSION, version=self.collector.version)

    def handle_route(self, route: Route) -> None:
        """A Route frame: for a collector that asked its clients to route (its welcome said so),
        which this one did not."""
        self.refuse(RejectReason.MALFORMED, "unexpected route frame: this collector's welcome did not ask for routing")

    def handle_batch(self, decoded: DecodedBatch, size: int) -> None:
        """Stage a batch through the intake; its verdicts follow the write (see :meth:`written`)."""
        assert self.root is not None
        self.awaiting += 1
        if not self.collector.intake.stage(self.root, self.producer, decoded, self, size):
            # Its directories were deleted (``rm -r .harness``) while this connection was idle:
            # the client recreates the root when it reconnects, and the next hello opens it afresh.
            self.awaiting -= 1
            self.fail(RejectReason.WRITE_FAILED, f"the session root {self.root.path} was removed; reconnect")

    def _collect(self, request: Collect) -> None:
        """``gz-ia gc``: run it in the collector's writer, answer with its report (see .collection)."""
        task = asyncio.ensure_future(self.collector.collect(request, self.uid))
        self.collector.tasks.add(task)

        def answer(done: asyncio.Future[dict[str, object]]) -> None:
            self.collector.tasks.discard(done)
            exc = done.exception()
            if exc is None:
                self.send(Report(data={"gc": done.result()}))
            elif isinstance(exc, LayoutError | OSError):
                self.fail(RejectReason.ROOT_NOT_ALLOWED, f"cannot collect {request.root!r}: {exc}")
            else:
                log.error("gc of %s failed", request.root, exc_info=exc)
                self.fail(RejectReason.INTERNAL_ERROR, "the collector failed on this gc; see its log")

        task.add_done_callback(answer)

    def _subscribe(self, request: Subscribe) -> None:
        """A live subscription (see :mod:`.subscriptions`): only for the collector's own user, whose
        sessions these are (``allow_uids`` lets other users send events, never read them)."""
        if self.uid != self.collector.uid:
            self.refuse(RejectReason.PERMISSION_DENIED, "only the collector's own user may subscribe")
            return
        if self.subscriptions is None:
            self.subscriptions = ConnectionSubscriptions(self.collector.hub, self.send)
            if self._peer_not_reading:
                self.subscriptions.writable.clear()
        self.subscriptions.subscribe(request)

    def _count_refused(self, reason: RejectReason) -> None:
        """Count a frame refused as a whole."""
        self.collector.metrics.events_rejected.labels(reason.value).inc()

    # --- replies -------------------------------------------------------------------------------------

    def send(self, message: CollectorMessage | LiveMessage) -> None:
        """Write one frame to the client, unless the connection is going away."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_frame(message))

    def refuse(self, reason: RejectReason, detail: str) -> None:
        """Refuse a frame as a whole, counted with the rejections: a fatal error, then close."""
        self._count_refused(reason)
        self.fail(reason, detail)

    def fail(self, reason: RejectReason, detail: str) -> None:
        """Send a fatal error and close the connection."""
        self.send(Error(reason=reason, detail=detail, fatal=True))
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    # --- its batches' replies (a :class:`~.replies.Reply`) ---------------------------------------------

    def written(self, outcome: BatchOutcome) -> None:
        """One batch is written: send its verdicts, and maybe resume reading."""
        self.send(
            Verdicts(first=outcome.first, count=outcome.count, seqs=outcome.seqs or [], rejected=outcome.rejections)
        )
        self.awaiting -= 1
        self.update_reading()

    def lost(self) -> None:
        """A failed write dropped one of its batches: refuse it and close, before another frame is read."""
        if not self.closing:
            self.fail(RejectReason.WRITE_FAILED, _WRITE_FAILED)

    def update_reading(self) -> None:
        """Pause or resume reading this connection: paused while its peer does not read, while too
        many of its batches await verdicts (``max_backlog_batches``), or while its host is overloaded."""
        if self.transport is None or self.closing:
            return
        should_pause = (
            self._peer_not_reading
            or self.awaiting >= self.collector.config.max_backlog_batches
            or self.collector.overloaded
        )
        if should_pause and not self._paused_reading:
            self.transport.pause_reading()
            self._paused_reading = True
            self.collector.paused.add(self)
        elif not should_pause and self._paused_reading:
            self.transport.resume_reading()
            self._paused_reading = False
            self.collector.paused.discard(self)
