"""The two systemd protocols the collector speaks, without libsystemd.

Socket activation (sd_listen_fds(3)): inherited listening sockets start at fd 3, announced by
``LISTEN_FDS``/``LISTEN_PID``/``LISTEN_FDNAMES``, valid only when ``LISTEN_PID`` is our pid.

Readiness and watchdog (sd_notify(3)): one ``AF_UNIX`` datagram per message to ``$NOTIFY_SOCKET``,
a leading ``@`` meaning the abstract namespace. Without ``NOTIFY_SOCKET`` every call is a no-op.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Final

__all__ = ["Notifier", "listen_fds", "watchdog_interval"]

LISTEN_FDS_START: Final = 3


def listen_fds(*, unset: bool = True) -> list[tuple[socket.socket, str]]:
    """Return the listening sockets systemd passed us, with their names, or an empty list."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return []
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return []
    names = os.environ.get("LISTEN_FDNAMES", "").split(":")
    if unset:
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)
    sockets = []
    for index in range(count):
        fd = LISTEN_FDS_START + index
        name = names[index] if index < len(names) else "unknown"
        try:
            os.set_inheritable(fd, False)
            sockets.append((socket.socket(fileno=fd), name))
        except OSError:  # not open, or not a socket: nothing we can serve on
            continue
    return sockets


def watchdog_interval() -> float | None:
    """Return how often to ping the watchdog (half of ``WATCHDOG_USEC``), or None when it is off."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    # sd_watchdog_enabled(3): 0 or less means no watchdog; ping at half the timeout.
    return value / 2_000_000 if value > 0 else None


class Notifier:
    """Send sd_notify messages to ``$NOTIFY_SOCKET`` (read once, at construction)."""

    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self._address: str | bytes | None = None
        self._sock: socket.socket | None = None
        if address:
            self._address = b"\0" + address[1:].encode() if address.startswith("@") else address
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def enabled(self) -> bool:
        """Whether there is a service manager to talk to."""
        return self._sock is not None

    def notify(self, *lines: str) -> None:
        """Send one datagram made of ``lines`` (``READY=1``, ``STATUS=...``, ``WATCHDOG=1``...)."""
        if self._sock is None or self._address is None:
            return
        with contextlib.suppress(OSError):
            self._sock.sendto("\n".join(lines).encode(), self._address)

    def close(self) -> None:
        """Close the datagram socket."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
