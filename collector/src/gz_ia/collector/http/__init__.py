"""The loopback HTTP side of the collector: hooks, OTLP and the live view arrive here.

One small server (h11 over asyncio, on the collector's event loop) that hears only the user's own
processes: every connection's peer uid is looked up in the kernel's socket table before a byte of
it is read (:mod:`.peer`), and anything else is answered 403. Services offer routes
(:class:`.messages.Routes`); this floor knows nothing of events or sessions.
"""

from .messages import Handler, Request, Response, Route, Routes, StreamResponse, decoded_body
from .peer import PeerUnknown, tcp_peer_uid
from .server import MAX_BODIES_HELD, HttpServer

__all__ = [
    "MAX_BODIES_HELD",
    "Handler",
    "HttpServer",
    "PeerUnknown",
    "Request",
    "Response",
    "Route",
    "Routes",
    "StreamResponse",
    "decoded_body",
    "tcp_peer_uid",
]
