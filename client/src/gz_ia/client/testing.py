"""Helpers for testing code that logs through gz-ia, without a collector.

:func:`capture_events` installs a :class:`CapturingClient` as the process-wide client for the
duration of a ``with`` block and yields the list it fills::

    from gz_ia.client.testing import capture_events

    with capture_events() as events:
        run_my_agent()
    assert [e.stage for e in events] == ["READ", "PENDING", "FINISH"]
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Final

from . import _scope
from ._client import build_event
from ._delivery import Verdict
from .schema import AttrValue, LogEvent, Stage, Status

__all__ = ["CapturingClient", "capture_events"]


class CapturingClient:
    """A client that keeps every event in :attr:`events` instead of sending it.

    Events are built exactly as the real client builds them, so a call the real client would count
    as invalid raises ``ValueError`` here, which is what a test wants to see.
    """

    enabled: Final = True

    def __init__(self) -> None:
        self.events: list[LogEvent] = []
        self._lock = threading.Lock()
        self._seqs: dict[str, int] = {}

    def log(
        self,
        *,
        session_id: str,
        action: str,
        stage: Stage | str,
        agent: str,
        status: Status | str = Status.OK,
        role: str | None = None,
        parent_session_id: str | None = None,
        duration_ms: int | None = None,
        error: str | None = None,
        attrs: dict[str, AttrValue] | None = None,
        timestamp: datetime | None = None,
        cycle: str | None = None,
        root_session_id: str | None = None,
    ) -> None:
        """Build the event and keep it."""
        self.emit(
            build_event(
                session_id=session_id,
                action=action,
                stage=stage,
                agent=agent,
                status=status,
                role=role,
                parent_session_id=parent_session_id,
                duration_ms=duration_ms,
                error=error,
                attrs=attrs,
                timestamp=timestamp,
                cycle=cycle,
                root_session_id=root_session_id,
            )
        )

    def emit(self, event: LogEvent) -> None:
        """Keep a built event."""
        with self._lock:
            self.events.append(event)

    def send(self, event: LogEvent, *, timeout: float = 5.0) -> Verdict:
        """Keep the event and answer with the next ``seq`` of its session."""
        with self._lock:
            self.events.append(event)
            seq = self._seqs.get(event.session_id, 0) + 1
            self._seqs[event.session_id] = seq
        return Verdict(seq=seq)

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Nothing is ever pending."""
        return True

    def close(self, timeout: float | None = 2.0) -> None:
        """Nothing to close."""


@contextlib.contextmanager
def capture_events() -> Iterator[list[LogEvent]]:
    """Capture every event logged through the default client inside the block."""
    capturing = CapturingClient()
    previous = _scope.get_client()
    _scope.configure(capturing)
    try:
        yield capturing.events
    finally:
        _scope.configure(previous)
