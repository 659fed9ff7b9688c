"""Where a staged batch is answered once its write pass ends: one acknowledgement for every source.

A source hands :meth:`.intake.Intake.stage` a :class:`Reply` with each batch, and the write passes
(:mod:`.write_passes`) call it once the pass that carries the batch is over: a client's connection
sends the verdicts on its socket, an HTTP request waits on a future (:class:`FutureReply`), a hook
that is answered before the write takes :data:`ANSWER_NOW`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from gz_ia.collector.ingest.staging import BatchOutcome

__all__ = ["ANSWER_NOW", "FutureReply", "Reply"]


class Reply(Protocol):
    """The acknowledgement of one staged batch."""

    @property
    def closing(self) -> bool:
        """Whether it can take no answer any more (its connection is going away)."""
        ...

    def written(self, outcome: BatchOutcome) -> None:
        """The batch's lines are written (with the collector's durability): its verdicts are in ``outcome``."""
        ...

    def lost(self) -> None:
        """A failed write dropped the batch: it is refused whole, and its source sends nothing more
        before resending it. Called as soon as the failure is known, and again at the batch's turn:
        only the first call counts."""
        ...


class FutureReply:
    """A reply that resolves a future, which an HTTP request awaits: True once written, False once lost."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[bool]) -> None:
        self.future = future

    @property
    def closing(self) -> bool:
        return self.future.done()

    def written(self, outcome: BatchOutcome) -> None:
        if not self.future.done():
            self.future.set_result(True)

    def lost(self) -> None:
        if not self.future.done():
            self.future.set_result(False)


class _AnswerNow:
    """The reply of a source answered before the write (an agent's hook must never wait on it)."""

    __slots__ = ()

    closing: Final = False

    def written(self, outcome: BatchOutcome) -> None:
        """Nothing to tell: the source was answered when the batch was staged."""

    def lost(self) -> None:
        """Nothing to tell: the loss is counted and logged by the write pass."""


ANSWER_NOW: Final[Reply] = _AnswerNow()
"""The one reply of every batch answered when it is staged."""
