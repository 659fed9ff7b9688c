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

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec

from gz_ia.client.schema import Stage
from gz_ia.client.usage import UsageSum

from .checkpoints import (
    MAX_CARRIED,
    MAX_QUIET_POINTS,
    NO_QUIET,
    USAGE_FOLD,
    Checkpoint,
    FirstFailed,
    QuietRow,
    encode_quiet,
    quiet_rows,
)

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_WATERMARKS",
    "QUIET_FORCE",
    "QUIET_GAP",
    "TALLY_FIELDS",
    "OpenCycles",
    "SessionTally",
    "note_delivery",
]

MAX_WATERMARKS: Final = 4096
_CARRIED: Final = 12
"""Where a :data:`.checkpoints.QuietRow` keeps the cycles it carries."""
LATEST: Final = datetime.max.replace(tzinfo=UTC)
"""After every timestamp: no cycle begun, no usage record, since the last quiet point."""
EARLIEST: Final = datetime.min.replace(tzinfo=UTC)
QUIET_GAP: Final = timedelta(seconds=1)
"""Quiet points are at least this far apart in time (the greatest timestamp so far), unless
:data:`QUIET_FORCE` steps of events passed: a burst of cycles milliseconds apart makes one stretch,
and each point costs staging what a few events do."""
QUIET_FORCE: Final = 64
_NEVER: Final = 1 << 62
"""A ``quiet_next`` no session reaches: its history is not known, no point is taken."""

OpenCycles = dict[str | tuple[str, str], Stage]
"""A session's open cycles: the action, or ``(action, cycle)`` for events naming their cycle → open stage."""

