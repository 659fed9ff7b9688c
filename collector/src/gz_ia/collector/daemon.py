"""Starting the collector process: logging, sockets (inherited or our own), metrics, the loop."""

from __future__ import annotations

import gc
import logging
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from gz_ia.client import env

from .config import CollectorConfig
from .listener import Listener, ListenerError
from .systemd import listen_fds

__all__ = ["run"]

log = logging.getLogger("gz_ia.collector")


def socket_path(config: CollectorConfig) -> Path:
    """The socket the collector binds when systemd did not hand it one."""
    return Path(config.socket) if config.socket else env.default_socket_path()


def _usable(inherited: list[tuple[socket.socket, str]]) -> list[socket.socket]:
    """Keep the inherited Unix stream sockets; close (and log) anything else systemd passed."""
    sockets = []
    for sock, name in inherited:
        if sock.family == socket.AF_UNIX and sock.type == socket.SOCK_STREAM:
            sockets.append(sock)
        else:
            log.warning("ignoring inherited fd %d (%s): not a Unix stream socket", sock.fileno(), name)
            sock.close()
    return sockets


def run(
    config: CollectorConfig,
    *,
    version: str,
    load_config: Callable[[], CollectorConfig] | None = None,
    share: int | None = None,
    shares: int = 1,
) -> int:
    """Run the collector until SIGTERM/SIGINT; return the process exit code.

    With ``shards`` above 1 this process is the front of a sharded collector (:mod:`.front`), which
    starts the share processes; ``share`` is set only in those (:mod:`.shares`).

    Args:
        config: the configuration to start with.
        version: the collector's version.
        load_config: builds the configuration again for a reload (SIGHUP), from the same file,
            environment and start-up flags.
        share: which share of the sessions this process owns, of ``shares``.
        shares: how many processes share the sessions.
    """
    import uvloop
    from prometheus_client import CollectorRegistry, start_http_server

    from .front import Front
    from .metrics import Metrics
    from .server import Collector

    front = share is None and config.shards > 1
    name = "gz-ia-collector" if share is None else f"gz-ia-collector[share {share}]"
    logging.basicConfig(stream=sys.stderr, level=config.log_level.upper(), format=f"{name}: %(levelname)s %(message)s")
    listener: Listener | None = None
    sockets = _usable(listen_fds())
    if sockets:
        log.info(
            "using %d socket(s) passed by the service manager (%s)",
            len(sockets),
            ", ".join(str(sock.getsockname()) for sock in sockets),
        )
    else:
        listener = Listener(socket_path(config))
        try:
            sockets = [listener.open()]
        except ListenerError as exc:
            log.error("%s", exc)
            return 1
        log.info("listening on %s", listener.path)
    registry = CollectorRegistry()
    metrics = Metrics(registry, version=version)
    server: Front | Collector
    if front:
        server = Front(config, metrics, version=version, load_config=load_config, near=Path(sockets[0].getsockname()))
        served = server.registry
    else:
        server = Collector(config, metrics, version=version, load_config=load_config, share=share or 0, shares=shares)
        served = registry
    http = None
    if config.metrics_enabled:
        host, _, port = config.metrics_address.rpartition(":")
        try:
            http, _thread = start_http_server(int(port), addr=host.strip("[]"), registry=served)
        except OSError as exc:
            log.error("cannot serve metrics on %s: %s (set metrics_address, or 'off')", config.metrics_address, exc)
            if isinstance(server, Front):
                server.shares.stop()
            if listener is not None:
                listener.close()
            return 1
        log.info("metrics on http://%s:%d/metrics", host, http.server_port)
    _tune_garbage_collector()
    try:
        uvloop.run(server.serve(sockets))
    finally:
        if http is not None:
            http.shutdown()
            http.server_close()
        if listener is not None:
            listener.close()
        else:
            for sock in sockets:
                sock.close()
    return 0


_GC_THRESHOLDS: Final = (10_000, 20, 100)


def _tune_garbage_collector() -> None:
    """Collect cycles less often, and never re-scan what start-up allocated.

    The collector makes few reference cycles, but allocates several containers per batch; with the
    default thresholds a young-generation pass ran every few hundred events and a full pass walked
    every session's state, about a tenth of the CPU per event at 100 sessions. ``gc.freeze()`` moves
    the modules, configuration and metrics allocated so far out of every future pass.
    """
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
