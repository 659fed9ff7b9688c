"""Starting the collector process: logging, sockets (inherited or our own), metrics, the loop."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path

from gz_ia.client import env

from .config import CollectorConfig
from .listener import Listener, ListenerError
from .systemd import listen_fds

__all__ = ["run"]

log = logging.getLogger("gz_ia.collector")


def socket_path(config: CollectorConfig) -> Path:
    """The socket the collector binds when systemd did not hand it one."""
    return Path(config.socket) if config.socket else env.default_socket_path()


def run(config: CollectorConfig, *, version: str) -> int:
    """Run the collector until SIGTERM/SIGINT; return the process exit code."""
    import uvloop
    from prometheus_client import CollectorRegistry, start_http_server

    from .metrics import Metrics
    from .server import Collector

    logging.basicConfig(
        stream=sys.stderr,
        level=config.log_level.upper(),
        format="gz-ia-collector: %(levelname)s %(message)s",
    )
    listener: Listener | None = None
    inherited = listen_fds()
    sockets: list[socket.socket] = [sock for sock, _name in inherited]
    if sockets:
        log.info("using %d socket(s) passed by the service manager", len(sockets))
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
    http = None
    if config.metrics_enabled:
        host, _, port = config.metrics_address.rpartition(":")
        try:
            http, _thread = start_http_server(int(port), addr=host.strip("[]"), registry=registry)
        except OSError as exc:
            log.error("cannot serve metrics on %s: %s (set metrics_address, or 'off')", config.metrics_address, exc)
            if listener is not None:
                listener.close()
            return 1
        log.info("metrics on http://%s:%d/metrics", host, http.server_port)
    collector = Collector(config, metrics, version=version)
    try:
        uvloop.run(collector.serve(sockets))
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
