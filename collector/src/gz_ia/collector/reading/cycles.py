"""The one model of a session: its action cycles, its status, and its usage, per cycle, per session
and rolled up over its subagents.

:func:`load_tree` rebuilds a session and, optionally, its subagents (the reader's session tree) from
the stored files. Each action cycle becomes an :class:`ActionSpan` with its stages as segments:
READ until PENDING, PENDING until FINISH, and the FINISH status, and the usage its events record
(tokens by kind, cost, model). Usage is counted by :class:`gz_ia.client.usage.UsageSum`, the rule the
collector's own tally counts it by, so a session's totals here are those of ``gz-ia sessions``.
Every window reads this fold: ``gz-ia session view``, ``session why``/``diff`` and ``sessions
--hung`` (:mod:`..views.answers`), the MCP summary tool, and the page's API.

A :class:`TimelineBuilder` with ``max_cycles`` keeps only the newest cycles as spans and folds the
older ones into per-action totals (:class:`LeftOut`): what it holds is bounded whatever the number
of events it is fed, so that a page of a million-event session costs what a page of a small one does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from gz_ia.client.schema import Stage, Status, StoredEvent
from gz_ia.client.usage import UsageSum, Used

from .pages import iter_events
from .segments import SessionNotFound
from .sessions import session_tree

__all__ = [
    "ActionSpan",
    "ActionTotals",
    "LeftOut",
    "SessionNode",
    "TimelineBuilder",
    "build_session",
    "cycle_key",
    "fold_event",
    "load_tree",
    "settle_usage",
    "start_span",
]

MAX_OPEN_TRACKED: Final = 10_000
"""Open cycles a bounded builder follows at once; past it the oldest open one is no longer followed
(it counts as open; a later event of it starts a new cycle)."""
MAX_ACTION_NAMES: Final = 1_000
"""Action names the left-out totals keep apart; the cycles of any further name are added up together."""
_LONG_AGO: Final = datetime.min.replace(tzinfo=UTC)
MAX_FAILURES_LISTED: Final = 50
"""FAILED cycles left out of the drawing that are still listed one by one (the newest)."""


def cycle_key(event: StoredEvent) -> str:
    """Which cycle an event belongs to in its session, as the stage protocol keys it: its action, and
    the ``cycle`` it names (runs of one action that name their cycle are separate cycles). A cycle
    starts at the first event of a key with no open cycle and ends at its FINISH: the rule of this
    fold and of the OTel export's (:mod:`gz_ia.collector.otel.spans`), which persists the key."""
    return event.action if event.cycle is None else f"{event.action}\0{event.cycle}"


@dataclass(slots=True)
class ActionSpan:
    """One READ → PENDING → FINISH cycle of one action (still open if ``status`` is None)."""

    action: str
    role: str | None
    start: datetime
    end: datetime
    read_at: datetime | None = None
    pending_at: datetime | None = None
    finished_at: datetime | None = None
    status: Status | None = None
    error: str | None = None
    duration_ms: int | None = None
    first_seq: int = 0
    last_seq: int = 0
    events: int = 0
    drawn: bool = True
    cycle: str | None = None
    """The ``cycle`` its events name (a tool call's id), None when they name none."""
    tool: str | None = None
    """The tool its events' attrs name (``tool``), when one does: what tells two calls of one action apart."""
    token_kinds: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    """Tokens by kind (:data:`gz_ia.client.usage.TOKEN_KINDS`) of the usage records among its events
    that count: every record but a hook's reading, and the hook's readings once :func:`settle_usage`
    found that they count (their session has no other usage record)."""
    cost_usd: float = 0.0
    model: str = ""
    """The model its last usage record names ("" when none does)."""
    usage_at: datetime | None = None
    """When its last usage record was stamped (None: it has none)."""
    recorded: bool = False
    """A usage record that is not a hook's reading is among its events."""
    hook_kinds: list[int] | None = None
    """Tokens by kind of the hooks' readings among its events (:data:`gz_ia.client.usage.HOOK_READING`),
    held apart until :func:`settle_usage` (None: none, or settled)."""
    hook_cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        """Tokens (every kind) of its usage that counts."""
        return sum(self.token_kinds)

    @property
    def is_open(self) -> bool:
        """True while no FINISH closed the cycle."""
        return self.status is None

    @property
    def begun(self) -> datetime:
        """When the cycle's first event was stamped (``start`` may be set back by a reported
        duration): the earliest of its first READ, first PENDING and FINISH."""
        stamps = [stamp for stamp in (self.read_at, self.pending_at, self.finished_at) if stamp is not None]
        return min(stamps) if stamps else self.start

    @property
    def elapsed_ms(self) -> int:
        """The reported duration, else the time between the first and last event."""
        if self.duration_ms is not None:
            return self.duration_ms
        return max(0, int((self.end - self.start).total_seconds() * 1000))


