"""Sessions of a root: one summary each (``gz-ia sessions``), and the one tree of subagent sessions.

A summary comes from the session's checkpoint when it covers every stored line (the common case:
one ``stat`` and one small read), otherwise from replaying what was written after it.
:func:`build_tree` is the only tree builder: ``gz-ia session tree``, ``--tree``, the HTML timeline
and the MCP server all draw the tree it returns.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import is_safe_session_id
from gz_ia.collector.storage.archive_seal import seal_holds
from gz_ia.collector.storage.checkpoints import (
    Checkpoint,
    FirstFailed,
    QuietPoint,
    encode_quiet,
    quiet_points,
    read_checkpoint,
)
from gz_ia.collector.storage.names import (
    ACTIVE_SUFFIX,
    STATE_SUFFIX,
    active_name,
    parse_archive_name,
    session_archive,
    session_id_of,
    session_id_of_state,
)
from gz_ia.collector.storage.replay import SessionFold, replay_session
from gz_ia.collector.storage.roots import RootDirs
from gz_ia.collector.storage.segments import SegmentUnreadable, segment_exists
from gz_ia.collector.storage.tally import LATEST, SessionTally

from .segments import SessionNotFound, SessionView, open_dirs, require_root
from .verify import SeqCheck

__all__ = [
    "MAX_TREE_DEPTH",
    "Listing",
    "SessionHistory",
    "SessionSummary",
    "TreeNode",
    "build_tree",
    "covering_checkpoint",
    "history_of",
    "list_sessions",
    "session_tree",
    "tree_usage",
    "waiting_of",
]


class SessionHistory(msgspec.Struct, frozen=True):
    """What a session's tally knows of its time line, for ``gz-ia session why`` to split it at a
    moment without reading its lines (:mod:`.after`)."""

    quiet_text: msgspec.Raw
    """Its quiet points (:class:`gz_ia.collector.storage.checkpoints.QuietPoint`), oldest first, as
    the checkpoint keeps them (:meth:`quiet`: decoded only when asked)."""
    end: QuietPoint
    """The totals, and the stretch since the last quiet point (ending at the last line)."""
    first_failed: FirstFailed | None
    """Its FAILED FINISH with the earliest timestamp."""
    newest_time: str
    """Its greatest timestamp, as stored ("" when unknown)."""

    @property
    def newest(self) -> datetime | None:
        """Its greatest timestamp."""
        return _time(self.newest_time)

    def quiet(self) -> list[QuietPoint] | None:
        """The quiet points; None when their text is damaged."""
        return quiet_points(self.quiet_text)


class SessionSummary(msgspec.Struct, frozen=True):
    """One line of ``gz-ia sessions``."""

    session_id: str
    parent_session_id: str | None
    agent: str
    first_time: datetime | None
    last_time: datetime | None
    events: int
    open_actions: int
    failures: int
    segments: int
    """Segment number of the active file: how many segments the session has had."""
    incomplete: bool = False
    """Some retained data could not be read: the counts may be low."""
    unreadable: tuple[str, ...] = ()
    """The files found unreadable or changed, when the listing can name them (an archive whose seal
    broke; with ``verify``, every segment that failed to read)."""
    damage: tuple[str, ...] = ()
    """With ``verify``: what the ``seq`` sequence inside the files shows (a line missing, a seq
    twice, a seq out of order), each naming the file (see :mod:`.verify`)."""
    root_session_id: str | None = None
    """The top of the session's tree, when its first event names one other than its parent."""
    ended_failed: bool | None = None
    """Whether its last FINISH was FAILED (None: unknown, summarised from an earlier gz-ia's checkpoint)."""

    @property
    def failed(self) -> bool:
        """Whether the session counts as failed: its last FINISH failed, so the agent did not carry on
        past the failure (a failed tool call the agent recovered from does not make a failed session).
        Where the last FINISH is unknown (an earlier gz-ia's checkpoint), any FAILED event counts."""
        return bool(self.failures) if self.ended_failed is None else self.ended_failed

    waiting: tuple[tuple[str, str, datetime], ...] | None = None
    """The open cycles where the session waits, from its tally: ``(action, open stage, since)`` of
    each that no later cycle began after (an open cycle a later one began in is a container, as a turn
    whose tool calls run). None: not known from the tally (an earlier gz-ia's checkpoint)."""

    tokens: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Tokens of the session's own usage records by kind: input, output, cache read, cache creation."""
    cost_usd: float = 0.0
    model: str = ""
    """The model of the session's newest usage record that names one."""
    hooks_usage_counts: bool = True
    """The usage above is its hooks' readings: it has no other usage record
    (:class:`gz_ia.client.usage.UsageSum`)."""
    history: SessionHistory | None = None
    """None when its tally does not know it (an earlier gz-ia's checkpoint, a time that does not
    parse, its first segment deleted by retention): then only its lines tell."""

    @property
    def status(self) -> str:
        """``running`` (open actions), ``failed`` (its last FINISH failed: :attr:`failed`), or ``ok``:
        the status every window shows."""
        return "running" if self.open_actions else "failed" if self.failed else "ok"

    @property
    def total_tokens(self) -> int:
        """Every token of the session's own usage records, all kinds together."""
        return sum(self.tokens)


