"""The loopback HTTP floor on a real socket and the test's event loop: routing, bounds, streams."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
from collections.abc import AsyncIterator

import pytest

from gz_ia.collector.http import HttpServer, Request, Response, Route, Routes, StreamResponse, decoded_body
from gz_ia.collector.http.messages import TooLarge


class Counted:
    def __init__(self) -> None:
        self.answers: list[tuple[str, int]] = []
        self.refusals: list[str] = []

    def answered(self, endpoint: str, status: int) -> None:
        self.answers.append((endpoint, status))

    def refused(self, reason: str) -> None:
        self.refusals.append(reason)


async def echo(request: Request) -> Response:
    body = {"path": request.path, "query": request.query, "size": len(request.body), "uid": request.peer_uid}
    return Response(200, json.dumps(body).encode())


async def failing(_request: Request) -> Response:
    raise RuntimeError("handler bug")


KEY = "test-key-" + "k" * 40


def signed(raw: bytes, port: int, key: str = KEY) -> bytes:
    """``raw`` as one of the user's programs sends it: naming this server in ``Host``, with the key
    (the placeholder ``Host: x`` replaced)."""
    return raw.replace(b"Host: x\r\n", f"Host: 127.0.0.1:{port}\r\nX-Gz-Ia-Key: {key}\r\n".encode())


async def exchange(port: int, raw: bytes, *, until_close: bool = True, sign: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(signed(raw, port) if sign else raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(-1) if until_close else reader.read(65536), 30)
    writer.close()
    return data


async def started(routes: Routes, counters: Counted, *, own_uid: int | None = None) -> HttpServer:
    import os

    server = HttpServer(routes, own_uid=os.getuid() if own_uid is None else own_uid, key=KEY, counters=counters)
    sock = socket.create_server(("127.0.0.1", 0))
    await server.start(sock)
    return server


def routes() -> Routes:
    return Routes(
        [
            Route("POST", "/echo", echo, max_body=1000, endpoint="echo"),
            Route("GET", "/files/", echo, prefix=True),
            Route("GET", "/bug", failing),
        ]
    )


async def test_a_request_reaches_its_route_with_query_and_body_and_keeps_the_connection() -> None:
    counters = Counted()
    server = await started(routes(), counters)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    for _ in range(2):  # two requests on one connection
        writer.write(signed(b"POST /echo?a=1&a=2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", server.port))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        body = json.loads(await reader.readexactly(length))
        assert body["path"] == "/echo" and body["query"] == {"a": ["1", "2"]} and body["size"] == 5
    writer.close()
    prefixed = await exchange(server.port, b"GET /files/a/b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert b'"path": "/files/a/b"' in prefixed
    await server.close()
    assert counters.answers == [("echo", 200), ("echo", 200), ("/files/", 200)]
    assert server.endpoints() == {"http": server.base_url, "echo": server.base_url + "/echo"}


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", b"404"),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", b"405"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n", b"413"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + b"x" * 2000, b"413"),
        (b"NOT HTTP AT ALL\r\n\r\n", b"400"),
        (b"GET /bug HTTP/1.1\r\nHost: x\r\n\r\n", b"500"),
    ],
)
async def test_what_cannot_be_served_is_answered_and_the_server_goes_on(raw: bytes, status: bytes) -> None:
    server = await started(routes(), Counted())
    answer = await exchange(server.port, raw)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert b'"error"' in answer
    fine = await exchange(
        server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    )
    assert fine.startswith(b"HTTP/1.1 200")
    await server.close()


async def test_a_peer_of_another_uid_is_refused_before_its_request_is_read() -> None:
    # The server is told it serves uid 4242 alone; the test's own connection is then "another uid".
    # (tests/integration/test_http_side.py checks the same with a real second uid.)
    counters = Counted()
    server = await started(routes(), counters, own_uid=4242)
    answer = await exchange(server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    assert answer.startswith(b"HTTP/1.1 403") and b"X-Gz-Ia-Refused: other_uid" in answer
    await server.close()
    assert counters.refusals == ["other_uid"] and counters.answers == []


async def test_a_stream_sends_each_chunk_as_it_comes_and_stops_when_the_client_goes() -> None:
    produced: list[int] = []
    closed = asyncio.Event()
    more = asyncio.Event()

    async def ticks() -> AsyncIterator[bytes]:
        try:
            for n in range(1000):
                produced.append(n)
                yield f"data: {n}\n\n".encode()
                if n == 1:
                    await more.wait()  # held: the client must see the first two before any third
        finally:
            closed.set()

    async def live(_request: Request) -> StreamResponse:
        return StreamResponse(200, "text/event-stream", ticks())

    server = await started(Routes([Route("GET", "/live", live)]), Counted())
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(signed(b"GET /live HTTP/1.1\r\nHost: x\r\n\r\n", server.port))
    await writer.drain()
    seen = b""
    while b"data: 1\n\n" not in seen:
        seen += await asyncio.wait_for(reader.read(4096), 30)
    assert b"Transfer-Encoding: chunked" in seen and b"data: 0\n\n" in seen
    writer.close()  # the client goes away while the stream waits for its next chunk
    await asyncio.wait_for(closed.wait(), 30)
    assert produced == [0, 1]
    await server.close()


async def test_close_lets_a_request_in_progress_finish() -> None:
    entered = asyncio.Event()
    release = asyncio.Event()

    async def slow(_request: Request) -> Response:
        entered.set()
        await release.wait()
        return Response(200, b"{}")

    server = await started(Routes([Route("GET", "/slow", slow)]), Counted())
    pending = asyncio.ensure_future(exchange(server.port, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
    await asyncio.wait_for(entered.wait(), 30)
    closing = asyncio.ensure_future(server.close())
    await asyncio.sleep(0)
    release.set()
    await closing
    assert (await pending).startswith(b"HTTP/1.1 200")


def request_with(body: bytes, encoding: str | None) -> Request:
    headers = {"content-encoding": encoding} if encoding else {}
    return Request(method="POST", path="/", query={}, headers=headers, body=body, peer_uid=0)


def test_decoded_body_undoes_gzip_within_its_limit_and_refuses_a_bomb() -> None:
    assert decoded_body(request_with(gzip.compress(b"abc" * 10), "gzip"), 100) == b"abc" * 10
    assert decoded_body(request_with(b"plain", None), 100) == b"plain"
    bomb = gzip.compress(b"\0" * (10 << 20))  # about 10 KiB that would expand to 10 MiB
    with pytest.raises(TooLarge):
        decoded_body(request_with(bomb, "gzip"), 1 << 20)
    with pytest.raises(ValueError, match="cannot be decompressed"):
        decoded_body(request_with(b"not gzip", "gzip"), 100)
    with pytest.raises(ValueError, match="truncated"):
        decoded_body(request_with(gzip.compress(b"abc" * 100)[:20], "gzip"), 1000)
    with pytest.raises(ValueError, match="not supported"):
        decoded_body(request_with(b"x", "br"), 100)


async def test_bodies_held_past_the_servers_bound_are_answered_429_and_the_count_returns() -> None:
    """Two requests whose bodies are still arriving: the one that would take the bodies held past
    the bound is answered 429 with Retry-After; once the first is answered, the bytes are free again."""
    import os

    counters = Counted()
    server = HttpServer(routes(), own_uid=os.getuid(), key=KEY, counters=counters, max_bodies_held=1500)
    await server.start(socket.create_server(("127.0.0.1", 0)))
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n"
    first_reader, first = await asyncio.open_connection("127.0.0.1", server.port)
    first.write(signed(head, server.port) + b"a" * 800)  # 800 bytes held, 100 still to come
    await first.drain()
    for _ in range(100):
        if server.bodies_held == 800:
            break
        await asyncio.sleep(0.01)
    assert server.bodies_held == 800
    refused = await exchange(server.port, head + b"b" * 900)
    assert refused.startswith(b"HTTP/1.1 429") and b"Retry-After: 1" in refused
    first.write(b"a" * 100)
    await first.drain()
    answer = await first_reader.readuntil(b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200")
    first.close()
    assert server.bodies_held == 0
    again = await exchange(server.port, head.replace(b"Host: x", b"Host: x\r\nConnection: close") + b"c" * 900)
    assert b'"size": 900' in again and server.bodies_held == 0
    assert ("echo", 429) in counters.answers
    await server.close()


# --- who is heard: the peer alive, a Host naming this server, no cross-site browser, the key ---------


async def test_a_peer_that_closed_before_it_was_judged_is_refused() -> None:
    """A request sent whole and closed before the lookup leaves a socket no process holds (uid 0 in
    the kernel's table, whoever sent it): refused, never taken for the collector's own user."""
    counters = Counted()
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sender = socket.create_connection(("127.0.0.1", port))
    sender.sendall(signed(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi", port))
    sender.close()  # gone before the server has even accepted it
    import os

    server = HttpServer(routes(), own_uid=os.getuid(), key=KEY, counters=counters)
    await server.start(sock)
    for _ in range(200):
        if counters.refusals:
            break
        await asyncio.sleep(0.01)
    await server.close()
    assert counters.refusals == ["unknown_peer"] and counters.answers == []


@pytest.mark.parametrize(
    ("host", "served"),
    [
        ("127.0.0.1:{port}", True),
        ("localhost:{port}", True),
        ("LOCALHOST:{port}", True),
        ("127.0.0.2:{port}", True),
        ("attacker.example:{port}", False),  # a page that rebound its own name to 127.0.0.1
        ("localhost.attacker.example:{port}", False),
        ("127.0.0.1:{other}", False),
        ("127.0.0.1", False),
        ("", False),
    ],
)
async def test_a_request_must_name_this_server_in_its_host(host: str, served: bool) -> None:
    counters = Counted()
    server = await started(routes(), counters)
    value = host.format(port=server.port, other=server.port + 1)
    raw = f"POST /echo HTTP/1.1\r\nHost: {value}\r\nX-Gz-Ia-Key: {KEY}\r\nContent-Length: 2\r\n\r\nhi".encode()
    if not value:
        raw = raw.replace(b"Host: \r\n", b"")
    answer = await exchange(server.port, raw, sign=False, until_close=not served)
    await server.close()
    if served:
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    elif not value:  # HTTP/1.1 without a Host is not HTTP/1.1
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    else:
        assert answer.startswith(b"HTTP/1.1 403") and b"X-Gz-Ia-Refused: wrong_host" in answer, answer[:200]
        assert counters.refusals == ["wrong_host"]


@pytest.mark.parametrize(
    ("extra", "status", "reason"),
    [
        ("", b"401", b"no_key"),
        ("X-Gz-Ia-Key: not-the-key\r\n", b"401", b"wrong_key"),
        ("Authorization: Bearer not-the-key\r\n", b"401", b"wrong_key"),
        (f"Authorization: Bearer {KEY}\r\n", b"200", None),
        (f"X-Gz-Ia-Key: {KEY}\r\nSec-Fetch-Site: cross-site\r\n", b"403", b"cross_site"),
        (f"X-Gz-Ia-Key: {KEY}\r\nSec-Fetch-Site: same-site\r\n", b"403", b"cross_site"),
        (f"X-Gz-Ia-Key: {KEY}\r\nOrigin: http://attacker.example\r\n", b"403", b"cross_site"),
        (f"X-Gz-Ia-Key: {KEY}\r\nOrigin: null\r\n", b"403", b"cross_site"),
        (f"X-Gz-Ia-Key: {KEY}\r\nOrigin: http://127.0.0.1:{{port}}\r\nSec-Fetch-Site: same-origin\r\n", b"200", None),
    ],
)
async def test_a_route_that_writes_asks_for_the_key_and_no_browser_of_another_site(
    extra: str, status: bytes, reason: bytes | None
) -> None:
    """What a page can send without a preflight (a form post, a beacon, a no-cors fetch: no custom
    header) has no key: 401, and the handler never runs; a browser's cross-site marks are refused."""
    counters = Counted()
    server = await started(routes(), counters)
    head = f"POST /echo HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{extra.format(port=server.port)}"
    raw = (head + "Content-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi").encode()
    answer = await exchange(server.port, raw, sign=False)
    await server.close()
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:300]
    if reason is None:
        assert counters.answers == [("echo", 200)]
    else:
        assert b"X-Gz-Ia-Refused: " + reason in answer
        assert counters.answers == [("echo", int(status))] and counters.refusals == [reason.decode()]
    if status == b"401":
        assert b"WWW-Authenticate: Bearer" in answer and b"gz-ia key" in answer


