"""The front of a sharded collector: the clients' socket, routed or copied to the shares, replies merged.

With ``shards = n`` (n > 1) the sessions are divided between n share processes by a hash of their
id (:func:`gz_ia.client.protocol.owner_of`); each share is a whole collector on a private socket
(:mod:`.shares`). The front accepts the clients and checks their uid, then opens one connection to
every share for each client and passes the hello to all of them. The per-event work, the file
writes and the syncs are thus spread over the shares, one core each.

A client that routes (its hello offers ``routes``; the thin client does) precedes each batch with
a Route frame naming the one share whose sessions it holds: the front hands that batch to that
share alone, and passes the shares' verdicts on in the order of the batches
(:meth:`_Client._merge_routed`). Any other client's bytes are copied to every share unparsed; each
share reads the stream as a client's and takes, of each batch, only the events of its own sessions
(:func:`.validation.decode_share`). The rest of this docstring is about that second way.

Every frame gets exactly one reply from every share (the ``Peer`` frame the front sends first on
each link gets none). The front merges the n replies to a frame into the one the client gets: for
a batch, the verdicts once every share has written its part (each ``seq`` comes from the session's
owner; rejections are listed by their owner); an error from any share wins, and a fatal one closes
the client's connection. Which replies belong together is decided in :meth:`_Client.merge`: a
share answers a batch after its write, anything else at once.

The delivery guarantees hold because each session lives in exactly one share, which sees each
producer's batches in order on one connection and closes that connection when a write fails
(docs/architecture.md, step 6). When a share fails or exits, the front closes the client's
connection once the earlier replies are passed on; the client resends what has no verdict, and
what the other shares had already written of it is answered as a duplicate. While a share is down
(restarting), a new client is refused the same way, except ``gz-ia status``, which the front
answers alone: unhealthy, with the shares that are down.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec
from prometheus_client import CollectorRegistry

from gz_ia.client import env
from gz_ia.client.protocol import (
    HEADER_SIZE,
    MAX_FRAME,
    Error,
    FrameReader,
    FrameTooLarge,
    Hello,
    Query,
    RejectReason,
    Report,
    Verdicts,
    Welcome,
    client_message_decoder,
    collector_message_decoder,
    encode_frame,
    route_decoder,
)

from .adoption import adopt_spools_through, count_adoption, quarantined_spools
from .collection import merge_gc_reports
from .config import CollectorConfig
from .connection_limits import ConnectionLimits
from .known_roots import KnownRoots, default_state_dir
from .listener import peer_credentials, serve_sockets
from .merged_metrics import MergedMetrics, merge_reports, merged_exposition
from .metrics import Metrics
from .reload import begin_reload, changed_settings, finish_reload
from .shares import ShareFailed, Shares, peer_frame
from .storage._layout import LayoutError
from .storage.root_lock import RootLocked, RootLocks
from .systemd import Notifier, watchdog_interval

__all__ = ["Front"]

log = logging.getLogger("gz_ia.collector")

_SHARE_BUFFER: Final = 4 << 20
"""Bytes buffered towards a share before the front stops reading the client (the share's own
backpressure shows here first)."""
_CONNECT_RETRIES: Final = 500
_CONNECT_RETRY_DELAY: Final = 0.01
"""Up to 5 s of retries while a share's accept queue is full."""
_SHARE_LOST: Final = "a share of the collector stopped; reconnect and resend"
_STATUS_INTERVAL: Final = 10.0
_ADOPTION_INTERVAL: Final = 30.0

CollectorMessage = Welcome | Verdicts | Error | Report


class _ShareLink(asyncio.Protocol):
    """The front's connection to one share on behalf of one client: bytes out, replies queued."""

    def __init__(self, client: _Client, share: int) -> None:
        self.client = client
        self.share = share
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(MAX_FRAME)
        self.replies: deque[CollectorMessage] = deque()
        """Replies not yet merged, in the order the share sent them."""
        self.lost = False
        self.full = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        transport.set_write_buffer_limits(high=_SHARE_BUFFER)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        try:
            for body in self.reader.feed(data):
                self.replies.append(collector_message_decoder.decode(body))
        except (FrameTooLarge, msgspec.DecodeError) as exc:  # pragma: no cover - a bug in a share
            log.error("share %d sent a frame that cannot be read (%s); closing its connection", self.share, exc)
            assert self.transport is not None
            self.transport.close()
            return
        self.client.merge()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.client.merge()

    def pause_writing(self) -> None:
        self.full = True
        self.client.update_reading()

    def resume_writing(self) -> None:
        self.full = False
        self.client.update_reading()