MAX_TREE_DEPTH: Final = 64
"""How many levels of subagents a tree holds below its top; deeper sessions are counted, not listed."""


class TreeNode(msgspec.Struct):
    """A session and its subagent sessions (children ordered by first event)."""

    summary: SessionSummary
    children: list[TreeNode] = msgspec.field(default_factory=list)
    hidden: int = 0
    """Descendants left out below :data:`MAX_TREE_DEPTH` (this node is at that depth)."""

    @property
    def session_id(self) -> str:
        """The node's session id."""
        return self.summary.session_id

    @property
    def status(self) -> str:
        """``running`` (open actions), ``failed`` (its last FINISH failed: :attr:`SessionSummary.failed`), or ``ok``.

        A session with no events of its own (known only as a parent) has nothing to say for itself:
        it takes the status of its subagents, ``running`` if any runs, else ``failed`` if any failed.
        """
        summary = self.summary
        if summary.events:
            return summary.status
        below = {child.status for child in self.children}
        return "running" if "running" in below else "failed" if "failed" in below else "ok"

    @property
    def duration_seconds(self) -> float | None:
        """Seconds from the first to the last event, when both are known."""
        first, last = self.summary.first_time, self.summary.last_time
        return None if first is None or last is None else max(0.0, (last - first).total_seconds())

    @property
    def tree_tokens(self) -> tuple[int, int, int, int]:
        """Tokens by kind of this session and every session below it (subagents included)."""
        totals = [0, 0, 0, 0]
        for _depth, node in self.walk():
            for index, count in enumerate(node.summary.tokens):
                totals[index] += count
        return (totals[0], totals[1], totals[2], totals[3])

    @property
    def tree_cost_usd(self) -> float:
        """Cost of this session and every session below it (subagents included)."""
        return sum(node.summary.cost_usd for _depth, node in self.walk())

    def walk(self, depth: int = 0) -> Iterator[tuple[int, TreeNode]]:
        """Yield ``(depth, node)`` for this node and every descendant, depth first."""
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)


def _time(text: str) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _quick_summary(
    dirs: RootDirs, session_id: str, listing: Listing, *, history: bool = False
) -> SessionSummary | None:
    """Summarise from the checkpoint alone when it covers the whole active file (the common case).

    The directory listing already says which archives exist, so this costs one ``stat`` and one
    small read; anything that does not line up (no checkpoint, bytes written since, a rotation
    racing with us) goes the careful way through :func:`_summary`.
    """
    checkpoint = covering_checkpoint(dirs, session_id, listing)
    if checkpoint is None:
        return None
    return _summary_of(session_id, SessionFold(checkpoint), segments=checkpoint.segment, history=history)


