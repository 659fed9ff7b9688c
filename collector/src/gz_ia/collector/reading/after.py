"""What a session did after a moment: the cycles begun and the usage recorded after it, read off its
tally's quiet points instead of its lines (``gz-ia session why``).

A quiet point is a moment when no open cycle of the session had recorded usage (those open are
carried past it), so every cycle begins in one stretch between two points and records all its usage
in one, and the tally keeps, for each stretch, its counts and when its cycles began and its usage
was recorded. A stretch wholly before the moment adds nothing, one wholly after it adds its counts;
only a stretch on both sides of it is read again, from the line after the point that opens it with
the cycles that point carries, and folded by the one fold (:class:`.cycles.TimelineBuilder`). The
answer is the fold's, by construction: each count is one the fold makes of the same lines.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from typing import Final

import msgspec

from gz_ia.client.schema import StoredEvent
from gz_ia.collector.storage.checkpoints import QuietPoint
from gz_ia.collector.storage.roots import RootDirs
from gz_ia.collector.storage.segments import Segment

from .cursor import relocate
from .cycles import ActionSpan, SessionNode, TimelineBuilder, settle_usage
from .segments import SessionNotFound, SessionView, lines_forward, open_view, seq_of
from .sessions import SessionSummary

__all__ = ["AfterCounts", "after_moment", "counts_of_spans"]

_START: Final = QuietPoint(0, 0, 0, 0.0, 0, 0, 0.0, 0, None, None, None, None)
_decoder: Final = msgspec.json.Decoder(StoredEvent)


@dataclass(frozen=True, slots=True)
class AfterCounts:
    """Of one session, after a moment: cycles whose first event came after it, and the tokens and
    cost of the cycles whose (last) usage record did."""

    actions: int
    tokens: int
    cost_usd: float


def counts_of_spans(
    spans: list[ActionSpan], moment: datetime, *, hooks_count: bool, carried: Iterable[ActionSpan] = ()
) -> AfterCounts:
    """:class:`AfterCounts` of folded cycles; ``hooks_count``: the session's usage is its hooks'
    readings (it has no other usage record), else they add none (:func:`.cycles.settle_usage`).
    ``carried``: cycles begun before the lines folded, whose usage counts and not themselves."""
    actions = tokens = 0
    cost = 0.0
    for span in spans:
        if span.begun > moment:
            actions += 1
    for span in chain(spans, carried):
        settle_usage(span, hooks_count=hooks_count)  # as the fold's end does (a settled one stays)
        if span.usage_at is not None and span.usage_at > moment:
            tokens += span.tokens
            cost += span.cost_usd
    return AfterCounts(actions, tokens, cost)


def after_moment(dirs: RootDirs, summary: SessionSummary, moment: datetime) -> AfterCounts | None:
    """What ``summary``'s session did after ``moment``; None when its tally cannot say (no history,
    or a stretch to read again that is no longer as the tally counted it): then fold its lines."""
    history = summary.history
    if history is None or summary.incomplete:
        return None
    quiet = history.quiet()
    if quiet is None:
        return None
    hooks_count = history.end.records == 0
    actions = tokens = 0
    cost = 0.0
    again: list[tuple[QuietPoint, int]] = []
    previous = _START
    for point in (*quiet, history.end):
        cycles = point.cycles - previous.cycles
        added_actions = added_tokens = 0
        added_cost = 0.0
        straddles = False
        if cycles:
            low, high = point.begun_low, point.begun_high
            if low is None or high is None:
                return None
            if moment < low:
                added_actions = cycles
            elif moment < high:
                straddles = True
        high = point.usage_high
        if not straddles and high is not None and moment < high:
            low = point.usage_low
            if low is None or moment >= low:
                straddles = True
            elif hooks_count:
                added_tokens = point.hook_tokens - previous.hook_tokens
                added_cost = point.hook_cost_usd - previous.hook_cost_usd
            else:
                added_tokens = point.tokens - previous.tokens
                added_cost = point.cost_usd - previous.cost_usd
        if straddles:
            again.append((previous, point.seq))
        else:
            actions += added_actions
            tokens += added_tokens
            cost += added_cost
        previous = point
    if again:
        try:
            view = open_view(dirs, summary.session_id)
        except SessionNotFound:
            return None
        try:
            for start, until in again:
                folded = _fold_stretch(view, start, until)
                if folded is None:
                    return None
                read = counts_of_spans(folded[0], moment, hooks_count=hooks_count, carried=folded[1])
                actions += read.actions
                tokens += read.tokens
                cost += read.cost_usd
        finally:
            view.close()
    return AfterCounts(actions, tokens, cost)


def _fold_stretch(view: SessionView, start: QuietPoint, until: int) -> tuple[list[ActionSpan], list[ActionSpan]] | None:
    """The cycles begun in the lines after ``start`` up to ``seq`` ``until``, and those ``start``
    carried (their events join them); None unless every line is there, in order, and decodes."""
    session_id = view.session_id
    after = start.seq
    builder = TimelineBuilder(SessionNode(session_id))
    carried = [
        builder.resume(session_id, key if isinstance(key, str) else f"{key[0]}\0{key[1]}") for key in start.carried
    ]
    if after:
        found = _boundary_after(view, after)
        if found is None:
            return None
        lines = view.forward(*found)
    else:
        lines = view.forward(1, 0)
    expected = after + 1
    for _number, _start, _end, raw in lines:
        if expected > until:
            break
        try:
            event = _decoder.decode(raw)
        except msgspec.DecodeError:
            return None
        if event.seq != expected or event.session_id != session_id:
            return None
        builder.add(event)
        expected += 1
    if expected <= until or view.incomplete:
        return None
    return builder.top.actions, carried


_NARROW: Final = 1 << 16
"""Bytes a bisection narrows a segment to before it reads line by line."""
_PROBE: Final = 1 << 13


def _boundary_after(view: SessionView, seq: int) -> tuple[int, int] | None:
    """``(segment, offset)`` right after the line of event ``seq``; None when it is not stored.

    The segment is found as a cursor's is (:func:`.cursor.relocate`); inside it, the collector's
    lines go up by ``seq``, so a bisection on the ``seq`` of the line after a probe narrows the search
    to a few lines instead of scanning the segment from its start. Anything unexpected (a line
    longer than a probe, one that does not decode) leaves the rest to :func:`.cursor.relocate`.
    """
    number = view.active_number
    while number >= 1:
        segment = view.get(number)
        if isinstance(segment, Segment):
            first = next((s for line in lines_forward(segment, 0) if (s := seq_of(line[3])) is not None), None)
            if first is not None and first <= seq + 1:
                if first == seq + 1:
                    return number, 0
                end = _end_by_bisection(segment, seq)
                if end is not None:
                    return number, end
                position = relocate(view, seq)
                return None if position is None else (position.segment, position.offset)
        elif number != view.active_number:
            return None
        view.release(number)
        number -= 1
    return None


def _end_by_bisection(segment: Segment, seq: int) -> int | None:
    low, high = 0, segment.size  # the line of ``seq`` starts at or after ``low``, before ``high``
    while high - low > _NARROW:
        middle = (low + high) // 2
        probe = segment.read(middle, _PROBE)
        cut = probe.find(b"\n")
        end = probe.find(b"\n", cut + 1)
        if cut < 0 or end < 0:
            return None
        start = middle + cut + 1
        found = seq_of(probe[cut + 1 : end])
        if found is None or start >= high:
            return None
        if found <= seq:
            low = start
        else:
            high = start
    for _number, _start, end, raw in lines_forward(segment, low):
        found = seq_of(raw)
        if found == seq:
            return end
        if found is None or found > seq:
            return None
    return None
