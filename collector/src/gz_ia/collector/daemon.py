"""Starting the collector process: logging, sockets (inherited or our own), metrics, the loop.

The only place that chooses between a collector of one process and a sharded one (a front and its
share processes, :mod:`.sharding`). ``python -m gz_ia.collector.daemon --share <directory> <share>
<shares> <front pid> <version>`` runs one share; only the front starts it.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from gz_ia.client import env

from .config import CollectorConfig, is_loopback, unknown_variables
from .service.listener import Listener, ListenerError
from .service.log_format import configure_logging
from .service.systemd import listen_fds

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from .fleet.runner import FleetRunner
    from .http.server import ServerThread
    from .metrics import Metrics
    from .receivers.inbox import HookInbox
    from .service.server import Collector
    from .sharding.front import Front

__all__ = ["HTTP_SOCKET_NAME", "main", "run", "serve_http", "serve_metrics", "unmapped_uids"]

log = logging.getLogger("gz_ia.collector")


def socket_path(config: CollectorConfig) -> Path:
    """The socket the collector binds when systemd did not hand it one."""
    return Path(config.socket) if config.socket else env.default_socket_path()


HTTP_SOCKET_NAME: Final = "http"
"""The ``FileDescriptorName=`` of a TCP socket the service manager holds for the HTTP side."""


def _usable(inherited: list[tuple[socket.socket, str]]) -> tuple[list[socket.socket], socket.socket | None]:
    """Split the inherited sockets: the Unix stream sockets for events, and the loopback TCP socket
    named ``http`` for the HTTP side; close (and log) anything else systemd passed."""
    sockets = []
    http: socket.socket | None = None
    for sock, name in inherited:
        if sock.family == socket.AF_UNIX and sock.type == socket.SOCK_STREAM:
            sockets.append(sock)
        elif (
            name == HTTP_SOCKET_NAME
            and http is None
            and sock.family in (socket.AF_INET, socket.AF_INET6)
            and sock.type == socket.SOCK_STREAM
            and is_loopback(sock.getsockname()[0])
        ):
            http = sock
        else:
            log.warning(
                "ignoring inherited fd %d (%s): neither a Unix stream socket nor the loopback TCP socket named %r",
                sock.fileno(),
                name,
                HTTP_SOCKET_NAME,
            )
            sock.close()
    return sockets, http


def run(
    config: CollectorConfig,
    *,
    version: str,
    load_config: Callable[[], CollectorConfig] | None = None,
    share: tuple[int, int, int] | None = None,
) -> int:
    """Run the collector until SIGTERM/SIGINT; return the process exit code.

    With ``shards`` above 1 this process is the front of a sharded collector
    (:mod:`.sharding.front`), which starts the share processes; ``share`` is set only in those.

    Args:
        config: the configuration to start with.
        version: the collector's version.
        load_config: builds the configuration again for a reload (SIGHUP), from the same file,
            environment and start-up flags.
        share: ``(share, shares, front pid)`` in a share process: which share of the sessions it
            serves, of how many, for which front.
    """
    import uvloop
    from prometheus_client import CollectorRegistry

    from .metrics import Metrics
    from .service.server import Collector
    from .sharding.front import Front

    # Everything the collector creates (state, share configuration, session files) is its user's
    # alone, whatever umask started it: as UMask=0077 in the unit, for every other way to run it.
    os.umask(0o077)
    front = share is None and config.shards > 1
    name = "gz-ia-collector" if share is None else f"gz-ia-collector[share {share[0]}]"
    configure_logging(name, config.log_level)
    for uid in unmapped_uids(config.allow_uids):
        log.error(
            "allow_uids: uid %d is not mapped in this process's user namespace (PrivateUsers=yes?): "
            "its connections are seen as uid 65534 and refused",
            uid,
        )
    if share is None:  # a share has its front's environment: the front has said it
        for variable, close in unknown_variables(os.environ):
            hint = f" (did you mean {close}?)" if close else ""
            log.warning("ignoring %s: gz-ia reads no such variable%s", variable, hint)
    listener: Listener | None = None
    sockets, inherited_http = _usable(listen_fds())
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
        if inherited_http is not None or config.http_endpoint() is not None:
            log.warning(
                "http_address is not served by a sharded collector (shards = %d): hooks over HTTP, OTLP and "
                "the live view need shards = 1",
                config.shards,
            )
        server = Front(config, metrics, version=version, load_config=load_config, near=Path(sockets[0].getsockname()))
        served = server.registry
    elif share is None:
        server = Collector(config, metrics, version=version, load_config=load_config)
        served = registry
        serve_http(server, config, inherited_http)
    else:
        server = _share_collector(config, metrics, version=version, load_config=load_config, share=share)
        served = registry
    http = serve_metrics(config, metrics, served)
    inbox = take_hook_inbox(config, metrics, sockets[0]) if share is None else None
    fleet: FleetRunner | None = None
    if share is None and config.fleet.enabled:
        from .fleet.link import FleetUnavailable

        try:
            fleet = start_fleet(config, metrics, sockets[0], server)
        except FleetUnavailable as exc:
            log.error("%s", exc)
            return 1
    _tune_garbage_collector()
    try:
        uvloop.run(server.serve(sockets))
    finally:
        if fleet is not None:
            fleet.close()
        if inbox is not None:
            inbox.close()
        if http is not None:
            http.close()
        if listener is not None:
            listener.close()
        else:
            for sock in sockets:
                sock.close()
    return 0


def _share_collector(
    config: CollectorConfig,
    metrics: Metrics,
    *,
    version: str,
    load_config: Callable[[], CollectorConfig] | None,
    share: tuple[int, int, int],
) -> Collector:
    """The collector of one share process (see :mod:`.sharding.share_process`)."""
    import functools

    from .service.server import Collector
    from .sharding.share_connection import ShareConnection
    from .sharding.share_process import share_role

    number, count, front = share
    return Collector(
        config,
        metrics,
        version=version,
        load_config=load_config,
        role=share_role(number, count, front=front),
        connection=functools.partial(ShareConnection, share=number, shares=count),
    )


def serve_http(collector: Collector, config: CollectorConfig, inherited: socket.socket | None) -> None:
    """Give ``collector`` its loopback HTTP side: the socket the service manager holds, else one it
    binds at ``http_address``. A busy port never stops the event service: it is logged and shown
    in ``gz-ia status``, and events are accepted all the same."""
    from .credentials import load_credentials
    from .http import HttpServer
    from .receivers.routes import http_routes

    sock = inherited
    if sock is None:
        endpoint = config.http_endpoint()
        if endpoint is None:
            return
        host, port = endpoint
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.create_server((host, port), family=family, backlog=128)
        except OSError as exc:
            collector.http_error = f"cannot listen on {address}: {exc}{_holder(host, port)}"
            log.error(
                "http NOT served: %s; events are still accepted (set http_address to a free host:port, or 'off')",
                collector.http_error,
            )
            return
    try:
        key = load_credentials(env.state_dir()).key
    except OSError as exc:  # CredentialsUnusable among them: a file that cannot be trusted is never used
        collector.http_error = f"no key for the HTTP side: {exc}"
        log.error("http NOT served: %s; events are still accepted", collector.http_error)
        sock.close()
        return
    routes = http_routes(
        collector.intake,
        collector.writer,
        collector.metrics,
        version=collector.version,
        endpoints=lambda: collector.http.endpoints() if collector.http is not None else {},
        services=collector.web.routes(),
    )
    server = HttpServer(routes, own_uid=os.getuid(), key=key, counters=collector.metrics.http)
    collector.attach_http(server, sock)


def _holder(host: str, port: int) -> str:
    """Who holds a port the collector could not take, and what that means, for its log and status."""
    from .http import PeerUnknown, listener_uid

    try:
        uid = listener_uid(host, port)
    except PeerUnknown:
        return ""
    if uid == os.getuid():
        return f"; it is held by one of your own processes (uid {uid}): another collector of yours, or another program"
    return (
        f"; it is held by uid {uid}, ANOTHER USER: hooks and exporters pointed at {host}:{port} reach them, not "
        "you. Stop sending there, find out who it is (`ss -ltnpe`), and serve on another port "
        "(http_address, then `gz-ia install` again)"
    )


def take_hook_inbox(config: CollectorConfig, metrics: Metrics, listening: socket.socket) -> HookInbox | None:
    """Start taking the hook inbox of the collector's spool directory (see :mod:`.receivers.inbox`),
    through the collector's own socket; None (and why, logged) where it cannot be used."""
    from .receivers.inbox import HookInbox

    spool = config.spool_dir or env.locate_spool()
    try:
        inbox = HookInbox(spool, str(listening.getsockname()), metrics)
    except OSError as exc:
        log.error("the hook inbox is not taken (Claude Code's hooks fall back to gz-ia hook claude-code): %s", exc)
        return None
    inbox.start()
    return inbox


