"""Whether a session already holds an agent's tool call, as its hooks logged it.

An agent's telemetry and its hooks both record each tool call (Claude Code's ``tool_result`` log
record, its PreToolUse / PostToolUse hooks): the hooks' cycle, keyed by the call's id, wins, and the
telemetry's record of the same call adds nothing. A call is held when its cycle is open, staged, or
among the session's newest written lines.

The newest written lines are read once, not once per record: :class:`RecentCycles` remembers, per
session, the cycle ids of what it has read of the session's active file and how far it read, and
reads only what was appended since (the last :data:`RECENT_BYTES` of a file it has not read yet, or
that was replaced). A look-up is then a set membership, however many records an export holds and
however long the file.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import os
import re
from typing import TYPE_CHECKING, Final

import msgspec

from gz_ia.collector.storage.names import active_name

if TYPE_CHECKING:
    from gz_ia.collector.storage.sessions import RootStore, SessionState
    from gz_ia.collector.storage.writer import Writer

__all__ = ["RECENT_BYTES", "CallLookup", "Held", "RecentCycles"]

RECENT_BYTES: Final = 1 << 20
"""How far back in a session's active file a look-up first reads for the hooks' cycles."""
_CYCLES_KEPT: Final = 4096
"""Cycle ids remembered per session (the newest): more tool calls than a MiB of lines holds."""
_SESSIONS_KEPT: Final = 1024
"""Sessions whose cycle ids are remembered (the ones looked up last)."""
_IDS_KEPT: Final = 1 << 17
"""Cycle ids remembered in all (about 10 MB): past it the sessions looked up longest ago are forgotten."""
_CYCLE: Final = re.compile(rb'"cycle":("(?:[^"\\]|\\.)*")')
"""A stored line's ``cycle``, as its JSON string (the collector writes it without spaces)."""


class Held(enum.Enum):
    """Whether a session holds a tool call's cycle already."""

    NO = "no"
    YES = "yes"
    """Open (its READ staged) or among the session's newest written lines."""
    BEING_WRITTEN = "being written"
    """Its lines staged, not yet written: an answer must wait for them."""


class _Seen:
    """What was read of one session's active file: its identity, how far, and the cycle ids found."""

    __slots__ = ("cycles", "file", "offset")

    def __init__(self, file: tuple[int, int]) -> None:
        self.file = file
        self.offset = 0
        self.cycles: dict[bytes, None] = {}


class RecentCycles:
    """The cycle ids of each session's newest written lines, read incrementally (see the module)."""

    def __init__(self) -> None:
        self._seen: collections.OrderedDict[tuple[str, str], _Seen] = collections.OrderedDict()
        self._ids = 0
        """Cycle ids held, every session's."""

    def cycles(self, root: RootStore, session_id: str) -> dict[bytes, None]:
        """The JSON-encoded cycle ids in ``session_id``'s active file, as of now (read since last time)."""
        key = (str(root.path), session_id)
        seen = self._seen.get(key)
        if seen is not None:
            self._seen.move_to_end(key)
        with contextlib.suppress(OSError):
            fd = os.open(active_name(session_id), os.O_RDONLY | os.O_NOFOLLOW, dir_fd=root.dirs.sessions_fd)
            try:
                info = os.fstat(fd)
                file = (info.st_dev, info.st_ino)
                if seen is None or seen.file != file or info.st_size < seen.offset:
                    # A file not read yet, rotated, replaced or cut: its last lines, as at first.
                    seen = self._remember(key, _Seen(file))
                    seen.offset = max(0, info.st_size - RECENT_BYTES)
                if info.st_size > seen.offset:
                    held = len(seen.cycles)
                    self._read(fd, seen, info.st_size)
                    self._ids += len(seen.cycles) - held
                self._forget_oldest()
            finally:
                os.close(fd)
        return seen.cycles if seen is not None else {}

    def _remember(self, key: tuple[str, str], seen: _Seen) -> _Seen:
        replaced = self._seen.pop(key, None)
        if replaced is not None:
            self._ids -= len(replaced.cycles)
        self._seen[key] = seen
        return seen

    def _forget_oldest(self) -> None:
        """Keep within the bounds, forgetting the sessions looked up longest ago (never the newest)."""
        while len(self._seen) > 1 and (len(self._seen) > _SESSIONS_KEPT or self._ids > _IDS_KEPT):
            _key, forgotten = self._seen.popitem(last=False)
            self._ids -= len(forgotten.cycles)

    @staticmethod
    def _read(fd: int, seen: _Seen, size: int) -> None:
        """Add the cycle ids of the whole lines from ``seen.offset`` to ``size``."""
        data = os.pread(fd, size - seen.offset, seen.offset)
        end = data.rfind(b"\n") + 1  # a line being written is read whole next time
        if seen.offset and end == 0:
            return
        cycles = seen.cycles
        for found in _CYCLE.finditer(data, 0, end):
            cycle = found.group(1)
            cycles.pop(cycle, None)
            cycles[cycle] = None
        while len(cycles) > _CYCLES_KEPT:
            del cycles[next(iter(cycles))]
        seen.offset += end


