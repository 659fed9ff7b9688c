"""What the Claude Code mapping remembers between two hook calls of one Claude Code session.

A hook call sees one payload; a cycle spans several (PreToolUse … PostToolUse, UserPromptSubmit …
Stop). :class:`HookState` is the little that links them: the cycles still open (when each opened,
in which gz-ia session, under which cycle id), the tool calls already finished (so that the
PostToolBatch listing them closes nothing twice), and how the last turn ended (for the session's
own FINISH).

It is a plain JSON-able dict, so where it lives is its owner's choice: the command hook keeps it in
the session's ledger file (:mod:`..command_hook`), a receiver inside the collector keeps it in memory
(:class:`SessionStates`). Neither the mapping nor the state knows how events are delivered.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the command hook more than the rest of its work
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["MAX_FINISHED", "MAX_OPEN", "MAX_SESSIONS", "HookState", "OpenCycle", "SessionStates"]

MAX_OPEN: Final = 512
"""Open cycles remembered per Claude Code session; past it the oldest are forgotten."""
MAX_FINISHED: Final = 256
"""Finished tool call ids remembered per Claude Code session (a PostToolBatch lists one turn's calls)."""
MAX_SESSIONS: Final = 4096
"""Claude Code sessions a :class:`SessionStates` holds; past it the least recently used is forgotten."""


class OpenCycle:
    """One open cycle: what its FINISH needs (stored as a list, the ledger's JSON)."""

    __slots__ = ("action", "cycle", "parent", "role", "session_id", "started_ns")

    def __init__(
        self,
        action: str,
        started_ns: int,
        session_id: str,
        cycle: str | None = None,
        parent: str | None = None,
        role: str | None = None,
    ) -> None:
        self.action = action
        self.started_ns = started_ns
        self.session_id = session_id
        self.cycle = cycle
        self.parent = parent
        self.role = role

    def as_list(self) -> list[Any]:
        """The stored form."""
        return [self.action, self.started_ns, self.session_id, self.cycle, self.parent, self.role]

    @classmethod
    def from_list(cls, entry: list[Any]) -> OpenCycle:
        """Read the stored form (an older ledger's shorter list included)."""
        padded = [*entry, None, None, None][:6]
        return cls(str(padded[0]), int(padded[1]), str(padded[2]), padded[3] or None, padded[4], padded[5])


class HookState:
    """The open cycles and recent outcomes of one Claude Code session, over a plain dict.

    Args:
        data: the dict to keep them in (a ledger's ``data``); a new one when None.
    """

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data: dict[str, Any] = {} if data is None else data

    def _open(self) -> dict[str, list[Any]]:
        opened: dict[str, list[Any]] = self.data.setdefault("open", {})
        return opened

    def is_open(self, key: str) -> bool:
        """Tell whether a cycle is open under ``key``."""
        return key in self.data.get("open", {})

    def open(self, key: str, cycle: OpenCycle) -> bool:
        """Remember ``cycle`` under ``key``; False (nothing changed) when one is open there already."""
        opened = self._open()
        if key in opened:
            return False
        while len(opened) >= MAX_OPEN:
            del opened[next(iter(opened))]
        opened[key] = cycle.as_list()
        return True

    def close(self, key: str) -> OpenCycle | None:
        """Forget the cycle open under ``key`` and return it (None when none is)."""
        entry = self.data.get("open", {}).pop(key, None)
        return None if entry is None else OpenCycle.from_list(entry)

    def open_keys(self) -> list[str]:
        """The keys of every open cycle, oldest first."""
        return list(self.data.get("open", {}))

    def note_finished(self, tool_use_id: str) -> None:
        """Remember that this tool call's FINISH was logged."""
        finished: list[str] = self.data.setdefault("finished", [])
        if tool_use_id not in finished:
            finished.append(tool_use_id)
            del finished[:-MAX_FINISHED]

    def was_finished(self, tool_use_id: str) -> bool:
        """Tell whether this tool call's FINISH was logged already."""
        return tool_use_id in self.data.get("finished", ())

    @property
    def failed_turn(self) -> str | None:
        """The error of the last turn when it failed (StopFailure), None when it ended well."""
        value = self.data.get("failed_turn")
        return str(value) if value else None

    @failed_turn.setter
    def failed_turn(self, error: str | None) -> None:
        if error:
            self.data["failed_turn"] = error
        else:
            self.data.pop("failed_turn", None)

    @property
    def ended_on(self) -> str | None:
        """The API error SessionEnd closed the turn with, read from the transcript before the turn's
        own StopFailure came: kept (the state is not forgotten) until that StopFailure."""
        value = self.data.get("ended_on")
        return str(value) if value else None

    @ended_on.setter
    def ended_on(self, error: str | None) -> None:
        if error:
            self.data["ended_on"] = error
        else:
            self.data.pop("ended_on", None)

    def is_empty(self) -> bool:
        """Tell whether nothing is left open or awaited (the session's state may be forgotten)."""
        return not self.data.get("open") and not self.data.get("ended_on")


class SessionStates:
    """The :class:`HookState` of each Claude Code session, in memory (a receiver inside the collector).

    Bounded: past :data:`MAX_SESSIONS` the least recently used session is forgotten (its open cycles
    then stay open until a later payload or the collector's own bounds close them). Not thread-safe:
    one event loop owns it.
    """

    __slots__ = ("_states",)

    def __init__(self) -> None:
        self._states: dict[str, HookState] = {}

    def get(self, key: str) -> HookState:
        """The state of ``key`` (a Claude Code session, with whatever else tells sessions apart)."""
        state = self._states.pop(key, None)
        if state is None:
            state = HookState()
            while len(self._states) >= MAX_SESSIONS:
                del self._states[next(iter(self._states))]
        self._states[key] = state
        return state

    def forget(self, key: str) -> None:
        """Drop ``key``'s state (its session ended with nothing open)."""
        self._states.pop(key, None)

    def __len__(self) -> int:
        return len(self._states)