class _Client(asyncio.Protocol):
    """One client connection at the front: its bytes go to every share, their replies come back merged."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.links: list[_ShareLink] = []
        self.ready = False
        self.early = bytearray()
        self.eof = False
        """The client sent EOF (a half-close): it sends no more, and may still read."""
        self.closing = False
        self.without_shares = False
        """A share could not be reached: only a status query is answered, from the front alone."""
        self.peer_full = False
        self._paused = False
        self.pid = 0
        self.uid = -1
        self.routing: bool | None = None
        """Whether the client routes its batches (see :meth:`_route`); None until its hello is read."""
        self.frames = FrameReader(MAX_FRAME)
        self.route: tuple[int, bytes] | None = None
        """The share and the frame of the Route frame read last, whose batch is the next frame."""
        self.routes: deque[int] = deque()
        """The share each routed batch went to, oldest first: the order its verdicts are passed on in."""
        self.welcomed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        front = self.front
        sock: socket.socket = transport.get_extra_info("socket")
        try:
            self.pid, uid, _ = peer_credentials(sock)
        except OSError:
            uid = -1
        self.uid = uid
        if uid != front.uid and uid not in front.config.allow_uids:
            front.metrics.connections_refused.inc()
            log.warning("refused a connection from uid %d (pid %d): not allowed", uid, self.pid)
            self.fail(RejectReason.PERMISSION_DENIED, f"uid {uid} may not use this collector")
            return
        refused = front.connection_limits.admit(uid)
        if refused is not None:
            self.fail(RejectReason.BUSY, refused)
            return
        front.clients.add(self)
        front.metrics.connections_total.inc()
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
                            functools.partial(_ShareLink, self, share), str(path)
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
        """Send the client's bytes to the shares: every share, unparsed, unless the client routes."""
        if self.routing is False:
            for link in self.links:
                assert link.transport is not None
                link.transport.write(data)
            return
        try:
            bodies = self.frames.feed(data)
        except FrameTooLarge as exc:
            self._refuse(RejectReason.FRAME_TOO_LARGE, str(exc))
            return
        for index, body in enumerate(bodies):
            if self.closing:
                return
            if self.routing is None:
                self._start(body)
                if self.routing is False:  # the rest goes on unparsed
                    for rest in bodies[index + 1 :]:
                        self._to_every_share(rest)
                    self._pass_on(self.frames.detach())
                    return
            else:
                self._route(body)

    def _start(self, body: bytes) -> None:
        """The client's first frame, to every share: a hello that offers routing makes it route."""
        try:
            first = client_message_decoder.decode(body)
        except msgspec.DecodeError:
            first = None
        if isinstance(first, Hello) and not self.front.take_root(first.root, self.uid):
            self._refuse(RejectReason.ROOT_LOCKED, self.front.root_refusal)
            return
        self.routing = isinstance(first, Hello) and first.routes and len(self.links) > 1
        self._to_every_share(body)

    def _to_every_share(self, body: bytes) -> None:
        header = len(body).to_bytes(HEADER_SIZE, "big")
        for link in self.links:
            assert link.transport is not None
            link.transport.writelines([header, body])

    def _route(self, body: bytes) -> None:
        """A frame of a client that routes: a Route frame, or the batch it names, which goes to that
        share alone (with the Route frame, so that the share reads it as routed)."""
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
        self.routes.append(share)

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
        """Pass on what every share has answered, merged; close once a share is gone.

        A share sends a batch's verdicts after its write and every other reply (welcome, report,
        error) as soon as it reads the frame, so a reply to a later frame can come before the
        verdicts of an earlier batch, and not at the same point in every share. So verdicts pair
        with verdicts, only when every share has them first in line (nothing may overtake a
        welcome), and every other reply with each share's first such reply, which may overtake
        verdicts, as it may in one process. A fatal error that only some shares sent (a failed
        write) is passed on once every verdict the others can pair with it is.
        """
        links = self.links
        if self.closing or len(links) < self.front.shares.count:
            return
        if self.welcomed and self.routing:
            self._merge_routed()
            return
        try:
            while True:
                if all(link.replies and isinstance(link.replies[0], Verdicts) for link in links):
                    self.send(merge_replies([link.replies.popleft() for link in links], self.front))
                    continue
                positions = [_first_answer(link.replies) for link in links]
                if any(position is None for position in positions):
                    break
                answers = []
                for link, position in zip(links, positions, strict=True):
                    assert position is not None
                    answers.append(link.replies[position])
                    del link.replies[position]
                reply = merge_replies(answers, self.front)
                self.send(reply)
                if isinstance(reply, Error) and reply.fatal:
                    self.close()
                    return
                if isinstance(reply, Welcome):
                    self.welcomed = True
                    if self.routing:
                        self._merge_routed()
                        return
        except ValueError as exc:  # pragma: no cover - a bug in a share
            log.error("cannot merge the shares' replies for pid %d: %s", self.pid, exc)
            self.fail(RejectReason.INTERNAL_ERROR, "the collector failed on this frame; see its log")
            return
        gone = [link for link in links if link.lost and not any(isinstance(r, Verdicts) for r in link.replies)]
        if gone:
            self._lost(gone)

    def _merge_routed(self) -> None:
        """Pass on the replies to a routing client's batches in the order of its batches: each came
        from the one share the batch went to. Close once a share is gone and nothing before it waits."""
        links = self.links
        routes = self.routes
        while routes:
            link = links[routes[0]]
            if not link.replies:
                break
            routes.popleft()
            reply = link.replies.popleft()
            self.send(reply)
            if isinstance(reply, Error) and reply.fatal:
                self.close()
                return
        waiting_on_lost = bool(routes) and links[routes[0]].lost
        if waiting_on_lost or (not routes and any(link.lost for link in links)):
            self._lost([link for link in links if link.lost])

    def _lost(self, gone: list[_ShareLink]) -> None:
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

    def _refuse(self, reason: RejectReason, detail: str) -> None:
        """A routing client's frame that no share sees: counted here, as a share counts the frames
        it refuses, then the connection is ended."""
        self.front.metrics.events_rejected.labels(reason.value).inc()
        self.fail(reason, detail)

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


