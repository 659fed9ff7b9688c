"""Who may read the web view: the user's own browser sessions, and no page of another site.

The HTTP floor already refuses every process of another uid, every ``Host`` that does not name the
server (a page rebinding its DNS name to 127.0.0.1) and every request a browser marks as coming from
another site. A browser is one process for every site it shows, though, so the view also asks for
the user's key (:mod:`gz_ia.collector.http.key`): ``gz-ia ui`` hands it to the browser once, through
a ``0600`` file it opens (never on the browser's command line), and the page trades it for an
``HttpOnly; SameSite=Strict`` cookie. The cookie is not the key: it is derived from it for this port
alone (browsers send a host's cookies to every port of that host), and it opens the view's reads
only, never a route that writes. A program may send the key itself, as to every other route.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from urllib.parse import urlsplit

from gz_ia.collector.http import Request, Response, offered_key
from gz_ia.collector.http.key import same_key

__all__ = ["UiAccess"]


def _forbidden(why: str) -> Response:
    return Response(403, b'{"error": "%s"}\n' % why.encode(), headers=[("Cache-Control", "no-store")])


class UiAccess:
    """The checks every web view request passes beyond the HTTP floor's, and the cookie they accept.

    Args:
        key: the user's key (None while the HTTP side has none: everything is refused).
        base_url: the HTTP side's ``http://host:port`` (read at each request: known once it is bound).
    """

    def __init__(self, key: Callable[[], str | None], base_url: Callable[[], str]) -> None:
        self._key = key
        self._base_url = base_url

    @property
    def port(self) -> int:
        return urlsplit(self._base_url()).port or 0

    @property
    def cookie_name(self) -> str:
        """One cookie per port: cookies are per host, and several collectors may share a host."""
        return f"gzia_ui_{self.port}"

    def cookie_value(self) -> str:
        """The cookie's value: the key's HMAC for this port, so it opens this view and nothing else."""
        key = self._key() or ""
        return hmac.new(key.encode(), f"gz-ia web view {self.port}".encode(), hashlib.sha256).hexdigest()

    def refusal(self, request: Request) -> Response | None:
        """Why ``request`` is not served (a 403 answer), or None."""
        key = self._key()
        if key is None:
            return _forbidden("the collector has no key: see its log")
        offered = request.query.get("key", [""])[0] or offered_key(request.headers)
        if same_key(offered, key) or same_key(self._cookie(request), self.cookie_value()):
            return None
        return _forbidden("no key: open the address gz-ia ui gives")

    def _cookie(self, request: Request) -> str:
        name = self.cookie_name
        for part in request.headers.get("cookie", "").split(";"):
            name_given, _, value = part.strip().partition("=")
            if name_given == name:
                return value
        return ""

    def set_cookie(self) -> tuple[str, str]:
        """The header that keeps the page's credential in the browser, out of the page's reach."""
        return ("Set-Cookie", f"{self.cookie_name}={self.cookie_value()}; HttpOnly; SameSite=Strict; Path=/")
