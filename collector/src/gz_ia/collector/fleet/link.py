"""The NATS connection and the stream: options from ``[fleet]``, and the stream created if absent.

``nats-py`` is imported here only, so a collector without the ``fleet`` extra fails with a sentence
that names it, not an ImportError from deep inside.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from gz_ia.collector.config import FleetConfig
from gz_ia.collector.errors import CollectorError

from .naming import SUBJECT_PREFIX

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient
    from nats.js import JetStreamContext

__all__ = ["FleetUnavailable", "connect", "ensure_stream", "require_nats"]

RECONNECT_WAIT: Final = 0.5
"""Seconds between reconnection attempts: an outage ends for the fleet within this of the server's return."""


class FleetUnavailable(CollectorError):
    """The fleet cannot run here (``nats-py`` missing); the message names the extra to install."""


def require_nats() -> None:
    """Raise :class:`FleetUnavailable` unless ``nats-py`` is installed."""
    try:
        import nats  # noqa: F401
    except ImportError as exc:
        raise FleetUnavailable(
            "fleet.url is set but nats-py is not installed: install the collector's fleet extra "
            "(pip install 'gz-ia-collector[fleet]')"
        ) from exc


def _tls(config: FleetConfig) -> ssl.SSLContext | None:
    if not (config.tls_ca or config.tls_cert or any(url.startswith("tls://") for url in config.servers())):
        return None
    context = ssl.create_default_context(cafile=config.tls_ca or None)
    if config.tls_cert:
        context.load_cert_chain(config.tls_cert, config.tls_key or None)
    return context


async def connect(
    config: FleetConfig,
    *,
    name: str,
    on_change: Callable[[bool], Awaitable[None]] | None = None,
) -> NatsClient:
    """Connect to ``config``'s servers, reconnecting for ever (an outage never ends the fleet)."""
    require_nats()
    import nats

    async def disconnected() -> None:
        if on_change is not None:
            await on_change(False)

    async def reconnected() -> None:
        if on_change is not None:
            await on_change(True)

    async def error(exc: Exception) -> None:  # nats-py logs nothing itself; reconnection goes on
        del exc

    options: dict[str, Any] = {
        "servers": config.servers(),
        "name": name,
        "allow_reconnect": True,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": RECONNECT_WAIT,
        "connect_timeout": 2,
        "disconnected_cb": disconnected,
        "reconnected_cb": reconnected,
        "error_cb": error,
    }
    if config.credentials:
        options["user_credentials"] = config.credentials
    elif config.nkey_seed:  # the server's challenge is signed with it: the seed never leaves the machine
        options["nkeys_seed"] = config.nkey_seed
    tls = _tls(config)
    if tls is not None:
        options["tls"] = tls
    return await nats.connect(**options)


async def ensure_stream(js: JetStreamContext, config: FleetConfig) -> None:
    """Create the stream over ``gzia.events.>`` with the configured de-duplication window if it is
    absent; an existing stream is kept as its operator set it up."""
    import nats.js.errors

    try:
        await js.stream_info(config.stream)
        return
    except nats.js.errors.NotFoundError:
        pass
    try:
        await js.add_stream(
            name=config.stream,
            subjects=[f"{SUBJECT_PREFIX}.>"],
            duplicate_window=config.duplicate_window,
            num_replicas=config.replicas,
        )
    except nats.js.errors.BadRequestError:
        await js.stream_info(config.stream)  # created meanwhile by another collector: fine if it exists
