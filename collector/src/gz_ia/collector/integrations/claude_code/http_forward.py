"""``gz-ia hook claude-code --http URL``: a payload Claude Code posts no ``http`` hook for, forwarded.

Claude Code runs no ``http`` handler for some events (``SessionStart``), so with the ``http``
transport those run the command hook, which posts the payload to the collector as Claude Code would,
with the same headers and the user's key: the collector then holds the whole session's state. It
sends nothing to a port another uid listens on (a port is first come, first served among a machine's
users: whoever took it would receive the payload). When nothing of the user's answers there the
caller logs the payload as the command hook does (the collector's own state then lacks what it said).
"""

from __future__ import annotations

import http.client
import os
import sys
import urllib.parse
from typing import Final

from gz_ia.client import env
from gz_ia.collector.credentials import load_credentials
from gz_ia.collector.http import KEY_HEADER, listener_uid

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
    port = parts.port or 80
    try:
        holder = listener_uid(parts.hostname, port)
    except (OSError, ValueError):  # nothing listens, no socket table: the socket then
        return False
    if holder not in (os.geteuid(), 0):
        sys.stderr.write(
            f"gz-ia: {parts.hostname}:{port} is held by uid {holder}, not by you: the hook was not sent there "
            "(logged over the collector's socket instead); see `gz-ia status`\n"
        )
        return False
    try:
        key = load_credentials(env.state_dir(), create=False).key
    except OSError:  # no key yet: no collector of this user has served HTTP
        return False
    headers = {"Content-Type": "application/json", KEY_HEADER: key}
    for header, variable in HTTP_ENV_VARS.items():
        headers[header] = os.environ.get(variable, "")
    if root is not None:
        headers["X-Gz-Ia-Root"] = root
    elif headers["X-Gz-Ia-Root"]:
        headers["X-Gz-Ia-Root"] = env.absolute(headers["X-Gz-Ia-Root"])  # relative to where the hook runs
    connection = http.client.HTTPConnection(parts.hostname, port, timeout=FORWARD_TIMEOUT)
    try:
        connection.request("POST", parts.path or "/", body=raw, headers=headers)
        response = connection.getresponse()
        response.read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
    return 200 <= response.status < 300