def _first_answer(replies: deque[CollectorMessage]) -> int | None:
    """The position of the first reply that is not a batch's verdicts, or None."""
    return next((position for position, reply in enumerate(replies) if not isinstance(reply, Verdicts)), None)


def merge_replies(replies: list[CollectorMessage], front: Front) -> CollectorMessage:
    """The one reply a client gets for a frame, from every share's reply to it.

    Raises:
        ValueError: the shares answered the same frame with different kinds of message.
    """
    for reply in replies:
        if isinstance(reply, Error):
            return reply  # the first share's error: every share decodes the same frame alike
    first = replies[0]
    if isinstance(first, Verdicts):
        verdicts = [reply for reply in replies if isinstance(reply, Verdicts)]
        if len(verdicts) != len(replies):
            raise ValueError("the shares answered one batch differently")
        seqs = first.seqs
        for other in verdicts[1:]:
            if other.seqs:
                # Each event's seq comes from its session's owner; the others leave 0 there.
                seqs = [mine or theirs for mine, theirs in zip(seqs, other.seqs, strict=True)]
        rejected = [rejection for reply in verdicts for rejection in reply.rejected]
        if len(verdicts) > 1 and rejected:
            rejected.sort(key=lambda rejection: rejection.index)
        return Verdicts(first=first.first, count=first.count, seqs=seqs, rejected=rejected)
    if isinstance(first, Report):
        reports = [reply.data for reply in replies if isinstance(reply, Report)]
        if "gc" in first.data:  # gz-ia gc: each share removed its own sessions
            return Report(data={"gc": merge_gc_reports([_gc_part(report) for report in reports])})
        if "metrics" in first.data:
            texts = [str(report.get("metrics", "")) for report in reports]
            return Report(data={"metrics": merged_exposition(front.metrics.registry, texts)})
        return Report(data=front.status(reports))
    return first  # Welcome: the same from every share


