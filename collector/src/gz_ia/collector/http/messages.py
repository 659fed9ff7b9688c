"""What a route handler receives and returns, and the table that finds the handler of a request."""

from __future__ import annotations

import enum
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from gz_ia.collector.errors import CollectorError

__all__ = [
    "Access",
    "Handler",
    "Request",
    "Response",
    "Route",
    "Routes",
    "StreamResponse",
    "TooLarge",
    "decoded_body",
]

DEFAULT_MAX_BODY: Final = 1 << 20


class TooLarge(CollectorError, ValueError):
    """A body (as sent, or once decompressed) is beyond its route's limit: answered 413."""


@dataclass(frozen=True, slots=True)
class Request:
    """One request, its body read whole (within its route's ``max_body``).

    Attributes:
        method: ``GET``, ``POST``...
        path: the target without its query string.
        query: the query string's fields, each with every value it was given.
        headers: lower-cased names; a repeated header keeps its last value.
        body: as sent: a ``Content-Encoding`` is not undone (:func:`decoded_body` does).
        peer_uid: the uid of the process that connected (always the collector's own: others are
            refused before any handler runs).
    """

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    peer_uid: int


@dataclass(slots=True)
class Response:
    """A whole answer."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class StreamResponse:
    """An answer written as its chunks come (Server-Sent Events); the server stops iterating (and
    closes ``chunks``) when the client goes away."""

    status: int
    content_type: str
    chunks: AsyncIterator[bytes]
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response | StreamResponse]]


class Access(enum.Enum):
    """What a route asks of a request beyond the server's own checks (its peer's uid, a loopback
    ``Host``, no browser's cross-site signal), which every route passes first."""

    KEY = "key"
    """The user's key in a header (:mod:`.key`): every route that writes or answers about sessions.
    No web page can send one: a custom header needs a CORS preflight, which is never granted."""
    BROWSER = "browser"
    """The handler judges the page's own credential (the web view's cookie, got with the key)."""
    OPEN = "open"
    """Nothing more: what any admitted uid may read (``/metrics``, which Prometheus scrapes)."""


@dataclass(frozen=True, slots=True)
class Route:
    """``method path`` → ``handler``.

    Attributes:
        prefix: the route also serves every path under ``path`` (which then ends with ``/``).
        max_body: the largest body read for it; beyond, 413 without reading the rest.
        endpoint: the name ``gz-ia status --json`` lists this route's URL under (``endpoints``).
        listed: the path listed under ``endpoint`` when it is not ``path`` itself (``""``: the base
            URL, as an OTLP exporter's endpoint takes it).
        access: what a request must show besides the server's own checks (the key, by default).
    """

    method: str
    path: str
    handler: Handler
    prefix: bool = False
    max_body: int = DEFAULT_MAX_BODY
    endpoint: str | None = None
    listed: str | None = None
    access: Access = Access.KEY


class Routes:
    """The routes of one server, found by exact path first, then by the longest prefix."""

    def __init__(self, routes: Iterable[Route] = ()) -> None:
        self._exact: dict[str, dict[str, Route]] = {}
        self._prefixes: list[tuple[str, dict[str, Route]]] = []
        for route in routes:
            self.add(route)

    def add(self, route: Route) -> None:
        """Serve ``route``; a second route for the same method and path is a programming error."""
        if route.prefix:
            known = dict(self._prefixes)
            methods = known.get(route.path, {})
            if route.path not in known:
                self._prefixes.append((route.path, methods))
                self._prefixes.sort(key=lambda item: -len(item[0]))
        else:
            methods = self._exact.setdefault(route.path, {})
        if route.method in methods:
            raise ValueError(f"two routes for {route.method} {route.path}")
        methods[route.method] = route

    def methods(self, path: str) -> dict[str, Route]:
        """The routes serving ``path``, by method (empty: no route has it)."""
        exact = self._exact.get(path)
        if exact:
            return exact
        for prefix, methods in self._prefixes:
            if path.startswith(prefix):
                return methods
        return {}

    def endpoints(self) -> dict[str, str]:
        """``name → path`` of the routes that name an endpoint."""
        named = [route for methods in self._exact.values() for route in methods.values()]
        named += [route for _prefix, methods in self._prefixes for route in methods.values()]
        return {
            route.endpoint: route.path if route.listed is None else route.listed for route in named if route.endpoint
        }


def decoded_body(request: Request, limit: int) -> bytes:
    """The body with its ``Content-Encoding`` (gzip or deflate) undone, never beyond ``limit`` bytes.

    Raises:
        TooLarge: the decoded body would be beyond ``limit`` (a small gzip bomb is refused without
            being expanded).
        ValueError: an encoding this server does not decode, or a damaged compressed body.
    """
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        if len(request.body) > limit:
            raise TooLarge(f"body of {len(request.body)} bytes is beyond the limit of {limit}")
        return request.body
    if encoding == "gzip":
        window = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        window = zlib.MAX_WBITS
    else:
        raise ValueError(f"Content-Encoding {encoding!r} is not supported (gzip, deflate or none)")
    inflater = zlib.decompressobj(window)
    try:
        out = inflater.decompress(request.body, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"the {encoding} body cannot be decompressed: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise TooLarge(f"the {encoding} body decompresses beyond the limit of {limit} bytes")
    if not inflater.eof:
        raise ValueError(f"the {encoding} body is truncated")
    return out
