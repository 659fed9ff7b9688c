"""The stage protocol: which stage may follow which, per ``(session_id, action)``.

READ opens a cycle or repeats while the cycle is still reading; PENDING opens a cycle, moves a
reading cycle forward or repeats; FINISH closes an open cycle, after which the same action may
start again. Going back (READ after PENDING) and FINISH without an open cycle are refused.

:func:`apply` is pure: it takes the action's open stage (``None`` when no cycle is open) and returns
the new open stage, or a :class:`Rejection`. Rejections are expected outcomes, not exceptions.
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

from gz_ia.client.protocol import RejectReason
from gz_ia.client.schema import Stage

__all__ = ["CLOSED", "NEXT_STAGE", "REFUSED", "Rejection", "apply"]

CLOSED: Final = None
"""The open stage of an action with no cycle in progress."""


class Rejection(msgspec.Struct, frozen=True):
    """Why an event cannot be accepted: a reason code and a sentence for people."""

    reason: RejectReason
    detail: str


def apply(open_stage: Stage | None, stage: Stage, action: str) -> Stage | Rejection | None:
    """Return the action's open stage after ``stage``, or why ``stage`` is not allowed now.

    Args:
        open_stage: READ or PENDING while a cycle is open, ``None`` when closed.
        stage: the incoming event's stage.
        action: the action name, for the message.
    """
    if stage is Stage.FINISH:
        if open_stage is None:
            return Rejection(
                RejectReason.FINISH_WITHOUT_START,
                f"FINISH for action {action!r} which has no open cycle (start it with READ or PENDING)",
            )
        return CLOSED
    if stage is Stage.READ and open_stage is Stage.PENDING:
        return Rejection(
            RejectReason.BACKWARD_TRANSITION,
            f"READ after PENDING for action {action!r}: a cycle cannot go back; FINISH it first",
        )
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
