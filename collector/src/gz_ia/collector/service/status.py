"""Asking a running collector about itself, over the same socket and protocol as the events."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import msgspec

from gz_ia.client import trust
from gz_ia.client.protocol import (
    Error,
    FrameReader,
    FrameTooLarge,
    Query,
    RejectReason,
    Report,
    collector_message_decoder,
    encode_frame,
)
from gz_ia.collector.errors import CollectorError

__all__ = ["StatusRefused", "StatusUnavailable", "query", "query_status"]


class StatusUnavailable(CollectorError):
    """No collector answered the status query."""


class StatusRefused(StatusUnavailable):
    """A collector is there but refused the query (``busy`` at its connection limit, ...)."""

    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


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
        StatusRefused: the collector refused the query.
    """
    reader = FrameReader()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            trust.connect(sock, str(path))
            with contextlib.suppress(BrokenPipeError):
                # A collector that refuses the connection (busy) closes it; its reason is still there to read.
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
                        raise StatusRefused(message.reason, message.detail)
    except (OSError, FrameTooLarge, msgspec.DecodeError) as exc:
        raise StatusUnavailable(str(exc)) from exc
