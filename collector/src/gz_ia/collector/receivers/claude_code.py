"""``POST /hooks/claude-code``: a Claude Code hook payload, mapped and staged in the collector.

The answer is always ``200 {}`` (Claude Code reads an empty object as "go on"), whatever became of
the payload: a hook must never block or fail the agent. It is sent once the events are staged
through the intake for the next write pass (:data:`~gz_ia.collector.service.replies.ANSWER_NOW`),
before they are written: a collector killed in between loses them (see
docs/reliability.md, "Hooks over HTTP").

The mapping's state (the open tool calls, prompt and session cycles) is held here, per Claude Code
session and root, in a bounded :class:`~gz_ia.collector.integrations.claude_code.state.SessionStates`;
a session's state goes at its ``SessionEnd``. It survives nothing: what a collector restart in the
middle of a session costs is in docs/reliability.md ("Hooks over HTTP").

The route is one producer (a random id drawn at start, events numbered from 1 across every
session): a new process never reuses an id, so nothing it sends is taken for a duplicate.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from gz_ia.collector.http import Request, Response, Route
from gz_ia.collector.ingest.validation import checked_batch
from gz_ia.collector.integrations.claude_code.log_events import log_event
from gz_ia.collector.integrations.claude_code.mapping import check_payload, hook_events
from gz_ia.collector.integrations.claude_code.state import SessionStates
from gz_ia.collector.service.replies import ANSWER_NOW
from gz_ia.collector.service.request_roots import default_root, request_root
from gz_ia.collector.storage.root_lock import RootLocked
from gz_ia.collector.storage.roots import LayoutError

if TYPE_CHECKING:
    from gz_ia.client.schema import LogEvent
    from gz_ia.collector.metrics import Metrics
    from gz_ia.collector.service.intake import Intake
    from gz_ia.collector.storage.sessions import RootStore

__all__ = ["CLAUDE_CODE_PATH", "DISABLED_HEADER", "MAX_PAYLOAD", "ROOT_HEADER", "ClaudeCodeHooks", "hook_routes"]

log = logging.getLogger("gz_ia.collector")

CLAUDE_CODE_PATH: Final = "/hooks/claude-code"
ROOT_HEADER: Final = "x-gz-ia-root"
"""The hook's ``$GZ_IA_ROOT`` (Claude Code interpolates it into the header; empty when unset)."""
DISABLED_HEADER: Final = "x-gz-ia-disabled"
"""The hook's ``$GZ_IA_DISABLED``: as for every agent, ``1`` logs nothing."""
MAX_PAYLOAD: Final = 16 << 20
"""The largest payload read: Claude Code's carry a tool's input and response (a PostToolBatch, a
whole turn's, a file read included). Beyond it the answer is 413, which Claude Code goes on after."""
_DISABLED_VALUES: Final = frozenset({"1", "true", "yes", "on"})
_LOG_INTERVAL: Final = 60.0
_ROOTS_KEPT: Final = 256
"""Roots whose store is kept open between payloads (a client's connection keeps its one)."""


class ClaudeCodeHooks:
    """The route's handler and the state of the sessions it has seen.

    Args:
        intake: where each payload's events are staged (answered at once: :data:`ANSWER_NOW`).
        metrics: where payloads are counted by outcome.
    """

    def __init__(self, intake: Intake, metrics: Metrics) -> None:
        self.intake = intake
        self.metrics = metrics
        self.sessions = SessionStates()
        self.producer = os.urandom(16).hex()
        self.next = 1
        """The number of the next event staged."""
        self._roots: dict[str, RootStore] = {}
        self._logged_at: dict[str, float] = {}

    async def handle(self, request: Request) -> Response:
        """Map and stage one payload; always ``200 {}``."""
        metrics = self.metrics
        try:
            outcome = self._take(request)
        except Exception as exc:  # a bad payload or a bug: never Claude Code's problem
            outcome = "invalid"
            self._log_once("invalid", "a Claude Code hook payload was ignored: %s: %s", type(exc).__name__, exc)
        metrics.http_hook_payloads.labels(outcome).inc()
        return Response(200, b"{}")

    def _take(self, request: Request) -> str:
        if request.headers.get(DISABLED_HEADER, "").strip().lower() in _DISABLED_VALUES:
            return "disabled"
        payload = check_payload(msgspec.json.decode(request.body))
        cwd = payload.get("cwd")
        where = request_root(
            request.headers.get(ROOT_HEADER, ""), cwd if isinstance(cwd, str) else None, request.peer_uid, default_root
        )
        if where.refused is not None:
            self._log_once("named root", "Claude Code hook events written under %s: %s", where.path, where.refused)
        root = where.path
        key = f"{root}\0{payload['session_id']}"
        state = self.sessions.get(key)
        fields = hook_events(payload, state, time.time_ns())
        if payload["hook_event_name"] in ("SessionEnd", "StopFailure") and state.is_empty():
            self.sessions.forget(key)
        if not fields:
            return "nothing"
        events = [log_event(each) for each in fields]
        first = self.next
        self.next += len(events)
        return self._stage(root, request.peer_uid, first, events, len(request.body))

    def _stage(self, root: str, uid: int, first: int, events: list[LogEvent], size: int) -> str:
        """Stage the events through the intake, checked as a client's are, and answered at once;
        they count the payload's ``size`` against the staging bound, as a client's frame does."""
        store = self._roots.get(root)
        if store is None or store.removed:
            try:
                store = self.intake.open_root(Path(root), uid)
            except (RootLocked, LayoutError, OSError) as exc:
                self._log_once("root", "Claude Code hook events for root %s not logged: %s", root, exc)
                return "refused"
            if len(self._roots) >= _ROOTS_KEPT:
                self._roots.clear()
            self._roots[root] = store
        batch = checked_batch(first, [msgspec.structs.asdict(event) for event in events])
        if not self.intake.stage(store, self.producer, batch, ANSWER_NOW, size):
            self._roots.pop(root, None)  # removed meanwhile: the next payload opens it afresh
            return "refused"
        return "staged"

    def _log_once(self, kind: str, message: str, *args: object) -> None:
        """Log a problem at most once a minute per kind: a hook fires many times a second."""
        now = time.monotonic()
        if now - self._logged_at.get(kind, -_LOG_INTERVAL) >= _LOG_INTERVAL:
            self._logged_at[kind] = now
            log.warning(message, *args)


def hook_routes(intake: Intake, metrics: Metrics) -> list[Route]:
    """The routes of Claude Code's http hooks."""
    hooks = ClaudeCodeHooks(intake, metrics)
    return [Route("POST", CLAUDE_CODE_PATH, hooks.handle, max_body=MAX_PAYLOAD, endpoint="hooks")]
