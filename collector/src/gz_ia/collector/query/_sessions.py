"""Which sessions ``gz-ia sessions`` lists, and in which order: by last activity, oldest first.

A session's agent and role are those of its first event (its agent is in its checkpoint; its role is
read from its first retained event, and only when ``--role`` asks). Its activity is the span from its
first to its last event, so ``--since T`` keeps sessions active at or after ``T`` and ``--until T``
those active before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from gz_ia.collector.reading import SessionSummary

__all__ = ["SessionQuery", "select_sessions"]


class SessionQuery(msgspec.Struct, frozen=True):
    """The filters of ``gz-ia sessions``: values of one flag ORed, different flags ANDed."""

    agents: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    since: datetime | None = None
    until: datetime | None = None
    failed: bool = False
    open: bool = False
    limit: int | None = None
    """Only the ``limit`` most recently active sessions."""


def _activity(summary: SessionSummary) -> tuple[bool, datetime, str]:
    last = summary.last_time or summary.first_time
    return (last is not None, last or datetime.min, summary.session_id)


def select_sessions(
    summaries: Iterable[SessionSummary], query: SessionQuery, role_of: Callable[[str], str | None]
) -> list[SessionSummary]:
    """Return the sessions ``query`` keeps, ordered by last activity (the most recent last).

    Args:
        summaries: every session of the root.
        query: the filters.
        role_of: the role of a session's first event (called only with ``query.roles``).
    """
    kept = []
    for summary in summaries:
        last = summary.last_time or summary.first_time
        first = summary.first_time or summary.last_time
        if query.agents and summary.agent not in query.agents:
            continue
        if query.failed and not summary.failures:
            continue
        if query.open and not summary.open_actions:
            continue
        if query.since is not None and (last is None or last < query.since):
            continue
        if query.until is not None and (first is None or first >= query.until):
            continue
        if query.roles and (role_of(summary.session_id) or "") not in query.roles:
            continue
        kept.append(summary)
    kept.sort(key=_activity)
    if query.limit is not None:
        kept = kept[-query.limit :] if query.limit else []
    return kept
