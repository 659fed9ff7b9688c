"""``gz-ia hook claude-code``: Claude Code's hook payloads as gz-ia stage events.

Claude Code runs the hook command once per hook event, with one JSON object on stdin. Each call
logs the matching stage events (the table is in docs/user-guide.md, "Claude Code"):

- a tool call is one cycle, keyed by its call id: READ (reading tools) or PENDING (tools that change things) at
  ``PreToolUse``, FINISH OK at ``PostToolUse``, FINISH FAILED with the error at
  ``PostToolUseFailure``, with the duration measured from the PreToolUse;
- a prompt is the cycle ``prompt``, from ``UserPromptSubmit`` to ``Stop``; the session is the cycle
  ``session``, from ``SessionStart`` to ``SessionEnd``;
- a subagent (``agent_id`` in the payload) is a child session, ``<session_id>.<agent_id>``, whose
  parent is the Claude Code session: the cycle ``subagent`` from ``SubagentStart`` to
  ``SubagentStop``, and its own tool calls.

Tool input is summarised, never copied: the tool's name and call id, the command's first line, a
file path, a pattern or a URL, each cut to :data:`SUMMARY_CHARS`.

The hook must never get in Claude Code's way: :func:`run_hook` always returns 0 and prints nothing
on stdout. With ``GZ_IA_DISABLED=1`` it logs nothing. A payload it cannot use is counted
(``<spool dir>/ledgers/claude-code.invalid``: the count and the last error) and named in one line on
stderr; events no collector answered are spooled (:mod:`..oneshot.ledger`). The start times of open tool
calls live in the Claude Code session's ledger.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

from gz_ia.client import env
from gz_ia.client.limits import MAX_CYCLE_LENGTH, MAX_SESSION_ID_LENGTH
from gz_ia.collector.oneshot import _plain_json
from gz_ia.collector.oneshot.ledger import (
    Ledger,
    Outcome,
    ledger_directory,
    plain_event,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["AGENT", "READING_TOOLS", "SUMMARY_CHARS", "run_hook", "session_ids"]

AGENT: Final = "claude-code"
"""The ``agent`` of every event the hook logs."""
READING_TOOLS: Final = frozenset(
    {"Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch", "NotebookRead", "TodoRead", "ListMcpResourcesTool"}
)
"""Tools whose calls open their cycle with READ; every other tool (Edit, Write, Bash, MCP tools, …)
opens it with PENDING."""
SUMMARY_CHARS: Final = 200
"""Bound on each summarised tool input (a command's first line, a path, a pattern)."""
_SUMMARISED: Final = {
    "command": "command",
    "file_path": "file_path",
    "notebook_path": "file_path",
    "path": "path",
    "pattern": "pattern",
    "url": "url",
    "query": "query",
    "subagent_type": "subagent_type",
    "description": "description",
}
"""Tool input keys kept in ``attrs`` (first line, cut), and the attribute each becomes."""
_OPEN_KEPT: Final = 512
"""Open tool calls remembered per Claude Code session; past it the oldest are forgotten."""
_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_TIMEOUT: Final = 2.0


def session_ids(payload: dict[str, Any]) -> tuple[str, str | None]:
    """The gz-ia session of a payload and its parent: the Claude Code session, or inside a subagent
    the child session ``<session_id>.<agent_id>`` with the Claude Code session as its parent."""
    main = _safe_id(str(payload["session_id"]))
    agent_id = payload.get("agent_id")
    if not agent_id:
        return main, None
    return _safe_id(f"{main}.{agent_id}"), main


def _safe_id(raw: str) -> str:
    cleaned = "".join(char if char in _SAFE else "-" for char in raw).lstrip(".") or "-"
    return cleaned[:MAX_SESSION_ID_LENGTH]


def _line(value: object) -> str:
    text = str(value).strip().splitlines()[0] if str(value).strip() else ""
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def tool_attrs(payload: dict[str, Any]) -> dict[str, str | int | float | bool]:
    """The documented summary of a tool call: its name and id, and a few short input fields."""
    attrs: dict[str, str | int | float | bool] = {"tool": _line(payload.get("tool_name", "?"))}
    if payload.get("tool_use_id"):
        attrs["tool_use_id"] = _line(payload["tool_use_id"])
    tool_input = payload.get("tool_input")
    if isinstance(tool_input, dict):
        for key, name in _SUMMARISED.items():
            value = tool_input.get(key)
            if isinstance(value, str | int | float) and not isinstance(value, bool) and name not in attrs:
                attrs[name] = _line(value)
    return attrs


def _tool_cycle(payload: dict[str, Any]) -> tuple[str, str]:
    """The action of a tool call (the tool's name) and its cycle id (the call id, its last characters
    that fit): parallel calls of one tool (two Reads at once) are separate cycles, each with its own
    outcome."""
    return _line(payload.get("tool_name", "?")), _line(payload["tool_use_id"])[-MAX_CYCLE_LENGTH:]


class _Hook:
    """The events of one payload, built against the Claude Code session's ledger data."""

    def __init__(self, payload: dict[str, Any], data: dict[str, Any]) -> None:
        self.payload = payload
        self.data = data
        self.session_id, self.parent = session_ids(payload)
        self.role: str | None = str(payload["agent_type"]) if payload.get("agent_type") else None
        self.now = time.time_ns()
        self.events: list[dict[str, object]] = []

    def event(self, action: str, stage: str, **fields: Any) -> None:
        self.events.append(
            plain_event(
                timestamp_ns=self.now,
                session_id=fields.pop("session_id", self.session_id),
                parent_session_id=fields.pop("parent_session_id", self.parent),
                action=action,
                stage=stage,
                agent=AGENT,
                role=fields.pop("role", self.role),
                status=fields.pop("status", "OK"),
                **fields,
            )
        )

    def open(self, key: str, action: str, stage: str, **fields: Any) -> None:
        """Start a cycle and remember when, to give its FINISH a duration."""
        opened: dict[str, list[Any]] = self.data.setdefault("open", {})
        if key in opened:  # the same call announced twice: one cycle
            return
        while len(opened) >= _OPEN_KEPT:
            del opened[next(iter(opened))]
        opened[key] = [action, time.time_ns(), fields.get("session_id", self.session_id), fields.get("cycle")]
        self.event(action, stage, **fields)

    def finish(self, key: str, status: str = "OK", **fields: Any) -> bool:
        """FINISH the cycle opened under ``key``; False (nothing logged) if it is not open."""
        entry = self.data.get("open", {}).pop(key, None)
        if entry is None:
            return False
        action, started, session_id = entry[:3]
        if len(entry) > 3 and entry[3]:
            fields["cycle"] = entry[3]
        duration = max(0, (time.time_ns() - int(started)) // 1_000_000)
        self.event(action, "FINISH", status=status, duration_ms=duration, session_id=session_id, **fields)
        return True

    def handle(self) -> None:
        payload = self.payload
        name = payload.get("hook_event_name")
        agent_key = f"subagent\0{self.session_id}"
        prompt_key = f"prompt\0{self.session_id}"
        match name:
            case "PreToolUse":
                stage = "READ" if payload.get("tool_name") in READING_TOOLS else "PENDING"
                action, cycle = _tool_cycle(payload)
                self.open(f"tool\0{payload['tool_use_id']}", action, stage, attrs=tool_attrs(payload), cycle=cycle)
            case "PostToolUse":
                if not self.finish(f"tool\0{payload['tool_use_id']}"):
                    # The PreToolUse was not seen (the hook was installed mid-call): a cycle of its own.
                    action, cycle = _tool_cycle(payload)
                    self.event(action, "PENDING", attrs=tool_attrs(payload), cycle=cycle)
                    self.event(action, "FINISH", cycle=cycle)
            case "PostToolUseFailure":
                error = str(payload.get("error") or "the tool call failed")  # cut and marked by plain_event
                if not self.finish(f"tool\0{payload['tool_use_id']}", "FAILED", error=error):
                    action, cycle = _tool_cycle(payload)
                    self.event(action, "PENDING", attrs=tool_attrs(payload), cycle=cycle)
                    self.event(action, "FINISH", status="FAILED", error=error, cycle=cycle)
            case "SessionStart":
                source = {"source": _line(payload.get("source", "startup"))}
                self.open(f"session\0{self.session_id}", "session", "READ", attrs=source)
            case "SessionEnd":
                self.finish(prompt_key, attrs={"ended_by": "session end"})
                self.finish(f"session\0{self.session_id}", attrs={"reason": _line(payload.get("reason", "other"))})
            case "UserPromptSubmit":
                self.finish(prompt_key, attrs={"ended_by": "next prompt"})  # Stop does not follow an interrupt
                prompt = payload.get("prompt")
                size = {"prompt_chars": len(prompt)} if isinstance(prompt, str) else None
                self.open(prompt_key, "prompt", "READ", attrs=size)
            case "Stop":
                self.finish(prompt_key)
            case "SubagentStart":
                self.open(agent_key, "subagent", "READ")
            case "SubagentStop":
                if not self.finish(agent_key):
                    self.event("subagent", "READ")
                    self.event("subagent", "FINISH")
            case "PreCompact":
                trigger = {"trigger": _line(payload.get("trigger", "auto"))}
                self.event("compact", "READ", attrs=trigger)
                self.event("compact", "FINISH", attrs=trigger)
            case _:  # Notification, PermissionRequest and future events: nothing to log
                return


def run_hook(raw: bytes, *, socket_path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> int:
    """Log the events of one hook payload; always 0, never a word on stdout.

    Args:
        raw: the payload, as read from stdin.
        socket_path: the collector socket.
        root: the session root; None finds it from the payload's ``cwd`` (as ``gz-ia`` finds a root).
    """
    if env.tracing_disabled():  # GZ_IA_DISABLED=1: as for every agent, nothing is logged
        return 0
    spool_dir = env.locate_spool()
    try:
        payload = _plain_json.loads(raw)
        if not isinstance(payload, dict) or not payload.get("session_id") or not payload.get("hook_event_name"):
            raise ValueError("not a Claude Code hook payload (session_id and hook_event_name are required)")
        if payload["hook_event_name"] in ("PreToolUse", "PostToolUse", "PostToolUseFailure") and not payload.get(
            "tool_use_id"
        ):
            raise ValueError(f"{payload['hook_event_name']} without tool_use_id")
        root = _root_of(payload) if root is None else os.fspath(root)
        with Ledger(
            f"claude-code\0{root}\0{payload['session_id']}", spool_dir=spool_dir, socket_path=socket_path, root=root
        ) as ledger:
            hook = _Hook(payload, ledger.data)
            hook.handle()
            if not hook.events:
                return 0
            delivery = ledger.deliver(hook.events, timeout=_TIMEOUT)
            if payload["hook_event_name"] == "SessionEnd" and not ledger.data.get("open"):
                ledger.remove()
        if delivery.outcome == Outcome.ACCEPTED:
            for reason, detail in delivery.rejected.values():
                _complain(f"event rejected ({reason}): {detail}")
        elif delivery.outcome != Outcome.SPOOLED:
            _complain(f"events not delivered ({delivery.outcome}): {delivery.detail}")
    except Exception as exc:
        _count_invalid(spool_dir, exc)
        _complain(f"payload ignored: {type(exc).__name__}: {exc}")
    return 0


def _root_of(payload: dict[str, Any]) -> str:
    cwd = payload.get("cwd")
    if os.environ.get("GZ_IA_ROOT") or not isinstance(cwd, str) or not os.path.isabs(cwd):
        return env.locate_root()
    return env.locate_root(cwd)


def _complain(message: str) -> None:
    try:
        print(f"gz-ia hook claude-code: {message}"[:1000], file=sys.stderr)
    except (OSError, ValueError):
        pass


def _count_invalid(spool_dir: str, exc: BaseException) -> None:
    """Count a payload the hook could not use: ``<spool dir>/ledgers/claude-code.invalid`` holds
    the count and the last error, on one line."""
    import contextlib  # only for a payload that failed

    with contextlib.suppress(OSError, ValueError):
        directory = ledger_directory(spool_dir)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(f"{directory}/claude-code.invalid", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            count = int(os.pread(fd, 32, 0).split(b" ", 1)[0] or b"0")
            line = f"{count + 1} {type(exc).__name__}: {str(exc)[:300]!r}\n".encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)
        finally:
            os.close(fd)
