"""The stage protocol: which stage may follow which, per cycle, and how many cycles may be open.

A cycle is keyed ``(session_id, action)``, or ``(session_id, action, cycle)`` for an event that
carries a ``cycle`` id (one action scope: runs of one action open at once are separate cycles).
READ opens a cycle or repeats while the cycle is still reading; PENDING opens a cycle, moves a
reading cycle forward or repeats; FINISH closes an open cycle, after which the same action may
start again. Going back (READ after PENDING) and FINISH without an open cycle are refused.

:func:`apply` is pure: it takes the cycle's open stage (``None`` when no cycle is open) and returns
the new open stage, or a :class:`~.rules.Rejection` (built in :mod:`.rules`, as every refusal is).
Rejections are expected outcomes, not exceptions.
Every cycle is opened through :class:`CycleBudget`, which bounds the memory they hold.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import Final

from gz_ia.client.schema import Stage

from .rules import (
    Rejection,
    backward_transition,
    finish_without_start,
    too_many_open_actions,
    too_many_open_actions_total,
)

__all__ = [
    "CLOSED",
    "DEFAULT_MAX_OPEN_ACTIONS",
    "DEFAULT_MAX_OPEN_ACTIONS_TOTAL",
    "NEXT_STAGE",
    "REFUSED",
    "CycleBudget",
    "CycleKey",
    "apply",
]

DEFAULT_MAX_OPEN_ACTIONS: Final = 10_000
"""Open cycles per session."""
DEFAULT_MAX_OPEN_ACTIONS_TOTAL: Final = 1_000_000
"""Open cycles in a collector's memory (about 100 bytes each)."""
_RECOUNT_INTERVAL: Final = 1.0

CycleKey = str | tuple[str, str]
"""What a session's open cycles are keyed on: the action, or ``(action, cycle)`` when the event names its cycle."""

CLOSED: Final = None
"""The open stage of an action with no cycle in progress."""


def apply(open_stage: Stage | None, stage: Stage, action: str, cycle: str | None = None) -> Stage | Rejection | None:
    """Return the cycle's open stage after ``stage``, or why ``stage`` is not allowed now.

    Args:
        open_stage: READ or PENDING while a cycle is open, ``None`` when closed.
        stage: the incoming event's stage.
        action: the action name, for the message.
        cycle: the event's cycle id, if it names one, for the message.
    """
    named = f"action {action!r}" if cycle is None else f"action {action!r} cycle {cycle!r}"
    if stage is Stage.FINISH:
        if open_stage is None:
            return finish_without_start(named)
        return CLOSED
    if stage is Stage.READ and open_stage is Stage.PENDING:
        return backward_transition(named)
    return stage


class _Refused(enum.Enum):
    """The type of :data:`REFUSED` alone, so that type checkers narrow ``x is REFUSED``."""

    REFUSED = 0


REFUSED: Final = _Refused.REFUSED
"""What ``NEXT_STAGE.get(move, REFUSED)`` returns for a move the protocol refuses."""

NEXT_STAGE: Final[dict[tuple[Stage | None, Stage], Stage | None]] = {
    (open_stage, stage): result
    for open_stage in (CLOSED, Stage.READ, Stage.PENDING)
    for stage in Stage
    if not isinstance(result := apply(open_stage, stage, ""), Rejection)
}
"""Every allowed move, ``(open stage, incoming stage) → open stage after it``, derived from :func:`apply`.

The collector looks each event up here (one dictionary lookup) and calls :func:`apply` only for the
moves it refuses, to get the reason and the sentence.
"""


class CycleBudget:
    """The bound on open cycles, per session and across every session in memory.

    An open cycle holds memory until its FINISH, and an agent may never send one. :meth:`open` is the
    only way a cycle is opened, so neither bound can be bypassed. ``count`` goes up with each cycle
    opened here and each session loaded with open cycles (:meth:`adopt`), and down with each FINISH
    (the caller's ``count -= 1``: a close is never refused, and a call per event costs); sessions the
    writer lets go of are not subtracted, so when the count reaches the bound it is taken again from
    the sessions in memory (``recount``, at most once a second).

    Args:
        recount: the number of open cycles actually in memory.
        per_session: open cycles one session may hold.
        total: open cycles all sessions in memory may hold.
        clock: monotonic seconds, to space recounts.
    """

    __slots__ = ("_clock", "_recount", "_recounted_at", "count", "per_session", "total")

    def __init__(
        self,
        *,
        recount: Callable[[], int],
        per_session: int = DEFAULT_MAX_OPEN_ACTIONS,
        total: int = DEFAULT_MAX_OPEN_ACTIONS_TOTAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_session = per_session
        self.total = total
        self.count = 0
        self._recount = recount
        self._clock = clock
        self._recounted_at = -_RECOUNT_INTERVAL

    def open(self, cycles: dict[CycleKey, Stage], key: CycleKey, stage: Stage, session_id: str) -> Rejection | None:
        """Open ``key`` at ``stage`` in a session's ``cycles``, or say which bound refuses it."""
        if len(cycles) >= self.per_session:
            return too_many_open_actions(session_id, len(cycles))
        if self.count >= self.total and not self._below_total():
            return too_many_open_actions_total(self.count)
        cycles[key] = stage
        self.count += 1
        return None

    def adopt(self, cycles: dict[CycleKey, Stage]) -> None:
        """Count the open cycles of a session just loaded into memory (rebuilt from its files)."""
        self.count += len(cycles)

    def _below_total(self) -> bool:
        now = self._clock()
        if now - self._recounted_at < _RECOUNT_INTERVAL:
            return False
        self._recounted_at = now
        self.count = self._recount()
        return self.count < self.total
