"""What this collector serves on its loopback HTTP side: each service heard over HTTP adds its routes
here, so the daemon builds the whole table in one call."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gz_ia.collector.http import Request, Response, Route, Routes

if TYPE_CHECKING:
    from .server import Collector

__all__ = ["collector_routes"]


def collector_routes(collector: Collector) -> Routes:
    """The routes of ``collector``'s HTTP side."""

    async def index(_request: Request) -> Response:
        http = collector.http
        endpoints = http.endpoints() if http is not None else {}
        body = {"service": "gz-ia-collector", "version": collector.version, "endpoints": endpoints}
        return Response(200, json.dumps(body).encode() + b"\n")

    from .otlp_receiver import otlp_routes

    return Routes([Route("GET", "/", index), *otlp_routes(collector), *collector.web.routes()])