def start_fleet(
    config: CollectorConfig, metrics: Metrics, listening: socket.socket, collector: Collector | Front
) -> FleetRunner:
    """Start shipping this collector's roots (and, on a hub, consuming the stream) on the fleet's own
    thread (:mod:`.fleet`), and show it in ``collector``'s status.

    Raises:
        FleetUnavailable: ``nats-py`` (the ``fleet`` extra) is not installed.
    """
    from .fleet.runner import FleetRunner

    fleet = FleetRunner(config.fleet, str(listening.getsockname()), metrics)
    collector.fleet_report = fleet.report
    fleet.start()
    return fleet


def serve_metrics(config: CollectorConfig, metrics: Metrics, served: CollectorRegistry) -> ServerThread | None:
    """Start the Prometheus endpoint; return its server, or None when it is off or cannot bind.

    ``/metrics`` is read by Prometheus, which runs as another user, so every uid the kernel can name
    is heard, each within a bound of its own (one user's connections never take another's place),
    and the ``Host`` must name this server (a page rebinding its host name to 127.0.0.1 reads
    nothing). It runs on an event loop of its own thread, so it answers while the collector is busy.
    A busy port (another user's collector, another exporter) never stops the event service: the
    error is logged and shown in ``gz-ia status``, and events are accepted all the same.
    """
    from prometheus_client.exposition import choose_encoder

    from .http import Access, HttpServer, Request, Response, Route, Routes
    from .http.server import ServerThread

    endpoint = config.metrics_endpoint()
    if endpoint is None:
        return None
    host, port = endpoint
    metrics.endpoint_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    async def scrape(request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(200, encode(served), content_type)

    routes = Routes([Route("GET", "/metrics", scrape, endpoint="metrics", access=Access.OPEN)])
    server = HttpServer(
        routes, own_uid=os.getuid(), every_uid=True, counters=metrics.http, max_connections=_METRICS_PER_UID,
        idle_timeout=_METRICS_IDLE_TIMEOUT,
    )  # fmt: skip
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        metrics.endpoint_error = f"cannot listen on {metrics.endpoint_address}: {exc}"
        log.error(
            "metrics NOT served: %s; events are still accepted (set metrics_address to a free host:port, or 'off')",
            metrics.endpoint_error,
        )
        return None
    door = ServerThread(server, sock, name="gz-ia-metrics")
    door.start()
    port = server.port  # the port bound, when 0 asked the kernel for any free one
    metrics.endpoint_address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    metrics.endpoint_url = f"http://{metrics.endpoint_address}/metrics"
    log.info("metrics on %s", metrics.endpoint_url)
    if not is_loopback(host):
        log.warning(
            "metrics are served beyond loopback on %s: anyone who can reach it reads the collector's metrics",
            metrics.endpoint_address,
        )
    return door


_METRICS_PER_UID: Final = 16
"""Connections one uid may hold on ``/metrics`` at once (Prometheus holds one per scrape)."""
_METRICS_IDLE_TIMEOUT: Final = 10.0


def unmapped_uids(uids: list[int], uid_map: Path = Path("/proc/self/uid_map")) -> list[int]:
    """The ``uids`` this process's user namespace does not map: the kernel reports such peers as the
    overflow uid, so ``allow_uids`` cannot admit them (a unit with ``PrivateUsers=yes``)."""
    try:
        ranges = [tuple(map(int, line.split())) for line in uid_map.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []
    return [uid for uid in uids if not any(inside <= uid < inside + count for inside, _outside, count in ranges)]


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


def main(argv: list[str] | None = None) -> int:
    """Run one share: ``--share <directory> <share> <shares> <front pid> <version>`` (started by the
    front only)."""
    from .sharding.share_process import config_loader, stop_with_front

    usage = "usage: python -m gz_ia.collector.daemon --share <directory> <share> <shares> <front pid> <version>"
    arguments = argv if argv is not None else sys.argv[1:]
    if len(arguments) != 6 or arguments[0] != "--share":
        raise SystemExit(usage)
    _flag, directory, share_arg, count_arg, front_arg, version = arguments
    share, count, front = int(share_arg), int(count_arg), int(front_arg)
    stop_with_front(front)
    load = config_loader(Path(directory), share)
    return run(load(), version=version, load_config=load, share=(share, count, front))


if __name__ == "__main__":
    sys.exit(main())
