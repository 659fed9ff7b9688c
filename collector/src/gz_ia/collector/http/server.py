"""The server: h11 on asyncio streams, one task per connection, the peer's uid checked first.

Who is heard, in the order it is checked:

1. the peer's uid, from the kernel, while the peer's socket is alive (:mod:`.peer`): another uid
   (unless the server is open to every uid, as ``/metrics`` is) or one the kernel cannot name is
   answered 403 before a byte of the request is read;
2. per request, a ``Host`` that names this server by a loopback name or address (a page that
   rebinds its own host name to 127.0.0.1 sends that name), and no browser's cross-site signal
   (``Sec-Fetch-Site: cross-site`` or ``same-site``, an ``Origin`` of another site);
3. what the route asks (:class:`.messages.Access`): the user's key (:mod:`.key`) for every route
   that writes or answers about sessions.

Bounded everywhere a client could make it grow, and counted per uid after the uid is known, so that
another user's connections never take the user's place: connections held at once by each uid,
refusals being answered at once, the size of a request's head, each route's body, the bodies of all
connections held at once (past it a request is answered 429 with ``Retry-After`` while its body is
still arriving, so a flood of big exports cannot make the collector hold connections times the
largest body), and the time a connection may sit idle or send slowly. Errors of the request (a bad
head, an unknown path, a body too large) are answered and the connection closed; a handler that
raises is answered 500 and logged, and the server goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import ipaddress
import json
import logging
import socket
import threading
from collections import Counter
from collections.abc import AsyncIterator
from typing import Final, Protocol
from urllib.parse import SplitResult, parse_qs, urlsplit

import h11

from gz_ia.collector.errors import CollectorError

from .key import KEY_HEADER, offered_key, same_key
from .messages import Access, Request, Response, Route, Routes, StreamResponse
from .peer import PeerUnknown, tcp_peer_uid

__all__ = ["MAX_BODIES_HELD", "HttpCounters", "HttpServer", "ServerThread"]

log = logging.getLogger("gz_ia.collector")

_MAX_HEAD: Final = 64 << 10
_READ_SIZE: Final = 64 << 10
_IDLE_TIMEOUT: Final = 30.0
"""Seconds a connection may wait between two reads before it is closed (a slow or idle client)."""
_CLOSE_GRACE: Final = 2.0
"""Seconds requests in progress get to finish when the server closes."""
MAX_BODIES_HELD: Final = 64 << 20
"""Bytes of request bodies the server holds at once, over every connection, from their first byte
read until their answer is sent."""
_RETRY_AFTER_BODIES: Final = "1"
_MAX_REFUSING: Final = 64
"""Refusals being answered at once; past it a refused connection is closed without an answer, so a
flood of another user's connections costs a bounded amount of work."""
_CROSS_SITE: Final = frozenset({"cross-site", "same-site"})
"""``Sec-Fetch-Site`` values a browser sends for a request made by a page of another origin."""
_REFUSALS: Final = {
    "other_uid": "this collector serves only its own user's processes",
    "unknown_peer": "this collector serves only its own user's processes, judged while their connection is open",
    "busy": "too many connections from your user; retry later",
}


class HttpCounters(Protocol):
    """Where the server counts what it answered and whom it refused (the collector's metrics)."""

    def answered(self, endpoint: str, status: int) -> None: ...

    def refused(self, reason: str) -> None: ...


class _Uncounted:
    def answered(self, endpoint: str, status: int) -> None:
        pass

    def refused(self, reason: str) -> None:
        pass


class _Closed(CollectorError):
    """The client closed the connection, or went silent past the idle timeout."""


class _BodiesFull(CollectorError):
    """The bodies held at once would pass :data:`MAX_BODIES_HELD`: this request waits its turn."""