def covering_checkpoint(dirs: RootDirs, session_id: str, listing: Listing) -> Checkpoint | None:
    """The session's checkpoint when it covers every stored line: no archive after it, and the active
    file (if any) exactly as long as it says. None otherwise: then only reading the lines is exact."""
    checkpoint = read_checkpoint(dirs.state_fd, session_id + STATE_SUFFIX)
    if checkpoint is None or listing.newest_archive.get(session_id, 0) >= checkpoint.segment:
        return None
    if not checkpoint.usage_complete:
        return None
    try:
        info = os.stat(session_id + ACTIVE_SUFFIX, dir_fd=dirs.sessions_fd, follow_symlinks=False)
    except FileNotFoundError:
        size = 0
    except OSError:
        return None
    else:
        if not stat.S_ISREG(info.st_mode):
            return None
        size = info.st_size
    return checkpoint if size == checkpoint.offset else None


def waiting_of(state: SessionTally) -> tuple[tuple[str, str, datetime], ...] | None:
    """:attr:`SessionSummary.waiting` of a tally (None when its open cycles' start times are not all known)."""
    # Copies (each one C call): the collector's memory is read from another thread than the one
    # staging events; a cycle opened between the two copies only makes the answer unknown.
    cycles = state.open_actions.copy()
    if not cycles:
        return ()
    since = state.open_since.copy()
    latest = state.latest_begun
    if latest is None or len(since) != len(cycles):
        return None
    found = []
    for key, stage in cycles.items():
        begun = since.get(key)
        if begun is None:
            return None
        if begun >= latest:
            found.append((key if isinstance(key, str) else key[0], stage.value, begun))
    return tuple(found)


def history_of(state: SessionTally) -> SessionHistory | None:
    """:attr:`SessionSummary.history` of a tally."""
    quiet = state.quiet
    if quiet is None:
        return None
    text = quiet if isinstance(quiet, msgspec.Raw) else encode_quiet(quiet)
    usage = state.usage
    end = QuietPoint(
        state.seq,
        state.cycles,
        sum(usage.tokens),
        usage.cost_usd,
        usage.records,
        sum(usage.hook_tokens),
        usage.hook_cost_usd,
        usage.hook_records,
        None if state.begun_low is LATEST else state.begun_low,
        state.latest_begun,
        None if state.usage_low is LATEST else state.usage_low,
        None if state.usage_low is LATEST else _time(state.newest_time or ""),
    )
    return SessionHistory(text, end, state.first_failed, state.newest_time or "")


def _summary_of(
    session_id: str, state: SessionTally, *, segments: int, incomplete: bool = False, history: bool = False
) -> SessionSummary:
    """A summary from a session's tally (restored from its checkpoint, or rebuilt by a replay);
    ``history``: with :attr:`SessionSummary.history`."""
    tokens, cost = state.usage.counted()
    return SessionSummary(
        session_id=session_id,
        parent_session_id=state.parent or None,
        agent=state.agent,
        first_time=_time(state.first_time),
        last_time=_time(state.last_time),
        events=state.seq,
        open_actions=len(state.open_actions),
        failures=state.failures,
        segments=segments,
        incomplete=incomplete,
        waiting=waiting_of(state),
        root_session_id=state.tree_root or None,
        tokens=tokens,
        cost_usd=cost,
        model=state.usage.model,
        hooks_usage_counts=state.usage.from_hooks,
        ended_failed=state.ended_failed,
        history=history_of(state) if history else None,
    )


