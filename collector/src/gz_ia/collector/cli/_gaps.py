"""Saying what a reading command did not show: gaps in the history, on stderr and in ``--json`` follows.

A gap is a range of ``seq`` a read could not return (deleted by retention before it was read, an
unreadable segment, an undecodable line). Every gap is written to stderr as it is met; a follower
with ``--json`` also writes a notice record on stdout, in line with the events, that ``jq`` tells
apart by its ``__notice`` key; a command that ends exits with ``EXIT_GAP`` when it met any.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from gz_ia.collector.reading import Gap

__all__ = ["GapReport", "notice_record"]


def notice_record(gap: Gap) -> str:
    """Return the ``--json`` notice line of a gap: ``{"__notice": "lagged"|"damaged", ...}``.

    ``lagged``: retention deleted the events before the reader got to them; ``damaged``: they are
    stored but could not be read. ``from_seq``/``to_seq`` are null when a bound is unknown.
    """
    return json.dumps(
        {
            "__notice": "lagged" if gap.lagged else "damaged",
            "session_id": gap.session_id,
            "from_seq": gap.first,
            "to_seq": gap.last,
            "reason": gap.reason,
        }
    )


class GapReport:
    """Collects the gaps of one command and says each one once, as it is met."""

    def __init__(self, *, stdout_line: Callable[[str], None] | None = None) -> None:
        """``stdout_line`` also writes the notice record in line with the events (``-f --json``)."""
        self.gaps: list[Gap] = []
        self._stdout_line = stdout_line
        self._said: set[tuple[str, int | None, int | None, str]] = set()

    def __call__(self, gap: Gap) -> None:
        key = (gap.session_id, gap.first, gap.last, gap.reason)
        if key in self._said:
            return
        self._said.add(key)
        self.gaps.append(gap)
        click.echo(f"gz-ia: warning: {gap.describe()}", err=True)
        if self._stdout_line is not None:
            self._stdout_line(notice_record(gap))

    def __bool__(self) -> bool:
        return bool(self.gaps)
