"""How a request shows the user's key (:mod:`gz_ia.collector.credentials` says why there is one).

Programs send it as ``X-Gz-Ia-Key: <key>`` or ``Authorization: Bearer <key>``: a header that a web page
cannot set on a request to another origin without a CORS preflight, which this server never grants.
"""

from __future__ import annotations

import hmac
from typing import Final

__all__ = ["KEY_HEADER", "offered_key", "same_key"]

KEY_HEADER: Final = "x-gz-ia-key"
"""The header that carries the key (``Authorization: Bearer <key>`` is taken too)."""


def offered_key(headers: dict[str, str]) -> str:
    """The key a request offers in its headers (``X-Gz-Ia-Key``, else ``Authorization: Bearer``)."""
    offered = headers.get(KEY_HEADER, "").strip()
    if offered:
        return offered
    scheme, _, value = headers.get("authorization", "").strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def same_key(offered: str, key: str) -> bool:
    """Compare in constant time (a timing difference must not spell the key out)."""
    return bool(offered) and hmac.compare_digest(offered.encode(), key.encode())