async def test_open_and_browser_routes_ask_for_no_key_at_the_floor_but_still_a_host() -> None:
    """``/metrics`` (open) and the web view (its handler judges its cookie) take no key header; the
    Host and the cross-site checks hold for them too."""
    from gz_ia.collector.http import Access

    routes_ = Routes(
        [Route("GET", "/open", echo, access=Access.OPEN), Route("GET", "/page", echo, access=Access.BROWSER)]
    )
    server = await started(routes_, Counted())
    for path in ("/open", "/page"):
        fine = f"GET {path} HTTP/1.1\r\nHost: localhost:{server.port}\r\nConnection: close\r\n\r\n".encode()
        assert (await exchange(server.port, fine, sign=False)).startswith(b"HTTP/1.1 200")
        rebound = f"GET {path} HTTP/1.1\r\nHost: attacker.example:{server.port}\r\n\r\n".encode()
        assert (await exchange(server.port, rebound, sign=False)).startswith(b"HTTP/1.1 403")
    await server.close()


async def test_one_uids_connections_are_bounded_and_others_are_served_again_when_they_close() -> None:
    """Past ``max_connections`` held by one uid, its next connection is answered 503 before its
    request is read; once one closes, a new one is served."""
    import os

    counters = Counted()
    server = HttpServer(routes(), own_uid=os.getuid(), key=KEY, counters=counters, max_connections=2)
    await server.start(socket.create_server(("127.0.0.1", 0)))
    held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
    await asyncio.sleep(0.1)
    refused = await exchange(server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
    assert refused.startswith(b"HTTP/1.1 503") and b"X-Gz-Ia-Refused: busy" in refused
    held[0][1].close()
    await asyncio.sleep(0.1)
    fine = await exchange(
        server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi"
    )
    assert fine.startswith(b"HTTP/1.1 200")
    held[1][1].close()
    await server.close()
    assert counters.refusals == ["busy"]
