"""The web view's routes on the collector's HTTP side: the page, its JSON and ``/live``.

``/ui/`` serves the page and its static files (package data, no build step), ``/ui/api/...`` the
JSON it reads (:mod:`.api`, run in a thread: the files are read off the event loop), and ``/live``
the Server-Sent Events (:mod:`.sse`). Every one of them passes :class:`.access.UiAccess` first.
"""

from __future__ import annotations

import asyncio
import functools
import html
import json
import os
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

from gz_ia.collector import reading
from gz_ia.collector.http import Access, Request, Response, Route, StreamResponse
from gz_ia.collector.live import Hub
from gz_ia.collector.reading import SessionSummary

from . import api
from .access import UiAccess
from .sse import live_stream

__all__ = ["WebView"]

_STATIC: Final = {
    "": ("index.html", "text/html; charset=utf-8"),
    "index.html": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "app.css": ("app.css", "text/css; charset=utf-8"),
    "icon.svg": ("icon.svg", "image/svg+xml"),
}
_SECURITY_HEADERS: Final = [
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
]


_REFUSED_PAGE: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gz-ia: open the page again</title></head>
<body><h1>gz-ia: open the page again</h1>
<p>The collector no longer recognises this browser's key for the page: it was started with a new key,
or the browser forgot its cookie (closed, or private browsing).</p>
<p>Run <code>gz-ia ui</code> in the workspace (or open the address <code>gz-ia ui --no-browser</code>
prints): it opens this page again.</p>
<p><small>{why}</small></p></body></html>
"""
"""What a browser shows instead of a refusal's JSON when it opens the page itself: what to do."""


def _json(data: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(data, default=str).encode() + b"\n", headers=list(_SECURITY_HEADERS))


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