@dataclass(slots=True)
class SessionNode:
    """One session: who ran it, its action cycles, its subagent sessions."""

    session_id: str
    parent_session_id: str | None = None
    agent: str = ""
    role: str | None = None
    events: int = 0
    stages: dict[str, int] = field(default_factory=dict)
    actions: list[ActionSpan] = field(default_factory=list)
    children: list[SessionNode] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None
    last_seq: int = 0
    cycles: int = 0
    """Every cycle of the events read, drawn (in ``actions``) or left out."""
    finished_ok: int = 0
    failed: int = 0
    usage: UsageSum = field(default_factory=UsageSum)
    """Its usage records as read; :attr:`tokens` and :attr:`cost_usd` are what counts of them."""
    tokens: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    """Tokens by kind that count (:data:`gz_ia.client.usage.TOKEN_KINDS`), set by the fold's end."""
    cost_usd: float = 0.0
    model: str = ""

    def walk(self, depth: int = 0) -> Iterable[tuple[int, SessionNode]]:
        """Yield ``(depth, node)`` for this node and its descendants, depth first."""
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)


@dataclass(slots=True)
class ActionTotals:
    """What the cycles of one action that are not drawn add up to."""

    cycles: int = 0
    ok: int = 0
    failed: int = 0
    finished_ms: int = 0
    first: datetime | None = None
    last: datetime | None = None

    @property
    def still_open(self) -> int:
        """Cycles with no FINISH yet."""
        return self.cycles - self.ok - self.failed


@dataclass(slots=True)
class LeftOut:
    """The cycles a bounded builder did not keep as spans: counted, and totalled per action."""

    cycles: int = 0
    events: int = 0
    failed: int = 0
    actions: dict[str, ActionTotals] = field(default_factory=dict)
    other: ActionTotals = field(default_factory=ActionTotals)
    """The cycles of the action names past :data:`MAX_ACTION_NAMES`, together."""
    failures: deque[tuple[SessionNode, ActionSpan]] = field(default_factory=lambda: deque(maxlen=MAX_FAILURES_LISTED))
    """The newest FAILED cycles left out, with their session."""

    def totals(self, action: str) -> ActionTotals:
        """The totals of ``action`` (those of every other action once the table is full)."""
        found = self.actions.get(action)
        if found is None:
            if len(self.actions) >= MAX_ACTION_NAMES:
                return self.other
            found = self.actions[action] = ActionTotals()
        return found


def start_span(event: StoredEvent) -> ActionSpan:
    """The cycle ``event`` starts: its session has no cycle of the event's key open (:func:`cycle_key`)."""
    stamp = event.timestamp
    return ActionSpan(event.action, event.role, start=stamp, end=stamp, first_seq=event.seq, cycle=event.cycle)