class Listing:
    """What one listing of ``sessions/`` (and ``state/``) says: session ids and their newest archive.

    ``checkpoints=False`` leaves out sessions known only by a checkpoint, with no file left to read.
    """

    def __init__(self, dirs: RootDirs, *, checkpoints: bool = True) -> None:
        self.session_ids: set[str] = set()
        self.active: set[str] = set()
        """Sessions with an active file."""
        self.newest_archive: dict[str, int] = {}
        self.archives: dict[str, set[int]] = {}
        self.compressed: dict[str, list[str]] = {}
        """File names of each session's compressed archives."""
        self.damaged: set[str] = set()
        """Sessions with something other than a regular file under an archive's name."""
        with os.scandir(dirs.sessions_fd) as entries:
            for item in entries:
                name = item.name
                session_id = session_id_of(name)
                if session_id is not None:
                    self.active.add(session_id)
                else:
                    archive = parse_archive_name(name)
                    if archive is None:
                        continue
                    session_id = archive[0]
                    self.archives.setdefault(session_id, set()).add(archive[1])
                    if archive[2]:
                        self.compressed.setdefault(session_id, []).append(name)
                    if archive[1] > self.newest_archive.get(session_id, 0):
                        self.newest_archive[session_id] = archive[1]
                    if not item.is_file(follow_symlinks=False):
                        self.damaged.add(session_id)
                self.session_ids.add(session_id)
        if checkpoints and dirs.state_fd is not None:
            with contextlib.suppress(OSError):
                for name in os.listdir(dirs.state_fd):
                    session_id = session_id_of_state(name)
                    if session_id is not None:
                        self.session_ids.add(session_id)

    def holed(self, session_id: str) -> bool:
        """Whether the listing already shows damage: a gap in the archive numbers, or a non-file."""
        numbers = self.archives.get(session_id)
        return session_id in self.damaged or (numbers is not None and len(numbers) != max(numbers) - min(numbers) + 1)

    def changed_archives(self, dirs: RootDirs, session_id: str) -> list[str]:
        """The compressed archives of the session changed since the collector wrote them, as their
        seals tell without decompressing them (:mod:`~gz_ia.collector.storage.archive_seal`)."""
        return sorted(
            name for name in self.compressed.get(session_id, ()) if seal_holds(dirs.sessions_fd, name) is False
        )

    def segment_name(self, session_id: str, number: int, active_number: int) -> str:
        """The file name of one of the session's segments, as listed."""
        if number == active_number:
            return active_name(session_id)
        name_of = session_archive(session_id, number)
        return name_of(True) if name_of(True) in self.compressed.get(session_id, ()) else name_of(False)


def _summary(
    dirs: RootDirs, session_id: str, *, verify: bool = False, listing: Listing | None = None, history: bool = False
) -> SessionSummary | None:
    try:
        view = SessionView(dirs, session_id)
    except SegmentUnreadable:
        return None
    try:
        if not view.exists():
            return None
        # Verifying replays every retained segment (decompressing each archive) instead of
        # trusting the checkpoint, so that damage anywhere shows as `incomplete`.
        numbers: list[int] = []
        check = None
        if verify:
            active_number = view.active_number

            def name_of(number: int) -> str:
                if listing is not None:
                    return listing.segment_name(session_id, number, active_number)
                return (
                    active_name(session_id) if number == active_number else session_archive(session_id, number)(False)
                )

            first_kept = active_number == 1 or segment_exists(dirs.sessions_fd, session_archive(session_id, 1))
            check = SeqCheck(name_of, starts_at_one=first_kept)
        fold, _segment_seq, complete = replay_session(
            dirs.sessions_fd,
            session_id,
            None if verify else view.checkpoint,
            view.active_number,
            view.active,
            unreadable=numbers,
            observe=check,
        )
        # An archive gone between older ones (removed by hand) is not unreadable: it is named as missing.
        missing = [
            number
            for number in numbers
            if number != view.active_number
            and not segment_exists(dirs.sessions_fd, session_archive(session_id, number))
        ]
    finally:
        view.close()
    numbers = [number for number in numbers if number not in missing]
    if view.active_unreadable:
        numbers.append(view.active_number)
    damage = tuple(check.finish(view.checkpoint.seq if view.checkpoint is not None else 0)) if check else ()
    if missing:
        gone = tuple(
            f"segment {number} ({session_archive(session_id, number)(False)}) is missing" for number in missing
        )
        damage = gone + damage
    summary = _summary_of(
        session_id,
        fold,
        segments=view.active_number,
        incomplete=not complete or bool(numbers) or bool(damage),
        history=history,
    )
    if damage:
        summary = msgspec.structs.replace(summary, damage=damage)
    if listing is not None and numbers:
        names = tuple(listing.segment_name(session_id, number, view.active_number) for number in sorted(set(numbers)))
        summary = msgspec.structs.replace(summary, unreadable=names)
    return summary


