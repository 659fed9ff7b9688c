"""A session's running tally: the one definition of what its lines amount to so far.

``seq``, the open cycles, the delivery watermarks, the FAILED count and whether the last FINISH
failed, the first and last timestamps, the parent (of the first event that names one), the tree
root and agent of its first event, the greatest timestamp, and the usage records' tokens, cost and
model (:class:`gz_ia.client.usage.UsageSum`: each model call counted once). The writer's session
state keeps it up to date as events are staged; recovery and the readers rebuild it by folding
lines (:class:`.replay.SessionFold`); both convert it to and from its persisted form, the
:class:`.checkpoints.Checkpoint`, only here.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Final

import msgspec

from gz_ia.client.schema import Stage
from gz_ia.client.usage import UsageSum

from .checkpoints import (
    MAX_QUIET_POINTS,
    NO_QUIET,
    USAGE_FOLD,
    Checkpoint,
    FirstFailed,
    QuietPoint,
    Stretch,
    encode_quiet,
    quiet_points,
)

__all__ = ["MAX_WATERMARKS", "TALLY_FIELDS", "OpenCycles", "SessionTally", "note_delivery"]

MAX_WATERMARKS: Final = 4096

OpenCycles = dict[str | tuple[str, str], Stage]
"""A session's open cycles: the action, or ``(action, cycle)`` for events naming their cycle → open stage."""

TALLY_FIELDS: Final = (
    "agent",
    "cycles",
    "ended_failed",
    "failures",
    "first_failed",
    "first_time",
    "last_time",
    "latest_begun",
    "marks",
    "newest_time",
    "open_actions",
    "open_since",
    "parent",
    "quiet",
    "quiet_step",
    "seq",
    "stretch",
    "tree_root",
    "usage",
)
"""The tally's fields: the slots that each class mixing in :class:`SessionTally` declares."""


