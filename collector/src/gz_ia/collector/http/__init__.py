"""The loopback HTTP side of the collector: hooks, OTLP and the live view arrive here.

One small server (h11 over asyncio, on the collector's event loop) that hears only the user's own
processes: every connection's peer uid is looked up in the kernel's socket table before a byte of
it is read (:mod:`.peer`), and anything else is answered 403; every request must name this server
in its ``Host``, carry no browser's cross-site signal and, where it writes or reveals anything, the
user's key (:mod:`.key`; :mod:`gz_ia.collector.credentials` keeps it). Services offer routes
(:class:`.messages.Routes`); this floor knows nothing of events or sessions.
"""

from .key import KEY_HEADER, offered_key, same_key
from .messages import Access, Handler, Request, Response, Route, Routes, StreamResponse, decoded_body
from .peer import PeerUnknown, listener_uid, tcp_peer_uid
from .server import MAX_BODIES_HELD, HttpServer

__all__ = [
    "KEY_HEADER",
    "MAX_BODIES_HELD",
    "Access",
    "Handler",
    "HttpServer",
    "PeerUnknown",
    "Request",
    "Response",
    "Route",
    "Routes",
    "StreamResponse",
    "decoded_body",
    "listener_uid",
    "offered_key",
    "same_key",
    "tcp_peer_uid",
]