def list_sessions(
    root: Path, *, verify: bool = False, known: Mapping[str, SessionSummary] | None = None, history: bool = False
) -> list[SessionSummary]:
    """Summarise every session stored under ``root``, ordered by first event (then id).

    Each summary costs the session's checkpoint plus a scan of what was written after it (the
    collector refreshes checkpoints every few seconds), so this stays fast with many sessions.
    ``incomplete`` then says what the listing shows (a missing archive number, something other
    than a file under an archive's name) and what each compressed archive's seal tells (cut,
    extended, another trailer: never its times); with ``verify`` every retained segment is read
    instead of the seals, so that any damage shows and only damage shows, at the cost of reading
    the whole root. ``unreadable`` names the files found so. A missing root has no sessions.
    ``known`` gives summaries that are taken as they are instead of reading those sessions' files
    (what the collector writing them holds in memory, newer than their checkpoints). ``history``
    adds each :attr:`SessionSummary.history` (``gz-ia session why``; the rest need none of it).

    Raises:
        LayoutTooNew: the root was written by a newer gz-ia.
    """
    try:
        dirs = open_dirs(root)
    except SessionNotFound:
        return []
    try:
        listing = Listing(dirs)
        summaries = []
        for session_id in listing.session_ids:
            if known is not None and not verify and session_id in known:
                summaries.append(known[session_id])
                continue
            if verify:
                summary = _summary(dirs, session_id, verify=True, listing=listing)
            else:
                summary = _quick_summary(dirs, session_id, listing, history=history) or _summary(
                    dirs, session_id, listing=listing, history=history
                )
            if summary is None:
                continue
            # Verifying decompressed every archive: what it read is the verdict, not their seals.
            changed = [] if verify else listing.changed_archives(dirs, session_id)
            if changed:
                named = sorted({*summary.unreadable, *changed})
                summary = msgspec.structs.replace(summary, incomplete=True, unreadable=tuple(named))
            elif listing.holed(session_id) and not summary.incomplete:
                summary = msgspec.structs.replace(summary, incomplete=True)
            if summary.history is not None and summary.segments > 1 and 1 not in listing.archives.get(session_id, ()):
                # Retention deleted its oldest lines: what is left is the files' to tell.
                summary = msgspec.structs.replace(summary, history=None)
            summaries.append(summary)
    finally:
        dirs.close()
    summaries.sort(key=lambda item: (item.first_time is None, item.first_time or datetime.min, item.session_id))
    return summaries