class HttpServer:
    """Serves ``routes`` on one listening TCP socket to processes of ``own_uid`` (see the module).

    Args:
        routes: what is served.
        own_uid: the only uid heard; any other peer, or one the kernel cannot name, gets 403.
        key: the user's key, which :attr:`Access.KEY` routes ask for (None: they are refused).
        every_uid: hear every uid the kernel can name, not ``own_uid`` alone (``/metrics``).
        counters: counts answers and refusals.
        max_connections: connections held at once by one uid; past it its new one is answered 503.
        max_bodies_held: bytes of request bodies held at once; past it a request is answered 429.
    """

    def __init__(
        self,
        routes: Routes,
        *,
        own_uid: int,
        key: str | None = None,
        every_uid: bool = False,
        counters: HttpCounters | None = None,
        max_connections: int = 256,
        idle_timeout: float = _IDLE_TIMEOUT,
        max_bodies_held: int = MAX_BODIES_HELD,
    ) -> None:
        self.routes = routes
        self.own_uid = own_uid
        self.key = key
        self.every_uid = every_uid
        self.counters: HttpCounters = counters or _Uncounted()
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.max_bodies_held = max_bodies_held
        self.bodies_held = 0
        """Bytes of the bodies being read or answered now, over every connection."""
        self._server: asyncio.AbstractServer | None = None
        self._connections: dict[asyncio.Task[None], bool] = {}
        """Each connection's task → whether it is inside a request (idle ones are cancelled first)."""
        self._by_uid: Counter[int] = Counter()
        """Connections served now, by their peer's uid."""
        self._refusing = 0
        self.host = ""
        self.port = 0
        self._names: frozenset[str] = frozenset()
        """The host names (and addresses) a request's ``Host`` may give, lower-cased."""

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the bound socket (known once :meth:`start` ran)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def endpoints(self) -> dict[str, str]:
        """``name → URL`` of the named routes, with ``http`` for the server itself."""
        named = {name: self.base_url + path for name, path in self.routes.endpoints().items()}
        return {"http": self.base_url, **named}

    async def start(self, sock: socket.socket) -> None:
        """Serve on ``sock`` (bound and listening, or about to be: ``start_server`` listens)."""
        sock.setblocking(False)
        self.host, self.port = sock.getsockname()[:2]
        self._names = _names_of(self.host)
        self._server = await asyncio.start_server(self._accept, sock=sock, limit=_READ_SIZE)

    async def close(self) -> None:
        """Stop accepting, let requests in progress finish (briefly), then close every connection."""
        if self._server is not None:
            self._server.close()
        for task, busy in list(self._connections.items()):
            if not busy:
                task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=_CLOSE_GRACE)
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections))
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    # --- one connection -------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid, refusal = self._judge(writer)
        if refusal is not None:
            await self._refuse(reader, writer, refusal)
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = False
        self._by_uid[uid] += 1
        try:
            await self._serve(task, reader, writer, uid)
        except (_Closed, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.pop(task, None)
            self._by_uid[uid] -= 1
            if not self._by_uid[uid]:
                del self._by_uid[uid]
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _judge(self, writer: asyncio.StreamWriter) -> tuple[int, str | None]:
        """The connection's peer uid, and why it is not served (None: it is)."""
        sock = writer.get_extra_info("socket")
        try:
            uid = tcp_peer_uid(sock)
        except PeerUnknown as exc:
            log.warning("http: refusing a connection whose owner the kernel cannot name: %s", exc)
            return -1, "unknown_peer"
        if uid != self.own_uid and not self.every_uid:
            log.warning("http: refusing a connection from uid %d (only uid %d is served)", uid, self.own_uid)
            return uid, "other_uid"
        if self._by_uid[uid] >= self.max_connections:
            return uid, "busy"
        return uid, None

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reason: str) -> None:
        """Answer a refused connection, at most :data:`_MAX_REFUSING` at once (past it: close it bare)."""
        self.counters.refused(reason)
        if self._refusing >= _MAX_REFUSING:
            writer.transport.abort()
            return
        self._refusing += 1
        try:
            writer.write(_bare_response(503 if reason == "busy" else 403, reason))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
                await _drop_the_rest(reader, writer)
        finally:
            self._refusing -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _request_refusal(self, route: Route, headers: dict[str, str]) -> tuple[int, str, str] | None:
        """Why a request is not served (status, reason, what to do), or None: checked on its head."""
        if not self._names_this_server(headers.get("host", "")):
            return 403, "wrong_host", "the Host header must name this server by a loopback name or address"
        if headers.get("sec-fetch-site", "").strip().lower() in _CROSS_SITE:
            return 403, "cross_site", "a page of another site cannot call the collector"
        origin = headers.get("origin")
        if origin is not None and not self._names_this_server(urlsplit(origin).netloc):
            return 403, "cross_site", "a page of another origin cannot call the collector"
        if route.access is Access.KEY:
            offered = offered_key(headers)
            if self.key is None or not same_key(offered, self.key):
                why = "wrong_key" if offered else "no_key"
                return 401, why, f"send the user's key in {KEY_HEADER} (gz-ia key prints it; gz-ia install writes it)"
        return None

    def _names_this_server(self, value: str) -> bool:
        """Whether a ``Host`` (or an ``Origin``'s ``host:port``) names this server."""
        name, port = _split_host(value.strip().lower())
        return port == self.port and (name in self._names or _any_literal(name, self._names))

    async def _serve(
        self, task: asyncio.Task[None], reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer_uid: int
    ) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        while True:
            try:
                head = await self._next_event(conn, reader)
            except h11.RemoteProtocolError as exc:
                await self._send_error(conn, writer, exc.error_status_hint, f"bad request: {exc}")
                return
            if isinstance(head, h11.ConnectionClosed):
                return
            assert isinstance(head, h11.Request)
            self._connections[task] = True
            target = urlsplit(head.target.decode("latin-1"))
            methods = self.routes.methods(target.path)
            route = methods.get(head.method.decode("ascii", "replace"))
            if route is None:
                if methods:
                    allowed = ", ".join(sorted(methods))
                    await self._send_error(conn, writer, 405, f"use {allowed}", [("Allow", allowed)])
                else:
                    await self._send_error(conn, writer, 404, f"no such path: {target.path}")
                return
            headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in head.headers}
            refusal = self._request_refusal(route, headers)
            if refusal is not None:
                status, reason, message = refusal
                self.counters.refused(reason)
                extra = [("X-Gz-Ia-Refused", reason), ("Cache-Control", "no-store")]
                if status == 401:
                    extra.append(("WWW-Authenticate", 'Bearer realm="gz-ia"'))
                await self._send_error(conn, writer, status, message, extra, endpoint=route.endpoint)
                return
            if not await self._answer(conn, reader, writer, route, target, headers, peer_uid):
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
            self._connections[task] = False

    async def _answer(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        route: Route,
        target: SplitResult,
        headers: dict[str, str],
        peer_uid: int,
    ) -> bool:
        """Read one request's body, call its handler and send the answer; False when the connection
        is to be closed. The body counts in :attr:`bodies_held` until its answer is sent (a stream's,
        until the stream begins)."""
        try:
            body = await self._read_body(conn, reader, route, headers)
        except h11.RemoteProtocolError as exc:
            await self._send_error(conn, writer, 400, f"bad request body: {exc}", endpoint=route.endpoint)
            return False
        except _BodiesFull:
            await self._send_error(
                conn, writer, 429, "the collector holds as many request bodies as it takes; retry later",
                [("Retry-After", _RETRY_AFTER_BODIES)], endpoint=route.endpoint,
            )  # fmt: skip
            with contextlib.suppress(ConnectionError):
                await _drop_the_rest(reader, writer)
            return False
        if body is None:
            await self._send_error(
                conn, writer, 413, f"body beyond the limit of {route.max_body} bytes", endpoint=route.endpoint
            )
            return False
        request = Request(
            method=route.method,
            path=target.path,
            query=parse_qs(target.query),
            headers=headers,
            body=body,
            peer_uid=peer_uid,
        )
        try:
            try:
                answer = await route.handler(request)
            except Exception:
                log.exception("http: %s %s failed", route.method, target.path)
                await self._send_error(
                    conn, writer, 500, "internal error (see the collector's log)", endpoint=route.endpoint
                )
                return False
            self.counters.answered(route.endpoint or route.path, answer.status)
            if not isinstance(answer, StreamResponse):
                await self._send(conn, writer, answer)
                return True
        finally:
            self.bodies_held -= len(body)
        await self._stream(conn, reader, writer, answer)
        return False

    async def _next_event(self, conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Event:
        """The next event of the request, reading more as h11 needs it."""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await asyncio.wait_for(reader.read(_READ_SIZE), self.idle_timeout)
                except TimeoutError:
                    raise _Closed from None
                conn.receive_data(data)
                continue
            if event is h11.PAUSED:
                raise _Closed
            assert not isinstance(event, type)
            return event

    async def _read_body(
        self,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        route: Route,
        headers: dict[str, str],
    ) -> bytes | None:
        """The whole body, or None when it is beyond ``route.max_body`` (the rest is not read).

        Each part read is counted in :attr:`bodies_held` before it is kept; a body returned stays
        counted (the caller gives it back), one given up is given back here.

        Raises:
            _BodiesFull: keeping the next part would pass :attr:`max_bodies_held`.
        """
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > route.max_body:
            return None
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                event = await self._next_event(conn, reader)
                if isinstance(event, h11.Data):
                    if size + len(event.data) > route.max_body:
                        break
                    if self.bodies_held + len(event.data) > self.max_bodies_held:
                        raise _BodiesFull
                    self.bodies_held += len(event.data)
                    size += len(event.data)
                    parts.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    return b"".join(parts)
                else:
                    raise _Closed
        except BaseException:  # the connection goes (a cancellation included): so does its body
            self.bodies_held -= size
            raise
        self.bodies_held -= size
        return None

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, answer: Response) -> None:
        headers = [
            ("Content-Type", answer.content_type),
            ("Content-Length", str(len(answer.body))),
            *answer.headers,
        ]
        # One write: a head sent alone wakes the client, which on a busy machine can keep this
        # process off the CPU for a scheduling slice before the body follows.
        parts = [conn.send(h11.Response(status_code=answer.status, headers=headers, reason=_reason(answer.status)))]
        if answer.body:
            parts.append(conn.send(h11.Data(data=answer.body)))
        parts.append(conn.send(h11.EndOfMessage()))
        writer.write(b"".join(part for part in parts if part))
        await writer.drain()

    async def _send_error(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        status: int,
        message: str,
        headers: list[tuple[str, str]] | None = None,
        *,
        endpoint: str | None = None,
    ) -> None:
        """Answer an error as JSON ``{"error": message}`` and let the caller close the connection."""
        if endpoint is not None:
            self.counters.answered(endpoint, status)
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        body = _error_body(message)
        response = Response(status, body, headers=[("Connection", "close"), *(headers or [])])
        with contextlib.suppress(h11.LocalProtocolError):
            await self._send(conn, writer, response)

    async def _stream(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: StreamResponse
    ) -> None:
        """Write ``answer``'s chunks as they come until they end or the client goes away."""
        headers = [("Content-Type", answer.content_type), ("Cache-Control", "no-cache"), *answer.headers]
        writer.write(conn.send(h11.Response(status_code=answer.status, headers=headers, reason=_reason(answer.status))))
        await writer.drain()
        gone = asyncio.ensure_future(_until_closed(reader))
        try:
            await _pump(conn, writer, answer.chunks, gone)
        finally:
            gone.cancel()
            closer = getattr(answer.chunks, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()


async def _pump(
    conn: h11.Connection, writer: asyncio.StreamWriter, chunks: AsyncIterator[bytes], gone: asyncio.Future[None]
) -> None:
    iterator = aiter(chunks)
    while True:
        following: asyncio.Future[bytes] = asyncio.ensure_future(anext(iterator))
        waiting: list[asyncio.Future[object]] = [following, gone]  # type: ignore[list-item]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if not following.done():  # the client went away while the stream waited
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await following
            return
        try:
            chunk = following.result()
        except StopAsyncIteration:
            writer.write(conn.send(h11.EndOfMessage()))
            await writer.drain()
            return
        writer.write(conn.send(h11.Data(data=chunk)))
        await writer.drain()


async def _drop_the_rest(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After a refusal: read (and drop) what the peer is still sending, briefly. Closing with unread
    data would reset the connection before the refusal reaches it."""
    writer.write_eof()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_until_closed(reader), 1.0)


async def _until_closed(reader: asyncio.StreamReader) -> None:
    """Return once the client closes its side (anything it sends during a stream is ignored)."""
    while await reader.read(_READ_SIZE):
        pass


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode() + b"\n"


def _split_host(value: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as (host, port); port 80 when not given, -1 when unreadable."""
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        name, _, port = value.rpartition(":") if ":" in value else (value, "", "")
    if not port:
        return name, 80
    return name, int(port) if port.isdigit() else -1


def _names_of(host: str) -> frozenset[str]:
    """The names a ``Host`` may give for a server bound to ``host``: its own address, ``localhost``
    and the loopback addresses. A page of another site reached through DNS rebinding names its own
    host, which is none of these."""
    names = {host.lower(), "localhost", "127.0.0.1", "::1"}
    if not _is_loopback(host):  # bound beyond loopback (metrics_address): any address, and this machine
        names.update({socket.gethostname().lower(), socket.getfqdn().lower(), "*"})
    return frozenset(names)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _any_literal(name: str, names: frozenset[str]) -> bool:
    """An address literal this server may be reached at: any loopback one, and any at all when it
    listens beyond loopback (a page's rebound host is a name, never an address)."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    return address.is_loopback or "*" in names


def _bare_response(status: int, reason: str) -> bytes:
    """A whole HTTP/1.1 answer written before any of the request is read (a refused peer)."""
    body = _error_body(_REFUSALS.get(reason, "refused"))
    head = (
        f"HTTP/1.1 {status} {_reason(status).decode()}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nX-Gz-Ia-Refused: {reason}\r\n\r\n"
    )
    return head.encode("ascii") + body


class ServerThread:
    """An :class:`HttpServer` on an event loop of its own thread.

    For ``/metrics``: it answers while the collector's loop is busy (a scrape then tells why), and its
    bounds are the server's, not a thread per connection.
    """

    def __init__(self, server: HttpServer, sock: socket.socket, name: str) -> None:
        self.server = server
        self._sock = sock
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Serve, once the socket is listening (raises what starting it raised)."""
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start(self._sock))
        except BaseException as exc:  # handed to start()'s caller
            self._failure = exc
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.close())
        self._loop.close()

    def close(self) -> None:
        """Stop serving and wait for the thread to end."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
