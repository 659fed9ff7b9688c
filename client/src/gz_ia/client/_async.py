"""The asyncio face of the client, in a module of its own so that only its users import asyncio."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

from ._client import Client
from ._delivery import SenderStats, Verdict
from .errors import CollectorUnavailable
from .schema import LogEvent

__all__ = ["AsyncClient"]


class AsyncClient:
    """The asyncio face of :class:`Client`: ``log()`` as before, awaitable ``send()`` and ``flush()``.

    The socket work still happens on the client's sender thread, so an event loop is never blocked
    by logging.
    """

    enabled: Final = True

    def __init__(
        self,
        client: Client | None = None,
        *,
        socket_path: str | Path | None = None,
        root: str | Path | None = None,
    ) -> None:
        self.sync = client if client is not None else Client(socket_path=socket_path, root=root)
        # Queuing never blocks, so the synchronous calls serve the event loop as they are.
        self.log = self.sync.log
        self.emit = self.sync.emit

    async def send(self, event: LogEvent, *, timeout: float = 5.0) -> Verdict:
        """Deliver ``event`` and await the verdict (see :meth:`Client.send`)."""
        future = asyncio.wrap_future(self.sync.send_future(event))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            raise CollectorUnavailable(
                f"no verdict from the collector within {timeout:g} s", socket_path=str(self.sync.socket_path)
            ) from exc

    async def flush(self, timeout: float | None = 5.0) -> bool:
        """Await delivery of everything queued, without blocking the event loop."""
        return await asyncio.to_thread(self.sync.flush, timeout)

    async def aclose(self, timeout: float | None = 2.0) -> None:
        """Flush and stop, without blocking the event loop."""
        await asyncio.to_thread(self.sync.close, timeout)

    def stats(self) -> SenderStats:
        """Counters of the underlying client."""
        return self.sync.stats()
