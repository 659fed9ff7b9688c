"""Asking a running collector about itself, over the same socket and protocol as the events."""

from __future__ import annotations

import socket
from pathlib import Path

import msgspec

from gz_ia.client.protocol import (
    Error,
    FrameReader,
    FrameTooLarge,
    Query,
    Report,
    collector_message_decoder,
    encode_frame,
)

__all__ = ["StatusUnavailable", "query", "query_status"]


class StatusUnavailable(Exception):
    """No collector answered the status query."""


def query_status(path: Path, *, timeout: float) -> dict[str, object]:
    """Return the collector's status report (see ``Collector.status``).

    Raises:
        StatusUnavailable: nothing listens on ``path``, or it did not answer in time.
    """
    return query(path, timeout=timeout)


def query(path: Path, *, timeout: float, what: str = "status") -> dict[str, object]:
    """Ask the collector on ``path`` a :class:`Query` and return its report.

    ``what`` is ``"status"`` (:func:`query_status`) or ``"metrics"``: ``{"metrics": <text>}``, the
    Prometheus exposition of that process (how a sharded collector's front reads its shares).

    Raises:
        StatusUnavailable: nothing listens on ``path``, or it did not answer in time.
    """
    reader = FrameReader()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(encode_frame(Query(what=what)))
            while True:
                data = sock.recv(1 << 16)
                if not data:
                    raise StatusUnavailable("the collector closed the connection")
                for body in reader.feed(data):
                    message = collector_message_decoder.decode(body)
                    if isinstance(message, Report):
                        return message.data
                    if isinstance(message, Error):
                        raise StatusUnavailable(f"{message.reason}: {message.detail}")
    except (OSError, FrameTooLarge, msgspec.DecodeError) as exc:
        raise StatusUnavailable(str(exc)) from exc
