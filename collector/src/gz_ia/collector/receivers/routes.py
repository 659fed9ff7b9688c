"""The whole table of what the collector serves on its loopback HTTP side, built once at start.

Each receiver adds its routes here (the OTLP receiver's, Claude Code's hooks'), beside the index and
the routes of the services heard over HTTP that are not sources (the web view), so the daemon
builds the table in one call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from gz_ia.collector.http import Request, Response, Route, Routes

from .claude_code import hook_routes
from .otlp import otlp_routes

if TYPE_CHECKING:
    from gz_ia.collector.metrics import Metrics
    from gz_ia.collector.service.intake import Intake
    from gz_ia.collector.storage.writer import Writer

__all__ = ["http_routes"]


def http_routes(
    intake: Intake,
    writer: Writer,
    metrics: Metrics,
    *,
    version: str,
    endpoints: Callable[[], dict[str, str]],
    services: Iterable[Route] = (),
) -> Routes:
    """The routes of the HTTP side: the index (``endpoints`` says where each service is heard), the
    receivers staging through ``intake``, and ``services``' routes (the web view)."""

    async def index(_request: Request) -> Response:
        body = {"service": "gz-ia-collector", "version": version, "endpoints": endpoints()}
        return Response(200, json.dumps(body).encode() + b"\n")

    return Routes(
        [
            Route("GET", "/", index),
            *otlp_routes(intake, writer, metrics),
            *services,
            *hook_routes(intake, metrics),
        ]
    )
