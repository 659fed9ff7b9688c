"""Who may connect to the collector, and how many client connections it holds, in total and per uid:
idle connections cannot take the descriptors every other client and every session file needs.

:func:`admit` is the one admission of a new client connection, the single process's
(:class:`.connection.Connection`) and the sharded front's (``sharding.front_client.FrontClient``)
alike: the peer's credentials, then its uid (the process's own, or one of ``allow_uids``; any other
is refused ``permission_denied``, counted in ``gzia_connections_refused_total`` and logged), then the
limits below.

Past a limit a new connection is refused at once with ``busy`` (the client keeps its events and
comes back with backoff), counted in ``gzia_connections_over_limit_total``, and the connections
already open keep being served. ``max_connections = 0`` derives the limit from the descriptor limit:
the part :func:`.server.file_budget` leaves beside the session files, less a margin for the listening
sockets, the metrics server and the roots' directories (see :func:`auto_max_connections`).
"""

from __future__ import annotations

import logging
import resource
import socket
from typing import TYPE_CHECKING, Final, NamedTuple

from prometheus_client import Counter

from gz_ia.client.protocol import RejectReason
from gz_ia.collector.config import CollectorConfig

from .listener import peer_credentials

if TYPE_CHECKING:
    from gz_ia.collector.metrics import Metrics

__all__ = ["MIN_CONNECTIONS", "Admission", "ConnectionLimits", "admit", "auto_max_connections"]

log = logging.getLogger("gz_ia.collector")

MIN_CONNECTIONS: Final = 16
_MARGIN: Final = 32
"""Descriptors of the socket reserve kept for listening sockets, the metrics server and root directories."""


def auto_max_connections(descriptors: int, *, per_connection: int = 1) -> int:
    """The default ``max_connections`` for a process allowed ``descriptors`` open files.

    The sockets' part of a collector's descriptors (what :func:`.server.file_budget` leaves beside
    the session files) less a margin: a share of a sharded collector holds one connection per client
    too. ``per_connection``: descriptors a client costs here (a front holds one to each share besides
    the client's, and no session files), which bounds it as well.
    """
    reserve = socket_reserve(descriptors)
    return max(MIN_CONNECTIONS, min(reserve - _MARGIN, (descriptors - 2 * _MARGIN) // per_connection))


def socket_reserve(descriptors: int) -> int:
    """The descriptors kept for sockets, the metrics server and the rest: an eighth, at least 64."""
    return max(64, descriptors // 8)


def descriptor_limit() -> int | None:
    """The descriptor limit, with the soft limit raised to the hard one first (what systemd
    recommends for daemons that need many descriptors); None when unlimited."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass
    return None if soft == resource.RLIM_INFINITY else soft


class ConnectionLimits:
    """Count connections by uid and admit one only within the limits.

    Args:
        config: ``max_connections`` and ``max_connections_per_uid`` (0: derived, see the module).
        over_limit: ``gzia_connections_over_limit_total``, counting refusals by limit.
        per_connection: descriptors one client connection costs in this process.
    """

    def __init__(self, config: CollectorConfig, over_limit: Counter, *, per_connection: int = 1) -> None:
        self._per_connection = per_connection
        self._over_limit = over_limit
        self._logged: set[str] = set()
        self._by_uid: dict[int, int] = {}
        self.open = 0
        self.total = 0
        self.per_uid = 0
        self.configure(config)

    def configure(self, config: CollectorConfig) -> None:
        """Take the limits of ``config`` (at start and on reload; open connections stay)."""
        self.total = config.max_connections or auto_max_connections(
            descriptor_limit() or 1 << 20, per_connection=self._per_connection
        )
        if config.max_connections_per_uid:
            self.per_uid = min(config.max_connections_per_uid, self.total)
        else:
            # One user alone may use them all; with other uids allowed, none may take more than half.
            self.per_uid = self.total if not config.allow_uids else max(1, self.total // 2)

    def report(self) -> dict[str, int]:
        """The limits in effect, for ``gz-ia status``."""
        return {"max_connections": self.total, "max_connections_per_uid": self.per_uid}

    def admit(self, uid: int) -> str | None:
        """Count a new connection of ``uid``; or refuse it: return why (the ``busy`` detail), counted
        by limit and logged the first time each limit is reached."""
        held = self._by_uid.get(uid, 0)
        if self.open >= self.total:
            limit, detail = "total", f"the collector holds its limit of {self.total} connections (max_connections)"
        elif held >= self.per_uid:
            limit, detail = (
                "per_uid",
                f"uid {uid} holds its limit of {self.per_uid} connections (max_connections_per_uid)",
            )
        else:
            self._by_uid[uid] = held + 1
            self.open += 1
            return None
        self._over_limit.labels(limit).inc()
        if limit not in self._logged:
            self._logged.add(limit)
            log.warning("refusing connections: %s (counted in gzia_connections_over_limit_total)", detail)
        return f"{detail}; retry later"

    def release(self, uid: int) -> None:
        """A connection admitted for ``uid`` closed."""
        held = self._by_uid.get(uid, 0)
        if held <= 1:
            self._by_uid.pop(uid, None)
        else:
            self._by_uid[uid] = held - 1
        self.open -= 1


class Admission(NamedTuple):
    """The peer of a new connection and whether it was admitted."""

    pid: int
    uid: int
    """The peer's uid; -1 when its credentials could not be read (then it is refused)."""
    refusal: tuple[RejectReason, str] | None
    """The fatal error to answer (reason, detail) before closing; None when admitted."""


def admit(
    sock: socket.socket,
    *,
    own_uid: int,
    config: CollectorConfig,
    metrics: Metrics,
    limits: ConnectionLimits | None,
) -> Admission:
    """Admit the client connected on ``sock``, or say why not.

    Its uid must be ``own_uid`` (the process's) or one of ``config.allow_uids``: any other is refused
    ``permission_denied``, counted in ``gzia_connections_refused_total`` and logged. Then ``limits``
    (None: not limited here, as a share behind a front) count it, or refuse it ``busy``. An admitted
    connection is counted in ``gzia_connections_total``; the caller releases it from ``limits`` when
    it closes.
    """
    pid = 0
    try:
        pid, uid, _ = peer_credentials(sock)
    except OSError:
        uid = -1
    if uid != own_uid and uid not in config.allow_uids:
        metrics.connections_refused.inc()
        log.warning("refused a connection from uid %d (pid %d): not allowed", uid, pid)
        return Admission(pid, uid, (RejectReason.PERMISSION_DENIED, f"uid {uid} may not use this collector"))
    if limits is not None:
        busy = limits.admit(uid)
        if busy is not None:
            return Admission(pid, uid, (RejectReason.BUSY, busy))
    metrics.connections_total.inc()
    return Admission(pid, uid, None)
