"""The fleet's own thread and event loop, beside the collector's.

Shipping reads files and waits for acknowledgements; the hub waits for messages and verdicts. On a
loop of their own none of it can delay a batch on the collector's loop, and the hub reaches the
collector as any client does, through its socket. ``gz-ia status`` and the metrics read what the
thread publishes in :meth:`FleetRunner.report`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Final

from gz_ia.client import env
from gz_ia.collector.config import FleetConfig
from gz_ia.collector.reading import HUB_MARK

from .link import connect, ensure_stream, require_nats
from .shipper import LANES, PAGE

if TYPE_CHECKING:
    from gz_ia.collector.metrics import Metrics

    from .hub import FleetHub
    from .shipper import Shipper

__all__ = ["FleetRunner", "hub_root"]

log = logging.getLogger("gz_ia.collector")

MEASURE_INTERVAL: Final = 2.0
"""Seconds between looks at what is written while no server was reached yet (for the lag reported)."""


def hub_root(config: FleetConfig) -> Path:
    """Where a hub writes every machine's sessions."""
    if config.hub_root:
        return Path(config.hub_root)
    return env.state_dir() / "fleet" / ".harness"


class FleetRunner:
    """Ships this collector's roots and, on a hub, consumes the stream, on a thread of its own.

    Raises:
        FleetUnavailable: ``nats-py`` is not installed (at construction, so the collector says so at start).
    """

    def __init__(self, config: FleetConfig, socket_path: str, metrics: Metrics) -> None:
        require_nats()
        from .hub import FleetHub
        from .shipper import Shipper

        self.config = config
        self.host = config.machine()
        self.metrics = metrics
        self.connected = False
        state_dir = env.state_dir()
        self.root = hub_root(config) if config.hub else None
        self.shipper: Shipper = Shipper(config, self.host, state_dir, [socket_path], metrics, skip=self.root)
        self.hub: FleetHub | None = None
        if self.root is not None:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            (self.root / HUB_MARK).touch(mode=0o600)
            consumer = config.consumer or f"hub-{self.host}"
            self.hub = FleetHub(config, consumer, self.root, socket_path, metrics)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="gz-ia-fleet", daemon=True)

    @property
    def role(self) -> str:
        return "hub" if self.hub is not None else "ship"

    def report(self) -> dict[str, object]:
        """``fleet`` in ``gz-ia status``: where, as whom, in which role, connected, and how far behind."""
        lag = self.hub.lag_events if self.hub is not None else self.shipper.lag()
        report: dict[str, object] = {
            "url": self.config.shown_url(),
            "host": self.host,
            "role": self.role,
            "connected": self.connected,
            "lag_events": lag,
            "stream": self.config.stream,
        }
        if self.hub is not None:
            report["consumer"] = self.hub.consumer
            report["root"] = str(self.root)
            report["shipping_lag_events"] = self.shipper.lag()
        return report

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop after the round in hand: what was acknowledged is saved, the rest is sent again next time."""
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            loop.call_soon_threadsafe(stopping.set)
        self._thread.join(15)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:
            log.exception("fleet: stopped by an error; the collector goes on without it")

    async def _set_connected(self, connected: bool) -> None:
        if connected != self.connected:
            log.info("fleet: %s %s", "connected to" if connected else "disconnected from", self.config.shown_url())
        self.connected = connected
        self.metrics.fleet_connected.set(1 if connected else 0)

    async def _measure_until_connected(self, stopping: asyncio.Event) -> None:
        """Until a server is first reached, keep the lag reported true (the shipper measures it once
        it ships): a machine the servers refuse says how much it holds back."""
        while not self.connected and not stopping.is_set():
            try:
                await self.shipper.measure()
            except Exception:  # an unreadable root: reported by the shipper once it ships
                log.debug("fleet: measuring the lag failed", exc_info=True)
            try:
                await asyncio.wait_for(stopping.wait(), MEASURE_INTERVAL)
            except TimeoutError:
                pass

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = stopping = asyncio.Event()
        measuring = asyncio.create_task(self._measure_until_connected(stopping))
        client = None
        while client is None and not stopping.is_set():
            try:
                client = await connect(
                    self.config, name=f"gz-ia {self.role} {self.host}", on_change=self._set_connected
                )
            except Exception as exc:  # no server answers yet: events are kept and shipped once one does
                log.warning("fleet: cannot reach %s (%s); retrying", self.config.shown_url(), exc)
                try:
                    await asyncio.wait_for(stopping.wait(), 1.0)
                except TimeoutError:
                    pass
        if client is None:
            measuring.cancel()
            return
        await self._set_connected(True)
        self.shipper.fit(client.max_payload)
        js = client.jetstream(publish_async_max_pending=2 * LANES * PAGE)
        while not stopping.is_set():
            try:
                await ensure_stream(js, self.config)
                break
            except Exception as exc:
                log.warning("fleet: stream %s not ready (%s); retrying", self.config.stream, exc)
                try:
                    await asyncio.wait_for(stopping.wait(), 1.0)
                except TimeoutError:
                    pass
        log.info("fleet: %s as %s on %s (stream %s)", self.role, self.host, self.config.shown_url(), self.config.stream)
        tasks = [asyncio.create_task(self.shipper.run(js, stopping))]
        if self.hub is not None:
            tasks.append(asyncio.create_task(self.hub.run(js, stopping)))
        try:
            await asyncio.gather(*tasks)
        finally:
            await client.close()