def fold_event(span: ActionSpan, event: StoredEvent, found: tuple[Used, bool] | None) -> bool:
    """Fold one event of ``span``'s cycle into it: its times, its stages, the tool it names, its usage
    record (``found``, as :meth:`gz_ia.client.usage.UsageSum.add` read it) and, at FINISH, its outcome.
    Returns True when the event closes the cycle.

    Every window's cycles are made by this function (the readers' :class:`TimelineBuilder`, the OTel
    export's spans), so a cycle starts, ends, lasts and costs the same wherever it is shown.
    """
    stamp = event.timestamp
    span.events += 1
    attrs = event.attrs
    if attrs is not None:
        if span.tool is None:
            tool = attrs.get("tool")
            if isinstance(tool, str):
                span.tool = tool
        if found is not None:
            (counts, cost, model), from_hook = found
            if from_hook:
                kinds = span.hook_kinds
                if kinds is None:
                    kinds = span.hook_kinds = [0, 0, 0, 0]
                span.hook_cost_usd += cost
            else:
                kinds = span.token_kinds
                span.cost_usd += cost
                span.recorded = True
            for index, count in enumerate(counts):
                kinds[index] += count
            span.model = model or span.model
            span.usage_at = stamp
    if stamp > span.end:  # noqa: PLR1730 - a call per event: a plain comparison rather than max()
        span.end = stamp
    span.last_seq = event.seq
    stage = event.stage
    if stage is Stage.READ:
        if span.read_at is None:
            span.read_at = stamp
    elif stage is Stage.PENDING:
        if span.pending_at is None:
            span.pending_at = stamp
    else:
        span.finished_at = stamp
        span.status = event.status
        span.error = event.error
        span.duration_ms = duration = event.duration_ms
        if duration is not None:
            # The reported duration is measured by the agent; make the bar at least that long.
            begun = stamp - timedelta(milliseconds=duration)
            if begun < span.start:  # noqa: PLR1730
                span.start = begun
        return True
    if event.status is Status.FAILED:
        span.error = event.error
    return False


def settle_usage(span: ActionSpan, *, hooks_count: bool) -> bool:
    """Add the cycle's hook readings to its usage where they are what counts (``hooks_count``: its
    session has no other usage record, :attr:`gz_ia.client.usage.UsageSum.from_hooks`), else drop
    them: they read again what another record counts. Returns whether the cycle has usage that counts.
    """
    hook = span.hook_kinds
    if hook is not None:
        span.hook_kinds = None
        if hooks_count:
            kinds = span.token_kinds
            for index, count in enumerate(hook):
                kinds[index] += count
            span.cost_usd += span.hook_cost_usd
            span.recorded = True
        span.hook_cost_usd = 0.0
    return span.recorded


