"""``gz-ia hook claude-code --http URL``: a payload Claude Code posts no ``http`` hook for, forwarded.

Claude Code runs no ``http`` handler for some events (``SessionStart``), so with the ``http``
transport those run the command hook, which posts the payload to the collector as Claude Code would,
with the same headers: the collector then holds the whole session's state. When nothing answers
there the caller logs the payload as the command hook does (the collector's own state then lacks
what it said).
"""

from __future__ import annotations

import http.client
import os
import urllib.parse
from typing import Final

from gz_ia.client import env

from .settings import HTTP_ENV_VARS

__all__ = ["FORWARD_TIMEOUT", "forward"]

FORWARD_TIMEOUT: Final = 2.0
"""Seconds to connect and be answered."""


def forward(raw: bytes, url: str, *, root: str | None = None) -> bool:
    """POST ``raw`` to the loopback ``url``; True once answered 2xx.

    Args:
        raw: the payload as read from stdin.
        url: the collector's hook URL (``http://127.0.0.1:PORT/hooks/claude-code``).
        root: the session root given on the command line (``gz-ia --root``), sent as ``$GZ_IA_ROOT`` is.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    headers = {"Content-Type": "application/json"}
    for header, variable in HTTP_ENV_VARS.items():
        headers[header] = os.environ.get(variable, "")
    if root is not None:
        headers["X-Gz-Ia-Root"] = root
    elif headers["X-Gz-Ia-Root"]:
        headers["X-Gz-Ia-Root"] = env.absolute(headers["X-Gz-Ia-Root"])  # relative to where the hook runs
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=FORWARD_TIMEOUT)
    try:
        connection.request("POST", parts.path or "/", body=raw, headers=headers)
        response = connection.getresponse()
        response.read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
    return 200 <= response.status < 300
