"""Gaps: the events a read could not return, and why.

A segment that cannot be read or an undecodable line is skipped and the page says ``incomplete``;
the :class:`Gap` values say which ``seq`` ranges were skipped. When the events after a cursor were
deleted by retention, the history ends there (``expired``) instead of jumping to unrelated events;
a reader that wants to go on anyway resumes at :func:`after_gap`.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .cursor import Position
from .segments import DELETED, SessionView, first_seq

__all__ = ["Gap", "Holes", "after_gap", "expired_gap"]


class Gap(msgspec.Struct, frozen=True):
    """Events a read could not return, and why.

    Attributes:
        session_id: the session.
        first: the first missing ``seq`` (None when unknown: the damage came before any readable event).
        last: the last missing ``seq`` (None when unknown: nothing readable came after the damage).
        reason: what happened (``deleted by retention``, an unreadable segment, an undecodable line).
        lagged: the events were deleted by retention before this reader got to them.
    """

    session_id: str
    first: int | None
    last: int | None
    reason: str
    lagged: bool = False

    def describe(self) -> str:
        """Return one line for a human: which events are missing and why."""
        if self.first is None and self.last is None:
            which = "a stored line"
        elif self.first is None:
            which = f"events up to seq {self.last}"
        elif self.last is None:
            which = f"events from seq {self.first}"
        elif self.first == self.last:
            which = f"event seq {self.first}"
        else:
            which = f"events seq {self.first}-{self.last}"
        return f"session {self.session_id}: {which} not shown: {self.reason}"


class Holes:
    """Turns what a view could not read, and jumps in ``seq``, into :class:`Gap` values during one read."""

    def __init__(self, view: SessionView) -> None:
        self.view = view
        self.seen = len(view.problems)
        self.gaps: list[Gap] = []

    def _take(self) -> list[str]:
        reasons = self.view.problems[self.seen :]
        self.seen = len(self.view.problems)
        return list(dict.fromkeys(reasons))

    def missing(self, first: int | None, last: int | None) -> None:
        """Events ``first..last`` lie between two events just read (None: unknown bound)."""
        if len(self.view.problems) == self.seen and (first is None or last is None or first > last):
            return  # the common case, once per event: nothing missing
        reasons = self._take()
        lagged = bool(reasons) and all(reason == DELETED for reason in reasons)
        if lagged and (first is None or (last is not None and first > last)):
            return  # deleted before this read's first event, or held none of the events it expected
        if first is not None and last is not None and first > last:
            if not reasons:
                return
            first = last = None  # damage that held no event: a stray line
        elif not reasons:
            if first is None or last is None:
                return  # an open end without damage: before the oldest retained event, or the newest
            reasons = ["not in the stored lines"]
        if first is None and last is not None and last < 1:
            last = None
        self.view.incomplete |= lagged
        self.gaps.append(Gap(self.view.session_id, first, last, "; ".join(reasons), lagged=lagged))

    def trailing(self, first: int | None) -> None:
        """The read ended: report damage after the last event read (up to the checkpoint's ``seq``).

        Without damage seen, events the checkpoint says were written but no file holds any more (a
        session file truncated, replaced or removed by hand) are reported too: the checkpoint never
        covers a line before it is in the file.
        """
        checkpoint = self.view.checkpoint
        known = checkpoint.seq if checkpoint is not None and checkpoint.seq >= (first or 1) else None
        if len(self.view.problems) == self.seen:
            if known is not None:
                reason = f"not in the stored lines (seq {known} was written)"
                self.gaps.append(Gap(self.view.session_id, first, known, reason))
                self.view.incomplete = True
            return
        reasons = self._take()
        lagged = all(reason == DELETED for reason in reasons)
        if lagged and (first is None or known is None or first > known):
            return  # retention deleted segments that held nothing after the last event read
        self.view.incomplete |= lagged
        self.gaps.append(Gap(self.view.session_id, first, known, "; ".join(reasons), lagged=lagged))


def expired_gap(view: SessionView, position: Position) -> Gap:
    """Describe the events after ``position`` that are no longer stored."""
    oldest = first_seq(view.forward(view.oldest(), 0))
    first = position.seq + 1
    if oldest is None or oldest > first:
        last = None if oldest is None else oldest - 1
        return Gap(view.session_id, first, last, DELETED, lagged=True)
    return Gap(view.session_id, first, None, "no longer stored (the session was removed and started again)", True)


def after_gap(session_id: str, gaps: Iterable[Gap]) -> Position | None:
    """Where a lagged reader goes on: right after the last ``seq`` its gap accounts for.

    Not "the oldest event still stored": retention may delete more before that is read, and a
    reader that did not know which ``seq`` it expected next would jump over those events without a
    word. The boundary is found again by its ``seq`` (segment 0 never exists, so the read relocates
    it), and whatever retention deleted meanwhile is the next gap. None when the gap has no end
    (nothing stored after it, or the session started again): then from the oldest event stored.
    """
    last = max((gap.last for gap in gaps if gap.lagged and gap.last is not None), default=None)
    return None if last is None else Position(session_id, 0, 0, last)