class SessionTally:
    """The tally's fields and their conversions, mixed into the classes that keep one.

    Each subclass lists :data:`TALLY_FIELDS` in its own ``__slots__``: the writer's session state is
    also an open file, and two slotted bases cannot be combined. Timestamps are RFC 3339 text, as
    stored.
    """

    if not TYPE_CHECKING:
        # mypy checks assignments against a class's own __slots__ and cannot see the subclasses'.
        __slots__ = ()

    seq: int
    open_actions: OpenCycles
    open_since: dict[str | tuple[str, str], datetime]
    """When each open cycle began (its first event), keyed as :attr:`open_actions`."""
    latest_begun: datetime | None
    """When the newest cycle began, open or not (None: unknown, restored from an earlier gz-ia's
    checkpoint with open cycles). With ``open_since`` it tells where an open session waits without
    reading its file (:func:`gz_ia.collector.views.answers.waiting_cycles`)."""
    marks: dict[str, int]
    """Per producer, the highest event number stored: the idempotency watermarks."""
    failures: int
    ended_failed: bool | None
    """Whether the session's last FINISH (in stored order) was FAILED: the agent did not recover from
    it. None when unknown (restored from a checkpoint of an earlier gz-ia, until the next FINISH)."""
    first_time: str
    last_time: str
    parent: str
    tree_root: str
    """The first event's ``root_session_id`` ("" when it names none)."""
    agent: str
    newest_time: str | None
    """The greatest timestamp; "" before the first event, None when unknown for good (restored from a
    checkpoint of an earlier gz-ia, which did not record it)."""

    usage: UsageSum
    """The usage records' tokens by kind, cost and model. Restored from a checkpoint of an earlier
    gz-ia, which counted none, they start at zero."""

    cycles: int
    """Cycles begun."""
    first_failed: FirstFailed | None
    """The FAILED FINISH with the earliest timestamp."""
    quiet: list[QuietPoint] | msgspec.Raw | None
    """Moments no cycle was open (:class:`.checkpoints.QuietPoint`), or their text as a checkpoint
    keeps it until they are needed (:meth:`quiet_list`); None when the session's history is not known
    (restored from an earlier gz-ia's checkpoint): then ``cycles`` and ``first_failed`` are not either."""
    quiet_step: int
    stretch: Stretch
    """Since the last quiet point: when its cycles began and its usage was recorded."""

    def note_begun(self, at: datetime) -> None:
        """A cycle begins at ``at`` (or, for one begun already, one of its stages came earlier)."""
        stretch = self.stretch
        if stretch.begun_low is None or at < stretch.begun_low:
            stretch.begun_low = at
        if stretch.begun_high is None or at > stretch.begun_high:
            stretch.begun_high = at

    def note_usage_at(self, at: datetime) -> None:
        """A usage record was stamped ``at``."""
        stretch = self.stretch
        if stretch.usage_low is None or at < stretch.usage_low:
            stretch.usage_low = at
        if stretch.usage_high is None or at > stretch.usage_high:
            stretch.usage_high = at

    def note_failed(self, at: datetime, action: str, error: str | None) -> None:
        """A FINISH stamped ``at`` was FAILED."""
        known = self.first_failed
        if known is None or at < known.at:
            self.first_failed = FirstFailed(at, action, error)
        elif at == known.at and not known.tied:
            self.first_failed = FirstFailed(known.at, known.action, known.error, tied=True)

    def quiet_list(self) -> list[QuietPoint] | None:
        """The quiet points (decoded from the checkpoint's text on first use)."""
        quiet = self.quiet
        if isinstance(quiet, msgspec.Raw):
            quiet = self.quiet = quiet_points(quiet)
        return quiet

    def note_quiet(self) -> None:
        """No cycle is open after the line just counted: a quiet point, if far enough from the last."""
        quiet = self.quiet_list()
        if quiet is None or self.seq - (quiet[-1].seq if quiet else 0) < self.quiet_step:
            return
        usage = self.usage
        quiet.append(
            QuietPoint(
                self.seq,
                self.cycles,
                sum(usage.tokens),
                usage.cost_usd,
                usage.records,
                sum(usage.hook_tokens),
                usage.hook_cost_usd,
                usage.hook_records,
                self.stretch,
            )
        )
        self.stretch = Stretch()
        if len(quiet) > MAX_QUIET_POINTS:
            # Every other point goes: the stretch it ended joins the next one.
            kept = [_joined(quiet[index], quiet[index + 1]) for index in range(0, len(quiet) - 1, 2)]
            if len(quiet) % 2:
                kept.append(quiet[-1])
            self.quiet = kept
            self.quiet_step *= 2

    def clear_tally(self) -> None:
        """Start from a session with no events."""
        self.seq = 0
        self.open_actions = {}
        self.open_since = {}
        self.latest_begun = None
        self.marks = {}
        self.failures = 0
        self.ended_failed = False
        self.first_time = ""
        self.last_time = ""
        self.parent = ""
        self.tree_root = ""
        self.agent = ""
        self.newest_time = ""
        self.usage = UsageSum()
        self.cycles = 0
        self.first_failed = None
        self.quiet = []
        self.quiet_step = 1
        self.stretch = Stretch()

    def load_tally(self, checkpoint: Checkpoint) -> None:
        """Take the tally a checkpoint stored."""
        self.seq = checkpoint.seq
        cycles: OpenCycles = {}
        cycles.update(checkpoint.open_actions)
        for action, cycle, stage in checkpoint.open_cycles:
            cycles[action, cycle] = stage
        self.open_actions = cycles
        since: dict[str | tuple[str, str], datetime] = {}
        for action, named, begun in checkpoint.open_since:
            since[action if named is None else (action, named)] = begun
        self.open_since = since  # fewer than the open cycles: an earlier gz-ia's (see waiting_cycles)
        self.latest_begun = checkpoint.latest_begun
        self.marks = dict(checkpoint.marks)
        self.failures = checkpoint.failures
        self.ended_failed = checkpoint.ended_failed
        self.first_time = checkpoint.first_time
        self.last_time = checkpoint.last_time
        self.parent = checkpoint.parent
        self.tree_root = checkpoint.tree_root
        self.agent = checkpoint.agent
        self.newest_time = checkpoint.newest_time if checkpoint.newest_time or not checkpoint.seq else None
        usage = self.usage = UsageSum()
        usage.tokens = [*checkpoint.tokens, 0, 0, 0, 0][:4]
        usage.cost_usd = checkpoint.cost_usd
        usage.model = checkpoint.model
        # A checkpoint of an earlier gz-ia counted no records: any usage it holds was not a hook's.
        usage.records = checkpoint.usage_records or int(any(usage.tokens) or usage.cost_usd > 0)
        usage.hook_tokens = [*checkpoint.hook_tokens, 0, 0, 0, 0][:4]
        usage.hook_cost_usd = checkpoint.hook_cost_usd
        usage.hook_records = checkpoint.hook_records
        self.cycles = checkpoint.cycles
        self.first_failed = checkpoint.first_failed
        self.quiet = checkpoint.quiet if checkpoint.history else None
        self.quiet_step = checkpoint.quiet_step
        self.stretch = checkpoint.stretch or Stretch()  # the checkpoint is not used after

    def copy_tally(self, other: SessionTally) -> None:
        """Take ``other``'s tally (sharing its containers: ``other`` is dropped after)."""
        for name in TALLY_FIELDS:
            setattr(self, name, getattr(other, name))

    def tally_checkpoint(self, *, segment: int, offset: int, segment_seq: int, started: float) -> Checkpoint:
        """Return the checkpoint of this tally at ``(segment, offset)``."""
        open_actions: dict[str, Stage] = {}
        open_cycles: list[tuple[str, str, Stage]] = []
        # JSON keys are strings: cycles named by (action, cycle) are stored as a list.
        for key, stage in self.open_actions.items():
            if isinstance(key, str):
                open_actions[key] = stage
            else:
                open_cycles.append((key[0], key[1], stage))
        usage = self.usage
        return Checkpoint(
            segment=segment,
            offset=offset,
            seq=self.seq,
            segment_seq=segment_seq,
            started=started,
            open_actions=open_actions,
            open_cycles=open_cycles,
            open_since=[
                (key, None, begun) if isinstance(key, str) else (key[0], key[1], begun)
                for key, begun in self.open_since.items()
            ],
            latest_begun=self.latest_begun,
            marks=dict(self.marks),
            failures=self.failures,
            ended_failed=self.ended_failed,
            first_time=self.first_time,
            last_time=self.last_time,
            parent=self.parent,
            tree_root=self.tree_root,
            agent=self.agent,
            newest_time=self.newest_time or "",
            tokens=list(usage.tokens) if any(usage.tokens) else [],
            cost_usd=usage.cost_usd,
            model=usage.model,
            usage_records=usage.records,
            hook_tokens=list(usage.hook_tokens) if any(usage.hook_tokens) else [],
            hook_cost_usd=usage.hook_cost_usd,
            hook_records=usage.hook_records,
            usage_fold=USAGE_FOLD,
            history=self.quiet is not None,
            cycles=self.cycles if self.quiet is not None else 0,
            first_failed=self.first_failed if self.quiet is not None else None,
            quiet=_quiet_text_of(self.quiet),
            quiet_step=self.quiet_step,
            stretch=msgspec.structs.replace(self.stretch) if self.quiet is not None else None,
        )