class TimelineBuilder:
    """Fold the events of a session tree, each session's in ``seq`` order, into its :class:`SessionNode` s.

    With ``max_cycles`` only the newest ``max_cycles`` cycles of the whole tree stay spans (in their
    sessions' ``actions``); the others are counted in :attr:`left_out`. None keeps every cycle.
    """

    def __init__(self, top: SessionNode, *, max_cycles: int | None = None) -> None:
        self.top = top
        self.nodes = {current.session_id: current for _, current in top.walk()}
        self.max_cycles = max_cycles
        self.left_out = LeftOut()
        # Keyed like the stage protocol: runs of one action that name their cycle are separate spans.
        self._open: dict[tuple[str, str], ActionSpan] = {}
        self._drawn: deque[tuple[SessionNode, ActionSpan]] = deque()
        self._stages: dict[str, list[int]] = {}
        """Per session, its READ, PENDING and FINISH events (names looked up once, at the end)."""

    def add(self, event: StoredEvent) -> None:
        """Fold one event into its session's node (a session not in the tree gets a node of its own)."""
        # Runs once per event of the session: plain comparisons rather than min()/max() calls.
        session_id = event.session_id
        node = self.nodes.get(session_id)
        if node is None:
            node = self.nodes[session_id] = SessionNode(session_id)
        node.events += 1
        found = None if event.attrs is None else node.usage.add(event.attrs)
        seq = event.seq
        if seq > node.last_seq:  # noqa: PLR1730 - a call per event (see above)
            node.last_seq = seq
        stage = event.stage
        stamp = event.timestamp
        if node.events == 1:
            node.parent_session_id = event.parent_session_id
            node.agent = event.agent
            node.role = event.role
            node.first = node.last = stamp
            self._stages[session_id] = [0, 0, 0]
        else:
            if stamp < node.first:  # type: ignore[operator]  # noqa: PLR1730
                node.first = stamp
            if stamp > node.last:  # type: ignore[operator]  # noqa: PLR1730
                node.last = stamp
        key = (session_id, cycle_key(event))
        span = self._open.get(key)
        if span is None:
            span = start_span(event)
            self._new_span(node, span)
            if stage is not Stage.FINISH:
                self._follow(key, span)
        stages = self._stages[session_id]
        stages[0 if stage is Stage.READ else 1 if stage is Stage.PENDING else 2] += 1
        if fold_event(span, event, found):
            self._open.pop(key, None)
            if span.status is Status.FAILED:
                node.failed += 1
            else:
                node.finished_ok += 1
            if not span.drawn:
                self._finished_left_out(node, span)

    def resume(self, session_id: str, key: str) -> ActionSpan:
        """Follow a cycle of ``session_id`` that began before the events this builder is given (keyed
        as :func:`cycle_key`): its events join it, and it is neither counted nor drawn (it has no
        action here: only what those events add, its usage, is read off it)."""
        span = ActionSpan("", None, start=_LONG_AGO, end=_LONG_AGO)
        self._open[session_id, key] = span
        return span

    def _new_span(self, node: SessionNode, span: ActionSpan) -> None:
        node.cycles += 1
        if self.max_cycles is None:
            node.actions.append(span)
            return
        drawn = self._drawn
        drawn.append((node, span))
        if len(drawn) > self.max_cycles:
            old_node, old = drawn.popleft()
            old.drawn = False
            totals = self.left_out.totals(old.action)
            totals.cycles += 1
            totals.first = old.start if totals.first is None else min(totals.first, old.start)
            totals.last = old.end if totals.last is None else max(totals.last, old.end)
            if not old.is_open:
                self._finished_left_out(old_node, old)

    def _finished_left_out(self, node: SessionNode, span: ActionSpan) -> None:
        """Add a finished cycle that is not drawn to its action's totals."""
        totals = self.left_out.totals(span.action)
        totals.last = span.end if totals.last is None else max(totals.last, span.end)
        totals.finished_ms += span.elapsed_ms
        if span.status is Status.FAILED:
            totals.failed += 1
            self.left_out.failures.append((node, span))
        else:
            totals.ok += 1

    def _follow(self, key: tuple[str, str], span: ActionSpan) -> None:
        self._open[key] = span
        if self.max_cycles is not None and len(self._open) > MAX_OPEN_TRACKED:
            del self._open[next(iter(self._open))]

    def finish(self) -> SessionNode:
        """Hand each session its drawn spans (oldest first) and its usage that counts; return the top node."""
        for session_id, counts in self._stages.items():
            stages = self.nodes[session_id].stages
            for stage, number in zip((Stage.READ, Stage.PENDING, Stage.FINISH), counts, strict=True):
                if number:
                    stages[stage.value] = stages.get(stage.value, 0) + number
        if self.max_cycles is not None:
            for node in self.nodes.values():
                node.actions = []
            for node, span in self._drawn:
                node.actions.append(span)
            left = self.left_out
            everything = list(self.nodes.values())
            left.cycles = sum(node.cycles for node in everything) - len(self._drawn)
            left.events = sum(node.events for node in everything) - sum(span.events for _, span in self._drawn)
            drawn_failed = sum(1 for _, span in self._drawn if span.status is Status.FAILED)
            left.failed = sum(node.failed for node in everything) - drawn_failed
        for node in self.nodes.values():
            tokens, node.cost_usd = node.usage.counted()
            node.tokens = list(tokens)
            node.model = node.usage.model
            hooks_count = node.usage.from_hooks
            for span in node.actions:
                settle_usage(span, hooks_count=hooks_count)
        return self.top


def build_session(session_id: str, events: Iterable[StoredEvent]) -> SessionNode:
    """Fold a session's events (in ``seq`` order) into a :class:`SessionNode` without children."""
    builder = TimelineBuilder(SessionNode(session_id))
    for event in events:
        builder.add(event)
    return builder.finish()


def _load_one(root: Path, session_id: str) -> SessionNode:
    return build_session(session_id, (entry.event for entry in iter_events(root, session_id)))


def load_tree(root: Path, session_id: str, *, tree: bool = True) -> SessionNode:
    """Load ``session_id`` and, with ``tree``, every subagent session below it.

    The tree is the reader's (:func:`.sessions.session_tree`), the one
    ``gz-ia session tree`` and ``--tree`` show: a session known only as a parent is its top.

    Raises:
        SessionNotFound: the session has no file under ``root`` (and, with ``tree``, is nobody's parent).
    """
    if not tree:
        return _load_one(root, session_id)
    top = session_tree(root, session_id)

    def load(item: Any) -> SessionNode:  # as deep as the reader's tree: at most MAX_TREE_DEPTH
        try:
            node = _load_one(root, item.session_id)
        except SessionNotFound:
            node = build_session(item.session_id, ())  # known only as a parent
        node.children = [load(child) for child in item.children]
        return node

    return load(top)