class CallLookup:
    """Look-ups of one export into one root: the sessions below each session indexed once."""

    def __init__(self, writer: Writer, root: RootStore, recent: RecentCycles) -> None:
        self.writer = writer
        self.root = root
        self.recent = recent
        self._below: dict[str, list[str]] | None = None
        self._written: dict[str, dict[bytes, None]] = {}
        """Each session's written cycle ids, read once for the whole export."""
        self._looked: dict[str, list[tuple[SessionState, set[str]]]] = {}
        """The states a session's look-ups search, each with its open cycles' ids: an export holds
        many records of each session, and nothing is staged until all are looked up."""

    def below(self, session_id: str) -> list[str]:
        """The sessions of this collector whose ids extend ``session_id`` (``<session>.<agent id>``, as
        Claude Code's hooks name a subagent's), in the order the collector opened them."""
        if self._below is None:
            self._below = {}
            # Every session the collector holds, once an export: only the few with a dot are taken
            # further, and a comprehension keeps the test of the many cheap.
            for each in [each for each in self.root.sessions if "." in each]:
                at = each.find(".")
                while at > 0:
                    self._below.setdefault(each[:at], []).append(each)
                    at = each.find(".", at + 1)
        return self._below.get(session_id, [])

    def held(self, session_id: str, cycle: str) -> Held:
        """Whether the session, or one of its subagents' sessions, holds the hooks' cycle ``cycle``.

        Claude Code's record of a subagent's tool call carries its main session's id and no agent
        id, while its hooks log the call in the subagent's session: those are looked in too.
        """
        needle = msgspec.json.encode(cycle)
        for state, open_cycles in self._states(session_id):
            if cycle in open_cycles:
                return Held.YES
            if state.pending and any(b'"cycle":' + needle in line for line in state.pending):
                return Held.BEING_WRITTEN
            each = state.session_id
            written = self._written.get(each)
            if written is None:
                written = self._written[each] = self.recent.cycles(self.root, each)
            if needle in written:
                return Held.YES
        return Held.NO

    def _states(self, session_id: str) -> list[tuple[SessionState, set[str]]]:
        """The states of the session and of those below it, each with the ids of its open cycles."""
        found = self._looked.get(session_id)
        if found is None:
            found, complete = [], True
            for each in (session_id, *self.below(session_id)):
                try:
                    state = self.writer.session(self.root, each)
                except (OSError, ValueError):
                    complete = False  # looked for again by the next look-up, as if never found
                    continue
                found.append((state, {key[1] for key in state.open_actions if isinstance(key, tuple)}))
            if complete:
                self._looked[session_id] = found
        return found
