"""The persisted checkpoint of a session (``state/<id>.session.json``) and of a rejects file.

A checkpoint records what a session's lines up to a position ``(segment, offset)`` amount to, so
that recovery and ``gz-ia sessions`` scan only what follows that position. It only ever saves work:
a missing or damaged one is rebuilt from the segments, which stay the source of truth. The mapping
between its fields and a session's running tally is :mod:`.tally`'s alone.
"""

from __future__ import annotations

import os
import stat
from datetime import datetime
from typing import Final

import msgspec

from gz_ia.client.schema import Stage

from .names import LAYOUT_VERSION
from .segments import READ_FLAGS

__all__ = [
    "MAX_CARRIED",
    "MAX_QUIET_POINTS",
    "NO_QUIET",
    "USAGE_FOLD",
    "Checkpoint",
    "FirstFailed",
    "QuietPoint",
    "QuietRow",
    "encode_checkpoint",
    "encode_quiet",
    "quiet_points",
    "quiet_rows",
    "read_checkpoint",
]

_MAX_BYTES: Final = 1 << 24


class QuietPoint(msgspec.Struct, array_like=True, frozen=True):
    """A moment no cycle of the session was open but ones with no usage recorded yet (containers, as a
    turn whose tool calls run): what its lines up to there add up to.

    Every cycle begins between two such moments and records all its usage between two (a cycle
    carried past a point had none before it), so that what a session did after any time is the
    totals less these counts, except in the stretch whose cycles began (or recorded usage) on both
    sides of it: only that stretch is read again (``gz-ia session why``). Written as the tally
    keeps it, one flat array.
    """

    seq: int
    cycles: int
    """Cycles begun up to here."""
    tokens: int
    """Tokens (every kind) of the usage records up to here that are not a hook's reading."""
    cost_usd: float
    records: int
    hook_tokens: int
    """The same, of the hooks' readings (:data:`gz_ia.client.usage.HOOK_READING`)."""
    hook_cost_usd: float
    hook_records: int
    begun_low: datetime | None
    """The earliest a cycle begun since the previous point (or the first line) began: the earliest of
    its first READ, first PENDING and FINISH, as the fold says (None: no cycle began)."""
    begun_high: datetime | None
    """No cycle begun since the previous point began later (the newest first event so far)."""
    usage_low: datetime | None
    """The earliest usage record since the previous point (None: none)."""
    usage_high: datetime | None
    """No usage record since the previous point is later (the greatest timestamp so far)."""
    carried: tuple[str | tuple[str, str], ...] = ()
    """The cycles open here (none has usage yet), keyed as the tally's open cycles."""


MAX_CARRIED: Final = 8
"""Open cycles a quiet point carries at most (past it the moment is not taken)."""


MAX_QUIET_POINTS: Final = 256
"""Quiet points a checkpoint keeps: past it every other one is dropped (two stretches become one)
and only points at least twice as many events apart are taken, so that a stretch stays within about
a 128th of the session (what ``why`` reads again of it), for a checkpoint of at most some 40 KB."""


NO_QUIET: Final = msgspec.Raw(b"[]")
"""No quiet point, as a checkpoint keeps it (left out of its text: omitted as the default it is)."""


class FirstFailed(msgspec.Struct, array_like=True, frozen=True):
    """The session's FAILED FINISH with the earliest timestamp: ``[time, action, error, tied]``."""

    at: datetime
    action: str
    error: str | None = None
    tied: bool = False
    """Another FAILED FINISH has the same time: which one came first is the fold's to say (by where
    each cycle began), so a reader folds the session."""


