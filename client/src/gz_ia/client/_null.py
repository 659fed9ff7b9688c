"""The null client: what agents get when tracing is off. Every call does nothing, cheaply.

Like OpenTelemetry's ``NoOpMeter``: code written against :class:`~gz_ia.client.Client` runs
unchanged, and scopes skip building events altogether when ``client.enabled`` is false.
"""

from __future__ import annotations

from typing import Final

from ._delivery import SenderStats, Verdict
from .schema import LogEvent

__all__ = ["NullClient"]

_EMPTY_STATS: Final = SenderStats(
    queued=0,
    unacknowledged=0,
    accepted=0,
    rejected=0,
    dropped=0,
    invalid=0,
    reconnects=0,
    connected=False,
    last_error=None,
)


class NullClient:
    """A client that sends nothing and never raises."""

    enabled: Final = False

    def log(self, **_fields: object) -> None:
        """Do nothing."""

    def emit(self, event: LogEvent) -> None:
        """Do nothing."""

    def send(self, event: LogEvent, *, timeout: float = 5.0) -> Verdict:
        """Do nothing and report a verdict with ``seq`` 0."""
        return Verdict(seq=0)

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Nothing to deliver: return True."""
        return True

    def close(self, timeout: float | None = 2.0) -> None:
        """Do nothing."""

    def stats(self) -> SenderStats:
        """All zero."""
        return _EMPTY_STATS