def _quiet_text_of(quiet: list[QuietPoint] | msgspec.Raw | None) -> msgspec.Raw:
    if quiet is None:
        return NO_QUIET
    return quiet if isinstance(quiet, msgspec.Raw) else encode_quiet(quiet)


def _joined(earlier: QuietPoint, later: QuietPoint) -> QuietPoint:
    """``later`` ending the two stretches the points end, as one."""
    a, b = earlier.stretch, later.stretch
    return msgspec.structs.replace(
        later,
        stretch=Stretch(
            _low(a.begun_low, b.begun_low),
            _high(a.begun_high, b.begun_high),
            _low(a.usage_low, b.usage_low),
            _high(a.usage_high, b.usage_high),
        ),
    )


def _low(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _high(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)


def note_delivery(marks: dict[str, int], producer: str, number: int) -> None:
    """Record that ``producer``'s event ``number`` is stored (bounded table of watermarks).

    The table is kept in the order of each producer's last write (re-setting a key would leave it
    where it was first inserted), so past the bound it forgets the producers idle longest, never
    one that keeps writing.
    """
    if len(marks) > 1:
        marks.pop(producer, None)
    marks[producer] = number
    if len(marks) > MAX_WATERMARKS:
        # A resend from a producer forgotten here, after this many newer producers wrote to the
        # session, is the only case that could be taken as new instead of as a duplicate.
        for stale in list(marks)[: MAX_WATERMARKS // 2]:
            del marks[stale]
