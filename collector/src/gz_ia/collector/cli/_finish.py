"""``-f --until-finished``: which action cycle a follower waits for, and how it ended.

The followed cycle is the first action cycle of the followed session (the action of its first
stored event: an agent's outermost task), or the first cycle of the one action named with
``--action``. It ends at that action's first FINISH event, whose status gives the exit code.
"""

from __future__ import annotations

from gz_ia.client.schema import Stage, Status, StoredEvent

__all__ = ["FinishWatch"]


class FinishWatch:
    """Watches one session's events in ``seq`` order for the end of the followed cycle."""

    def __init__(self, session_id: str, action: str | None) -> None:
        self.session_id = session_id
        self.action = action
        self.status: Status | None = None

    def feed(self, event: StoredEvent) -> bool:
        """Take the next event of any session; return whether the followed cycle just finished."""
        if self.status is not None or event.session_id != self.session_id:
            return self.status is not None
        if self.action is None:
            self.action = event.action
        if event.action == self.action and event.stage is Stage.FINISH:
            self.status = event.status
            return True
        return False