class Front:
    """The front process of a sharded collector (see the module's docstring).

    Args: as :class:`.server.Collector`, and ``near``: the listening socket's path, beside which the
    shares' private directory is made.
    """

    def __init__(
        self,
        config: CollectorConfig,
        metrics: Metrics,
        *,
        version: str,
        load_config: Callable[[], CollectorConfig] | None = None,
        near: Path,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.version = version
        self._load_config = load_config
        self.uid = os.getuid()
        self.started = time.time()
        self.socket_path = near
        self.shares = Shares(config.shards, config, near=near)
        self.clients: set[_Client] = set()
        self.connection_limits = ConnectionLimits(
            config, metrics.connections_over_limit, per_connection=1 + config.shards
        )
        """A client connection costs the front one descriptor, and one more to each share."""
        self.paused: set[_Client] = set()
        """Clients not read for backpressure: a share's backlog is full, or they do not read."""
        self.connecting: set[asyncio.Future[None]] = set()
        self.notifier = Notifier()
        self._stopping = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._reloads: set[asyncio.Future[None]] = set()
        self.registry = CollectorRegistry()
        """What the metrics endpoint serves: this process's metrics merged with every share's."""
        self.registry.register(MergedMetrics(metrics.registry, self.shares.sockets))
        metrics.connections.set_function(lambda: len(self.clients))
        metrics.paused_connections.set_function(lambda: len(self.paused))
        self.sockets: list[str] = []
        """The paths of the sockets the front listens on (known once :meth:`serve` runs)."""
        self.root_locks = RootLocks(pid=os.getpid(), sockets=self.sockets)
        """The roots this collector serves: the front holds them for its shares (see .storage.root_lock)."""
        self.known_roots = KnownRoots(default_state_dir())
        self.root_refusal = ""
        """Why the last root was refused (the detail of the client's ``root_locked``)."""

    async def serve(self, sockets: list[socket.socket]) -> None:
        """Start the shares, serve the clients until SIGTERM/SIGINT, then drain and return."""
        loop = asyncio.get_running_loop()
        self.sockets[:] = [os.path.abspath(str(sock.getsockname())) for sock in sockets]
        self._take_known_roots()  # before the shares start: share 0 repairs the roots held here
        try:
            await self.shares.start()
        except ShareFailed as exc:
            log.error("cannot start the collector's shares: %s", exc)
            self.shares.stop()
            raise SystemExit(1) from exc
        servers = await serve_sockets(sockets, lambda: _Client(self))
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        watcher = asyncio.create_task(self.shares.watch(), name="gz-ia-shares")
        await self._adopt()  # before READY, as a single collector does
        adopter = asyncio.create_task(self._adoption_loop(), name="gz-ia-adoption")
        watchdog = asyncio.create_task(self._watchdog_loop(), name="gz-ia-watchdog")
        self.notifier.notify("READY=1", f"STATUS=serving on {len(sockets)} socket(s) with {self.shares.count} shares")
        log.info(
            "gz-ia collector %s ready (durability=%s, %d shares)",
            self.version,
            self.config.durability,
            self.shares.count,
        )
        try:
            await self._stopping.wait()
        finally:
            self.notifier.notify("STOPPING=1", "STATUS=draining")
            log.info("stopping: draining connections")
            for server in servers:
                server.close()
            for client in list(self.clients):
                client.stop_reading()
            tasks = (watcher, watchdog, adopter, *self._reloads)  # a reload in flight is moot now
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            # Each share drains: it writes what it staged and answers it, which reaches the
            # clients through their links, and then closes its connections.
            await asyncio.to_thread(self.shares.stop)
            await asyncio.sleep(0)
            for client in list(self.clients):
                client.close()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
            log.info("stopped")
            self.notifier.close()

    def take_root(self, root: str, uid: int) -> bool:
        """Take the lock of the root a client's hello names, for this collector; False when another
        collector holds it (:attr:`root_refusal` says which). A root that cannot be used at all is
        passed on: the shares refuse it with the reason."""
        path = Path(root)
        try:
            self.root_locks.take(path, uid)
        except RootLocked as exc:
            self.root_refusal = str(exc)
            self.root_locks.refused(exc)
            return False
        except (LayoutError, OSError):
            return True
        self.known_roots.add(path, uid, self.sockets[0] if self.sockets else "")
        return True

    def _take_known_roots(self) -> None:
        """Take the roots this collector served before (its share 0 repairs them before it answers)."""
        gone: list[tuple[Path, int]] = []
        for path, uid in self.known_roots.served_through(self.sockets):
            if not path.is_dir():
                gone.append((path, uid))
                continue
            try:
                self.root_locks.take(path, uid)
            except (RootLocked, LayoutError, OSError) as exc:
                log.warning("not taking %s at start: %s", path, exc)
        self.known_roots.discard(gone)

    @property
    def spool_dir(self) -> Path:
        """Where clients spool (and where adoption looks)."""
        return Path(self.config.spool_dir) if self.config.spool_dir else env.default_spool_dir()

    async def _adopt(self) -> None:
        """Deliver the spools of clients that died, through the front's own socket (see adoption)."""
        try:
            done = await asyncio.to_thread(
                adopt_spools_through, self.socket_path, self.spool_dir, uid=self.uid, sockets=self.sockets
            )
        except Exception:  # pragma: no cover - never let a bad spool take the daemon down
            log.exception("spool adoption failed; will retry")
        else:
            count_adoption(self.metrics, done)

    async def _adoption_loop(self) -> None:
        while True:
            await asyncio.sleep(_ADOPTION_INTERVAL)
            await self._adopt()

    async def _watchdog_loop(self) -> None:
        if not self.notifier.enabled:
            return
        interval = watchdog_interval()
        while True:
            # Pinged only while every share runs: one that keeps failing to start shows in systemd.
            lines = ["WATCHDOG=1"] if interval is not None and self.shares.alive() else []
            lines.append(f"STATUS=serving: {len(self.clients)} connection(s), {self.shares.count} shares")
            self.notifier.notify(*lines)
            await asyncio.sleep(interval if interval is not None else _STATUS_INTERVAL)

    def connected(self, connecting: asyncio.Future[None]) -> None:
        """Forget a finished connection attempt; log it if it failed on a bug."""
        self.connecting.discard(connecting)
        if not connecting.cancelled() and connecting.exception() is not None:
            log.error("connecting a client to the shares failed", exc_info=connecting.exception())

    @property
    def stopping(self) -> bool:
        """Whether the front is draining."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Ask :meth:`serve` to drain and return (as SIGTERM does)."""
        self._stopping.set()

    def reload(self) -> None:
        """SIGHUP: re-read the configuration and have the shares apply it, in the background.

        Reloads run one after the other; each is over (logged, ``READY=1``) once every share shows
        the new configuration, so that what follows a reload meets the new limits in any share.
        """
        task = asyncio.ensure_future(self._reload())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _reload(self) -> None:
        async with self._reload_lock:
            new = begin_reload(self._load_config, self.config, self.notifier, self.metrics)
            if new is None:
                return
            old = self.config
            self.config = new
            self.connection_limits.configure(new)
            logging.getLogger().setLevel(new.log_level.upper())
            lagging = await self.shares.reload(new)
            if lagging:
                log.warning(
                    "configuration reloaded (%s), but share(s) %s do not show it yet; see their log",
                    changed_settings(old, new),
                    ", ".join(map(str, lagging)),
                )
            else:
                log.info("configuration reloaded (%s) and applied by every share", changed_settings(old, new))
            finish_reload(self.notifier, self.metrics, f"serving with {self.shares.count} shares")

    def status(self, reports: list[dict[str, object]]) -> dict[str, object]:
        """``gz-ia status`` of the whole collector: the shares' reports merged, with the front's facts.

        With a share down, the shares that answered (none, when the front answers alone) and
        ``healthy`` false.
        """
        merged = merge_reports(reports)
        down = self.shares.down()
        if down or len(reports) < self.shares.count:
            merged["healthy"] = False
            merged["reasons"] = [
                *(merged.get("reasons") or []),  # type: ignore[misc]
                *(f"share {share} is down, being restarted" for share in down),
            ]
        limits = merged.get("limits")
        merged["limits"] = {
            **(limits if isinstance(limits, dict) else {}),
            **self.connection_limits.report(),  # the front's: it holds the clients
        }
        merged.update(
            {
                "version": self.version,
                "pid": os.getpid(),
                "uptime_seconds": round(time.time() - self.started, 3),
                "config": msgspec.to_builtins(self.config),
                "durability": self.config.durability,
                "metrics_endpoint": self.metrics.endpoint_report(),
                "connections": len(self.clients),
                "spools": {"quarantined": quarantined_spools(self.spool_dir)},
                "shares": {
                    "count": self.shares.count,
                    "pids": self.shares.pids(),
                    "down": down,
                    "restarts": self.shares.restarts,
                },
            }
        )
        return merged


def _gc_part(report: dict[str, object]) -> dict[str, object]:
    part = report.get("gc")
    return part if isinstance(part, dict) else {}