class Checkpoint(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a session's lines up to ``(segment, offset)`` amount to; ``state/<id>.session.json``.

    ``segment`` is the active segment's number at the time of writing and ``offset`` how many of its
    bytes the state covers (0 right after a rotation). Written atomically (temporary file + rename) at
    every rotation, when the collector closes the file, and at most every few seconds while the
    session is written to. Timestamps are kept as stored (RFC 3339 text). A rejects file's
    checkpoint uses ``segment`` and ``started`` only.
    """

    layout: int = LAYOUT_VERSION
    segment: int = 1
    offset: int = 0
    seq: int = 0
    segment_seq: int = 0
    """``seq`` of the last event before the active segment (for the event-count limit)."""
    started: float = 0.0
    """When the active segment was started (collector clock), for daily rotation."""
    open_actions: dict[str, Stage] = {}
    """Open cycles of events that name no ``cycle``: action → open stage."""
    open_cycles: list[tuple[str, str, Stage]] = []
    """Open cycles of events that name one: ``[action, cycle, open stage]``."""
    open_since: list[tuple[str, str | None, datetime]] = []
    """When each open cycle began (its first event): ``[action, cycle or null, time]``."""
    latest_begun: datetime | None = None
    """When the session's newest cycle began, open or not: an open cycle that began before it is a
    container (a turn whose tool calls run), not where the session waits. None: no cycle yet, or a
    checkpoint of an earlier gz-ia, which did not record it (nor ``open_since``)."""
    marks: dict[str, int] = {}
    failures: int = 0
    ended_failed: bool | None = None
    """Whether the last FINISH covered was FAILED; None when unknown (a checkpoint of an earlier gz-ia)."""
    first_time: str = ""
    last_time: str = ""
    parent: str = ""
    tree_root: str = ""
    """The first event's ``root_session_id``: where a reader places the session when its parent
    never logged. Empty when none (or a checkpoint of an earlier gz-ia, whose events had none)."""
    agent: str = ""
    newest_time: str = ""
    """The greatest event timestamp covered: timestamps are the agents' and may go backwards, so
    ``last_time`` does not bound them. Readers skip a session whose newest event is older than
    ``--since``. Empty when unknown (no event yet, or a checkpoint of an earlier gz-ia)."""
    tokens: list[int] = []
    """Tokens of the usage records covered, by kind (input, output, cache read, cache creation)."""
    cost_usd: float = 0.0
    model: str = ""
    """The model of the newest usage record covered that names one."""
    usage_records: int = 0
    """The usage records ``tokens`` and ``cost_usd`` add up (0 in a checkpoint of an earlier gz-ia)."""
    hook_tokens: list[int] = []
    """Tokens of the hooks' own readings of usage (:data:`gz_ia.client.usage.HOOK_READING`), counted
    only while the session has no other usage record."""
    hook_cost_usd: float = 0.0
    hook_records: int = 0
    usage_fold: int = 0
    """:data:`USAGE_FOLD` when the usage above follows today's rule (0: an earlier gz-ia's)."""
    history: bool = False
    """Whether the fields below were kept from the session's first line (False: a checkpoint
    of an earlier gz-ia, or of a tally restored from one; a reader then folds the session's lines)."""
    cycles: int = 0
    """Cycles begun (a READ or PENDING with no open cycle of its action, or a lone FINISH)."""
    first_failed: FirstFailed | None = None
    quiet: msgspec.Raw = NO_QUIET
    """Moments no cycle was open, oldest first, at most :data:`MAX_QUIET_POINTS` (a list of
    :class:`QuietPoint`), kept as text until a reader asks (:func:`quiet_points`): listing a root
    reads every checkpoint and needs none of them."""
    quiet_step: int = 1
    """Events at least between two quiet points (doubled at each thinning)."""
    begun_low: datetime | None = None
    """The earliest a cycle begun since the last quiet point began (as :class:`QuietPoint` says)."""
    usage_low: datetime | None = None
    """The earliest usage record since the last quiet point."""
    open_used: list[str | tuple[str, str]] = []
    """The open cycles with a usage record (keyed as the tally's): a moment they are open is not quiet."""

    @property
    def usage_complete(self) -> bool:
        """Whether the usage above is what the session's lines add up to today: an earlier gz-ia did
        not count the hooks' readings in plain keys, which only the Codex and Gemini CLI hooks stored."""
        return self.usage_fold >= USAGE_FOLD or self.agent not in _PLAIN_KEY_AGENTS


USAGE_FOLD: Final = 1
"""The version of the rule a checkpoint's usage was counted by (:class:`gz_ia.client.usage.UsageSum`)."""
_PLAIN_KEY_AGENTS: Final = frozenset({"codex", "gemini-cli"})

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(Checkpoint)


QuietRow = tuple[
    int,
    int,
    int,
    float,
    int,
    int,
    float,
    int,
    datetime | None,
    datetime | None,
    datetime | None,
    datetime | None,
    tuple[str | tuple[str, str], ...],
]
"""A :class:`QuietPoint` as the writer's tally keeps it: the fields in order, a plain tuple (one is
made for every quiet moment of a young session, and a tuple costs least)."""

_quiet_decoder: Final = msgspec.json.Decoder(list[QuietPoint])
_rows_decoder: Final = msgspec.json.Decoder(list[QuietRow])


def quiet_points(text: msgspec.Raw) -> list[QuietPoint] | None:
    """The quiet points a checkpoint keeps as text; None when the text is not theirs (damaged)."""
    try:
        return _quiet_decoder.decode(text)
    except msgspec.DecodeError:
        return None


def quiet_rows(text: msgspec.Raw) -> list[QuietRow] | None:
    """:func:`quiet_points` as the tally keeps them."""
    try:
        return _rows_decoder.decode(text)
    except msgspec.DecodeError:
        return None


def encode_quiet(rows: list[QuietRow]) -> msgspec.Raw:
    """Quiet points as a checkpoint keeps them."""
    return msgspec.Raw(_encoder.encode(rows)) if rows else NO_QUIET


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """Return the checkpoint's file content."""
    return _encoder.encode(checkpoint) + b"\n"


def read_checkpoint(state_fd: int | None, name: str) -> Checkpoint | None:
    """Return the checkpoint stored as ``name`` in ``state/``; None when missing or unusable.

    A damaged checkpoint (a crash on a filesystem that lost its data) is treated as absent: the
    caller rebuilds from the segments, which stay the source of truth.
    """
    if state_fd is None:
        return None
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=state_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_BYTES:
            return None
        data = os.read(fd, info.st_size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        checkpoint = _decoder.decode(data)
    except msgspec.DecodeError:
        return None
    if checkpoint.layout > LAYOUT_VERSION or checkpoint.segment < 1 or checkpoint.offset < 0:
        return None
    return checkpoint
