"""Who may read the web view: the user's own browser sessions, and no page of another site.

The HTTP floor already refuses every process of another uid (peer credentials). A browser is one
process for every site it shows, though, so the view also asks for a secret drawn at each collector
start: ``gz-ia ui`` passes it once in the URL (``?key=``), and the page trades it for an
``HttpOnly; SameSite=Strict`` cookie. A page of another site cannot read the secret, and its
requests carry no cookie (SameSite) and a foreign ``Origin``. A page that rebinds its DNS name to
127.0.0.1 is same-origin with itself only: its requests name its own host in ``Host``, which is
refused, as is any ``Origin`` or ``Sec-Fetch-Site`` other than this server's own.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from urllib.parse import urlsplit

from gz_ia.collector.http import Request, Response

__all__ = ["UiAccess"]

_LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _forbidden(why: str) -> Response:
    return Response(403, b'{"error": "%s"}\n' % why.encode(), headers=[("Cache-Control", "no-store")])


class UiAccess:
    """The per-start secret and the checks every web view request passes.

    Args:
        base_url: the HTTP side's ``http://host:port`` (read at each request: known once it is bound).
        secret: the secret (random when not given).
    """

    def __init__(self, base_url: Callable[[], str], secret: str | None = None) -> None:
        self.secret = secret if secret is not None else secrets.token_urlsafe(24)
        self._base_url = base_url

    @property
    def cookie_name(self) -> str:
        """One cookie per port: cookies are per host, and several collectors may share a host."""
        return f"gzia_ui_{urlsplit(self._base_url()).port or 0}"

    def allowed_hosts(self) -> set[str]:
        """The ``Host`` values of this server: its own address and loopback names at its port."""
        parts = urlsplit(self._base_url())
        port = parts.port
        return {parts.netloc, *(f"{name}:{port}" for name in _LOCAL_NAMES)}

    def refusal(self, request: Request) -> Response | None:
        """Why ``request`` is not served (a 403 answer), or None."""
        hosts = self.allowed_hosts()
        if request.headers.get("host", "") not in hosts:
            return _forbidden("wrong Host: open the address gz-ia ui gives")
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc not in hosts:
            return _forbidden("cross-origin request")
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return _forbidden("cross-site request")
        if self._has_secret(request):
            return None
        return _forbidden("no key: open the address gz-ia ui gives")

    def _has_secret(self, request: Request) -> bool:
        offered = request.query.get("key", [""])[0] or self._cookie(request)
        return bool(offered) and hmac.compare_digest(offered.encode(), self.secret.encode())

    def _cookie(self, request: Request) -> str:
        name = self.cookie_name
        for part in request.headers.get("cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return ""

    def set_cookie(self) -> tuple[str, str]:
        """The header that keeps the secret in the browser, out of the page's reach."""
        return ("Set-Cookie", f"{self.cookie_name}={self.secret}; HttpOnly; SameSite=Strict; Path=/")