def build_tree(summaries: Iterable[SessionSummary], session_id: str) -> TreeNode:
    """Return the tree of ``session_id`` and its descendants (through ``parent_session_id``).

    A session that logged nothing itself but is named as a parent is part of the tree: its node has
    an empty summary (no events, no times) and the sessions that named it as children. When those
    name the root of their tree too (``root_session_id``), the node sits under that root: the
    sessions between, if more than one level never logged, are not known and not shown.

    Raises:
        SessionNotFound: ``session_id`` is neither among the summaries nor anyone's parent.
    """
    by_id: dict[str, SessionSummary] = {}
    children: dict[str, list[SessionSummary]] = {}
    for summary in summaries:
        by_id[summary.session_id] = summary
        if summary.parent_session_id:
            children.setdefault(summary.parent_session_id, []).append(summary)
    # Sessions known only as parents, each placed under the root its subagents name (which may
    # itself be known only so).
    unknown = [parent for parent in children if parent not in by_id]
    while unknown:
        parent = unknown.pop()
        roots = (
            item.root_session_id
            for item in children[parent]
            if item.root_session_id not in (None, parent, item.session_id)
        )
        by_id[parent] = _no_events(parent, next(roots, None))
        above = by_id[parent].parent_session_id
        if above is not None:
            if above not in by_id and above not in children:
                unknown.append(above)
            children.setdefault(above, []).append(by_id[parent])
    top = by_id.get(session_id)
    if top is None:
        raise SessionNotFound(f"no session {session_id!r}")
    visited = {session_id}

    def unseen_children(parent: str) -> list[SessionSummary]:
        fresh = [child for child in children.get(parent, []) if child.session_id not in visited]
        visited.update(child.session_id for child in fresh)  # a parent cycle cannot loop forever
        return fresh

    # Iterative and bounded: a chain of subagents may be deeper than Python's recursion limit.
    top_node = TreeNode(top)
    pending = [(top_node, 0)]
    while pending:
        node, depth = pending.pop()
        if depth < MAX_TREE_DEPTH:
            for child in unseen_children(node.session_id):
                node.children.append(TreeNode(child))
                pending.append((node.children[-1], depth + 1))
            continue
        below = unseen_children(node.session_id)
        while below:
            node.hidden += len(below)
            below = [grandchild for child in below for grandchild in unseen_children(child.session_id)]
    return top_node


TreeUsage = tuple[tuple[int, int, int, int], float]
"""Tokens by kind and cost of a session with every session below it."""


def tree_usage(summaries: Iterable[SessionSummary]) -> dict[str, TreeUsage]:
    """Return each session's usage rolled up over its subagents (every session below it).

    Each session's own usage is added to it and to each ancestor its ``parent_session_id`` chain
    names, at most :data:`MAX_TREE_DEPTH` levels up (a parent cycle is walked once). Ancestors known
    only as parents get an entry too.
    """
    parents: dict[str, str] = {}
    own: list[SessionSummary] = []
    for summary in summaries:
        own.append(summary)
        if summary.parent_session_id:
            parents[summary.session_id] = summary.parent_session_id
    totals: dict[str, list[float]] = {}
    for summary in own:
        counts = (*summary.tokens, summary.cost_usd)
        node: str | None = summary.session_id
        seen: set[str] = set()
        while node is not None and node not in seen and len(seen) <= MAX_TREE_DEPTH:
            seen.add(node)
            total = totals.setdefault(node, [0, 0, 0, 0, 0.0])
            for index, count in enumerate(counts):
                total[index] += count
            node = parents.get(node)
    return {session_id: ((int(t[0]), int(t[1]), int(t[2]), int(t[3])), float(t[4])) for session_id, t in totals.items()}


def _no_events(session_id: str, parent: str | None) -> SessionSummary:
    """The summary of a session known only as a parent (``parent``: where its subagents place it)."""
    return SessionSummary(session_id, parent, "", None, None, 0, 0, 0, 0)


def session_tree(
    root: Path, session_id: str, *, known: Mapping[str, SessionSummary] | None = None, history: bool = False
) -> TreeNode:
    """Return the subagent tree below ``session_id``: each node's summary gives status and duration.

    ``known``, ``history``: as for :func:`list_sessions`.

    Raises:
        SessionNotFound: nothing stored for the session.
    """
    if not is_safe_session_id(session_id):
        raise SessionNotFound(f"{session_id!r} is not a valid session id")
    require_root(root)
    return build_tree(list_sessions(root, known=known, history=history), session_id)
