"""The mapping's events as the client's ``LogEvent``, for a receiver inside the collector.

:func:`.mapping.hook_events` returns plain keyword arguments, which the command hook packs itself
(``plain_event``) to stay light. A receiver that already runs msgspec (an HTTP hook endpoint in the
collector) wants ``LogEvent`` values instead: :func:`log_event` builds the one that packs to the
same bytes, so both transports record the same events.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gz_ia.client import build_event
from gz_ia.client.schema import LogEvent

__all__ = ["log_event"]


def log_event(fields: dict[str, Any]) -> LogEvent:
    """The ``LogEvent`` of one of :func:`.mapping.hook_events`' events.

    Raises:
        ValueError: FAILED without an error (the mapping never makes one).
    """
    values = dict(fields)
    nanoseconds = int(values.pop("timestamp_ns"))
    stamp = datetime.fromtimestamp(nanoseconds // 1000 / 1_000_000, UTC)
    return build_event(timestamp=stamp, **values)