class WebView:
    """The page and its endpoints for one collector.

    Args:
        hub: the collector's live hub.
        roots: the session roots the collector serves (real paths); only those are read.
        base_url: the HTTP side's base URL, once bound.
        in_memory: the summaries the collector holds in memory for a root (by real path), called on
            the loop (see :mod:`.memory`); None: everything from the files.
        key: the user's key, once the HTTP side has one (see :mod:`.access`).
        root_to_come: why a root the collector does not write yet may not be waited for (None: it
            may: a page opened before a workspace's first event waits for it); None: only the
            roots served are.
    """

    def __init__(
        self,
        hub: Hub,
        roots: Callable[[], Iterable[str]],
        base_url: Callable[[], str],
        in_memory: Callable[[str], dict[str, SessionSummary]] | None = None,
        key: Callable[[], str | None] = lambda: None,
        root_to_come: Callable[[str], str | None] | None = None,
    ) -> None:
        self.hub = hub
        self._in_memory = in_memory
        self._roots = roots
        self._base_url = base_url
        self._key = key
        self._root_to_come = root_to_come
        self.access = UiAccess(key, base_url)

    def url(self, root: str | os.PathLike[str] | None = None) -> str:
        """The address ``gz-ia ui`` opens: the page with the key (and the root to show)."""
        query = {"key": self._key() or ""}
        if root is not None:
            query["root"] = os.fspath(root)
        return f"{self._base_url()}/ui/?{urlencode(query)}"

    def routes(self) -> list[Route]:
        """``/ui/`` (prefix, listed as ``endpoints.ui``) and ``/live`` (``endpoints.live``)."""
        return [
            Route("GET", "/ui/", self._ui, prefix=True, endpoint="ui", access=Access.BROWSER),
            Route("GET", "/live", self._live, endpoint="live", access=Access.BROWSER),
        ]

    def _root(self, request: Request) -> Path | Response:
        """The root asked for (``root=``), if this collector serves it; the only one when not named."""
        served = sorted(set(self._roots()))
        asked = request.query.get("root", [""])[0]
        if not asked:
            if len(served) == 1:
                return Path(served[0])
            return _json({"error": "name the session root: ?root=PATH", "roots": served}, 400)
        real = os.path.realpath(asked)
        if real not in served:
            problem = self._root_to_come(real) if self._root_to_come is not None else "not served"
            if problem is not None:
                return _json({"error": f"{asked} is not a root this collector writes", "roots": served}, 404)
        return Path(real)

    async def _live(self, request: Request) -> Response | StreamResponse:
        refusal = self.access.refusal(request)
        if refusal is not None:
            return refusal
        root = self._root(request)
        if isinstance(root, Response):
            return root
        family = functools.partial(api.session_family, root, known=self._known(root))
        return await live_stream(request, self.hub, str(root), family)

    def _known(self, root: Path) -> dict[str, SessionSummary]:
        return self._in_memory(str(root)) if self._in_memory is not None else {}

    async def _ui(self, request: Request) -> Response | StreamResponse:
        name = request.path.removeprefix("/ui/")
        refusal = self.access.refusal(request)
        if refusal is not None:
            if name in ("", "index.html") and request.headers.get("sec-fetch-dest", "document") == "document":
                return _refused_page(refusal)
            return refusal
        if name in _STATIC:
            if "key" in request.query:
                # Trade the key in the address for the cookie, and drop it from the address bar.
                rest = {key: values for key, values in request.query.items() if key != "key"}
                location = "/ui/" + ("?" + urlencode(rest, doseq=True) if rest else "")
                return Response(303, b"", headers=[self.access.set_cookie(), ("Location", location)])
            filename, content_type = _STATIC[name]
            return Response(200, _static(filename), content_type, headers=list(_SECURITY_HEADERS))
        if name == "api/roots":
            return _json({"roots": sorted(set(self._roots()))})
        if name == "live":
            return await self._live(request)
        root = self._root(request)
        if isinstance(root, Response):
            return root
        query = request.query
        session = query.get("session", [""])[0]
        try:
            if name == "api/sessions":
                data = await asyncio.to_thread(
                    api.session_page,
                    root,
                    offset=_number(query, "offset", 0),
                    limit=_number(query, "limit", 100),
                    text=query.get("q", [""])[0],
                    matches=query.get("match", []),
                    known=self._known(root),
                    hung_after=_number(query, "hung", 300),
                )
                return _json(data)
            if name == "api/why":
                return _json(await asyncio.to_thread(api.first_failure, root, session))
            if name == "api/tree":
                return _json(await asyncio.to_thread(api.session_tree, root, session, self._known(root)))
            if name == "api/cycles":
                return _json(await asyncio.to_thread(api.session_cycles, root, session, self._known(root)))
            if name == "api/events":
                before = query.get("before", [""])[0] or None
                window = functools.partial(api.event_window, root, session, before=before)
                return _json(await asyncio.to_thread(window, limit=_number(query, "limit", 500)))
            if name == "api/transcript":
                found = await asyncio.to_thread(api.transcript_of, root, session)
                if found is None:
                    return _json({"error": "the session names no transcript"}, 404)
                return Response(200, found[1], "text/plain; charset=utf-8", headers=list(_SECURITY_HEADERS))
        except ValueError as exc:  # a bad FIELD=VALUE, an invalid cursor
            return _json({"error": str(exc)}, 400)
        except reading.SessionNotFound as exc:
            return _json({"error": str(exc)}, 404)
        return _json({"error": f"no such page: {request.path}"}, 404)


def _refused_page(refusal: Response) -> Response:
    """The refusal of the page itself as a page a person reads (a reload after the key changed)."""
    try:
        why = str(json.loads(refusal.body)["error"])
    except (ValueError, KeyError, TypeError):
        why = ""
    body = _REFUSED_PAGE.format(why=html.escape(why)).encode()
    return Response(refusal.status, body, "text/html; charset=utf-8", headers=list(_SECURITY_HEADERS))


def _number(query: dict[str, list[str]], name: str, default: int) -> int:
    value = query.get(name, [""])[0]
    return int(value) if value.isdigit() else default