TALLY_FIELDS: Final = (
    "agent",
    "begun_low",
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
    "quiet_after",
    "quiet_force",
    "quiet_next",
    "quiet_step",
    "quiet_text",
    "seq",
    "tree_root",
    "usage",
    "usage_low",
    "used_open",
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
    quiet: list[QuietRow] | msgspec.Raw | None
    """Quiet points (:class:`.checkpoints.QuietPoint`, as plain rows), or their text as a checkpoint
    keeps it until they are needed (:meth:`quiet_list`); None when the session's history is not known
    (restored from an earlier gz-ia's checkpoint): then ``cycles`` and ``first_failed`` are not either."""
    quiet_step: int
    quiet_text: msgspec.Raw | None
    """:attr:`quiet` as text, while it stays as it was encoded (a long session's checkpoint is
    written every few seconds; its points change rarely)."""
    quiet_next: int
    """The ``seq`` from which the next quiet point may be taken (0: to be found out)."""
    quiet_after: datetime
    """The greatest timestamp from which it may be taken, unless ``seq`` reached :attr:`quiet_force`."""
    quiet_force: int
    begun_low: datetime
    """The earliest a cycle begun since the last quiet point began (:data:`LATEST`: none)."""
    usage_low: datetime
    """The earliest usage record since the last quiet point (:data:`LATEST`: none)."""
    used_open: set[str | tuple[str, str]]
    """The open cycles with a usage record, keyed as :attr:`open_actions`."""

    def quiet_due(self, newest: datetime) -> bool:
        """Whether a cycle that just finished, when no open cycle has usage, makes a quiet point
        (:meth:`note_quiet`), the greatest timestamp being ``newest``: staging's test, inline there."""
        seq = self.seq
        return seq >= self.quiet_next and (newest >= self.quiet_after or seq >= self.quiet_force)

    def forget_history(self) -> None:
        """The session's history can no longer be kept: from now on only its lines tell it."""
        self.quiet = None
        self.quiet_next = _NEVER

    def begun_earlier(self, key: str | tuple[str, str], at: datetime) -> None:
        """A stage of the open cycle ``key`` came at ``at``, before its first event: the fold says the
        cycle began then. One carried past the last quiet point began in a stretch already closed,
        whose bounds can no longer say so: the history is then the files' to tell."""
        quiet = self.quiet_list()
        if quiet and key in quiet[-1][_CARRIED]:
            self.forget_history()
        elif at < self.begun_low:
            self.begun_low = at.astimezone(UTC)  # as stored

    def note_failed(self, at: datetime, action: str, error: str | None) -> None:
        """A FINISH stamped ``at`` was FAILED."""
        known = self.first_failed
        if known is None or at < known.at:
            self.first_failed = FirstFailed(at, action, error)
        elif at == known.at and not known.tied:
            self.first_failed = FirstFailed(known.at, known.action, known.error, tied=True)

    def quiet_list(self) -> list[QuietRow] | None:
        """The quiet points (decoded from the checkpoint's text on first use)."""
        quiet = self.quiet
        if isinstance(quiet, msgspec.Raw):
            quiet = self.quiet = quiet_rows(quiet)
        return quiet

    def note_quiet(self, newest: datetime | None) -> None:
        """A quiet point, as :meth:`quiet_due` found one due (unless more than :data:`MAX_CARRIED`
        cycles are open). ``newest``: the greatest timestamp so far."""
        quiet = self.quiet
        if quiet.__class__ is not list or not self.quiet_next:
            if not self._quiet_due():
                return
            quiet = self.quiet
        assert isinstance(quiet, list)
        open_actions = self.open_actions
        if open_actions and len(open_actions) > MAX_CARRIED:
            return
        usage = self.usage
        tokens = usage.tokens
        hook_tokens = usage.hook_tokens
        begun_low = self.begun_low
        usage_low = self.usage_low
        seq = self.seq
        quiet.append(
            (
                seq,
                self.cycles,
                tokens[0] + tokens[1] + tokens[2] + tokens[3],
                usage.cost_usd,
                usage.records,
                hook_tokens[0] + hook_tokens[1] + hook_tokens[2] + hook_tokens[3] if usage.hook_records else 0,
                usage.hook_cost_usd,
                usage.hook_records,
                None if begun_low is LATEST else begun_low,
                self.latest_begun,
                None if usage_low is LATEST else usage_low,
                None if usage_low is LATEST else newest,
                tuple(open_actions) if open_actions else (),
            )
        )
        self.begun_low = self.usage_low = LATEST
        self.quiet_text = None
        if len(quiet) > MAX_QUIET_POINTS:
            self.quiet = _thinned(quiet)
            self.quiet_step *= 2
        step = self.quiet_step
        self.quiet_next = seq + step
        self.quiet_force = seq + QUIET_FORCE * step
        self.quiet_after = EARLIEST if newest is None else newest + QUIET_GAP

    def _quiet_text(self) -> msgspec.Raw:
        """The quiet points as a checkpoint keeps them (encoded once for as long as they stay)."""
        quiet = self.quiet
        if quiet is None:
            return NO_QUIET
        if isinstance(quiet, msgspec.Raw):
            return quiet
        text = self.quiet_text
        if text is None:
            text = self.quiet_text = encode_quiet(quiet)
        return text

    def _quiet_due(self) -> bool:
        """Whether a point is due now, for a tally restored from a checkpoint (its points decoded and
        ``quiet_next`` set from the last of them first)."""
        quiet = self.quiet_list()
        if quiet is None:
            self.quiet_next = _NEVER
            return False
        if not self.quiet_next:
            last = quiet[-1][0] if quiet else 0
            self.quiet_next = last + self.quiet_step
            self.quiet_force = last + QUIET_FORCE * self.quiet_step
        return self.seq >= self.quiet_next

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
        self.quiet_next = 1  # a point may be taken from the first line on
        self.quiet_after = EARLIEST
        self.quiet_force = QUIET_FORCE
        self.quiet_text = None
        self.begun_low = self.usage_low = LATEST
        self.used_open = set()

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
        self.quiet_next = 0  # found out from the last point when one may be due
        self.quiet_after = EARLIEST
        self.quiet_force = 0
        self.quiet_text = None
        self.begun_low = checkpoint.begun_low or LATEST
        self.usage_low = checkpoint.usage_low or LATEST
        self.used_open = set(checkpoint.open_used)

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
            quiet=self._quiet_text(),
            quiet_step=self.quiet_step,
            begun_low=None if self.quiet is None or self.begun_low is LATEST else self.begun_low,
            usage_low=None if self.quiet is None or self.usage_low is LATEST else self.usage_low,
            open_used=list(self.used_open) if self.quiet is not None else [],
        )


def _thinned(rows: list[QuietRow]) -> list[QuietRow]:
    """Every other point dropped, the stretch it ended joined to the next one's: the lows are the
    earlier of the two, the highs (the newest first event, the greatest timestamp, so far) the later's."""
    kept: list[QuietRow] = [
        (
            *b[:8],
            b[8] if a[8] is None or (b[8] is not None and b[8] < a[8]) else a[8],
            b[9] if b[9] is not None else a[9],
            b[10] if a[10] is None or (b[10] is not None and b[10] < a[10]) else a[10],
            b[11] if b[11] is not None else a[11],
            b[12],
        )
        for a, b in zip(rows[0::2], rows[1::2], strict=False)
    ]
    if len(rows) % 2:
        kept.append(rows[-1])
    return kept


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
