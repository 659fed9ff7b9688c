"""Claude Code's hook payloads as gz-ia stage events: one pure function, :func:`hook_events`.

It takes one payload, the Claude Code session's :class:`.state.HookState` (changed in place) and the
time, and returns the events to log, each as the keyword arguments of
``gz_ia.collector.oneshot.ledger.plain_event`` (its time as ``timestamp_ns``). Where the state lives
and how the events travel is the caller's business: the command hook (:mod:`.command_hook`) keeps
the state in a file and sends the events over the collector's socket; a receiver inside the
collector keeps it in memory. The table of what each hook event becomes is in docs/user-guide.md
("Claude Code"); the rules the table cannot show:

- A tool call is one cycle, keyed by its ``tool_use_id``, whatever hooks fired for it. Its duration
  is the tool's own ``duration_ms`` as Claude Code measured it (the hooks' cost is not in it), and its
  FINISH is stamped at its opening's time plus that duration, so the stored times agree with it.
- PostToolBatch lists every call of an assistant turn, including those no other hook saw: a call
  that opened and never finished was refused (its FINISH FAILED carries Claude Code's answer); a
  call never seen at all was never run (a tool this build does not offer): it opens and FINISHes
  FAILED at once, with the ``tool_use_error``.
- StopFailure FINISHes the prompt FAILED with the API's error. SessionEnd does not wait for it: a
  turn SessionEnd finds open whose transcript ends on an API error is FINISHed FAILED with that error
  (the one place a transcript is read), and the late StopFailure adds nothing; any other late
  StopFailure logs its error as an instant cycle ``turn failure``. SessionEnd FINISHes FAILED
  whatever is still open (``attrs.closed_by = "session end"``), then the session: FAILED when its
  last turn failed or something was left open, OK otherwise.
- Tool input is summarised, never copied (:func:`tool_attrs`); every kept field is bounded.
"""

from __future__ import annotations

from gz_ia.client.limits import MAX_ATTR_STRING_LENGTH, MAX_CYCLE_LENGTH, MAX_SESSION_ID_LENGTH

from .state import HookState, OpenCycle
from .transcript import api_error_ending

TYPE_CHECKING = False  # typing costs the command hook more than the rest of its work
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = [
    "AGENT",
    "READING_TOOLS",
    "SUMMARY_CHARS",
    "TOOL_EVENTS",
    "check_payload",
    "hook_events",
    "session_ids",
    "tool_attrs",
]

AGENT: Final = "claude-code"
"""The ``agent`` of every event."""
READING_TOOLS: Final = frozenset({"Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch", "ReadMcpResourceTool",
                                  "ListMcpResourcesTool"})  # fmt: skip
"""Tools whose calls open their cycle with READ, by the names Claude Code gives them (Grep, Glob and
LS exist only where ``--allowedTools`` offers them); every other tool (Edit, Write, Bash, Agent, MCP
tools, …) opens with PENDING."""
SUMMARY_CHARS: Final = 200
"""Bound on each summarised tool input (a command's first line, a pattern) and each short field."""
TOOL_EVENTS: Final = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
"""The hook events about one tool call (each carries its ``tool_use_id``)."""
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
_PATHS: Final = ("file_path", "path")
_AGENT_TOTALS: Final = {
    "resolvedModel": "resolved_model",
    "totalTokens": "total_tokens",
    "totalToolUseCount": "total_tool_use_count",
    "totalDurationMs": "total_duration_ms",
    "status": "agent_status",
}
"""What the Agent tool's response says of its subagent, and the attribute each becomes."""
_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_CLOSED_AT_END: Final = "session end"


def check_payload(payload: object) -> dict[str, Any]:
    """Return ``payload`` if the mapping can use it.

    Raises:
        ValueError: not an object with ``session_id`` and ``hook_event_name``, or a tool event
            without ``tool_use_id``.
    """
    if not isinstance(payload, dict) or not payload.get("session_id") or not payload.get("hook_event_name"):
        raise ValueError("not a Claude Code hook payload (session_id and hook_event_name are required)")
    if payload["hook_event_name"] in TOOL_EVENTS and not payload.get("tool_use_id"):
        raise ValueError(f"{payload['hook_event_name']} without tool_use_id")
    return payload


def session_ids(payload: dict[str, Any]) -> tuple[str, str | None]:
    """The gz-ia session of a payload and its parent: the Claude Code session, or inside a subagent
    the child session ``<session_id>.<agent_id>`` with the Claude Code session as its parent."""
    main = _safe_id(str(payload["session_id"]))
    agent_id = payload.get("agent_id")
    if not agent_id:
        return main, None
    return child_session_id(main, str(agent_id)), main


def child_session_id(main: str, agent_id: str) -> str:
    """The gz-ia session of the subagent ``agent_id`` of the Claude Code session ``main``."""
    return _safe_id(f"{main}.{agent_id}")


def _safe_id(raw: str) -> str:
    cleaned = "".join(char if char in _SAFE else "-" for char in raw).lstrip(".") or "-"
    return cleaned[:MAX_SESSION_ID_LENGTH]


def _line(value: object) -> str:
    text = str(value).strip().splitlines()[0] if str(value).strip() else ""
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _path(value: object) -> str:
    """A path, its end kept when it is too long (the file's name says most)."""
    text = str(value)
    return text if len(text) <= MAX_ATTR_STRING_LENGTH else "…" + text[-(MAX_ATTR_STRING_LENGTH - 1) :]


def tool_attrs(call: dict[str, Any]) -> dict[str, Any]:
    """The documented summary of a tool call: its name and id, and a few short input fields."""
    attrs: dict[str, Any] = {"tool": _line(call.get("tool_name", "?"))}
    if call.get("tool_use_id"):
        attrs["tool_use_id"] = _line(call["tool_use_id"])
    tool_input = call.get("tool_input")
    if isinstance(tool_input, dict):
        for key, name in _SUMMARISED.items():
            value = tool_input.get(key)
            if isinstance(value, str | int | float) and not isinstance(value, bool) and name not in attrs:
                attrs[name] = _path(value) if name in _PATHS else _line(value)
    return attrs


def _context(payload: dict[str, Any], *names: str) -> dict[str, Any]:
    """The named context fields the payload carries, bounded: ``effort`` is its level."""
    attrs: dict[str, Any] = {}
    for name in names:
        value = payload.get(name)
        if name == "effort" and isinstance(value, dict):
            value = value.get("level")
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            attrs[name] = value
        elif name in ("cwd", "transcript_path", "agent_transcript_path"):
            attrs[name] = _path(value)
        else:
            attrs[name] = _line(value)
    return attrs


def _duration_ms(payload: dict[str, Any]) -> int | None:
    value = payload.get("duration_ms")
    return value if type(value) is int and value >= 0 else None


def _response_text(response: object) -> str:
    """A tool's answer as error text (PostToolBatch gives refused and impossible calls a string)."""
    if isinstance(response, str):
        return response.strip() or "the tool call was not run"
    if isinstance(response, list):  # content blocks
        texts = [str(block.get("text", "")) for block in response if isinstance(block, dict)]
        if any(texts):
            return "\n".join(texts)
    return "the tool call was not run"


class _Mapping:
    """The events of one payload, against the session's state."""

    def __init__(self, payload: dict[str, Any], state: HookState, now_ns: int) -> None:
        self.payload = payload
        self.state = state
        self.now = now_ns
        self.session_id, self.parent = session_ids(payload)
        self.role: str | None = str(payload["agent_type"]) if payload.get("agent_type") else None
        self.events: list[dict[str, Any]] = []

    def event(self, action: str, stage: str, *, at: int | None = None, **fields: Any) -> None:
        fields.setdefault("session_id", self.session_id)
        fields.setdefault("parent_session_id", self.parent)
        fields.setdefault("role", self.role)
        self.events.append(
            {"timestamp_ns": self.now if at is None else at, "action": action, "stage": stage, "agent": AGENT, **fields}
        )

    def open(self, key: str, action: str, stage: str, *, at: int | None = None, **fields: Any) -> None:
        """Start a cycle and remember it, to FINISH it later; a second opening is the same cycle."""
        started = self.now if at is None else at
        entry = OpenCycle(action, started, self.session_id, fields.get("cycle"), self.parent, self.role)
        if self.state.open(key, entry):
            self.event(action, stage, at=started, **fields)

    def finish(self, key: str, *, duration_ms: int | None = None, **fields: Any) -> OpenCycle | None:
        """FINISH the cycle open under ``key`` (None, nothing logged, when none is).

        With ``duration_ms`` (the tool's own time) the FINISH is stamped at the opening plus it;
        otherwise now, with the time since the opening.
        """
        entry = self.state.close(key)
        if entry is None:
            return None
        if duration_ms is None:
            at = max(self.now, entry.started_ns)
            duration_ms = (at - entry.started_ns) // 1_000_000
        else:
            at = min(entry.started_ns + duration_ms * 1_000_000, max(self.now, entry.started_ns))
        if entry.cycle:
            fields["cycle"] = entry.cycle
        self.event(
            entry.action,
            "FINISH",
            at=at,
            duration_ms=duration_ms,
            session_id=entry.session_id,
            parent_session_id=entry.parent,
            role=entry.role,
            **fields,
        )
        return entry

    def whole_call(self, call: dict[str, Any], duration_ms: int | None, **finish: Any) -> None:
        """A tool call whose opening no hook showed: its opening and its FINISH, now."""
        action, cycle = _tool_cycle(call)
        stage = "READ" if call.get("tool_name") in READING_TOOLS else "PENDING"
        started = self.now - (duration_ms or 0) * 1_000_000
        attrs = {**tool_attrs(call), **_context(self.payload, "prompt_id", "permission_mode", "effort")}
        self.event(action, stage, at=started, attrs=attrs, cycle=cycle)
        self.event(action, "FINISH", duration_ms=duration_ms or 0, cycle=cycle, **finish)

    def handle(self) -> list[dict[str, Any]]:
        payload = self.payload
        match payload.get("hook_event_name"):
            case "PreToolUse":
                self.pre_tool_use()
            case "PostToolUse":
                self.post_tool_use()
            case "PostToolUseFailure":
                self.post_tool_use_failure()
            case "PostToolBatch":
                self.post_tool_batch()
            case "SessionStart":
                attrs = {
                    "source": _line(payload.get("source") or "startup"),
                    **_context(payload, "cwd", "transcript_path"),
                }
                self.open(_session_key(self.session_id), "session", "READ", attrs=attrs)
            case "SessionEnd":
                self.session_end()
            case "UserPromptSubmit":
                # Stop does not follow an interrupted turn: the next prompt ends it.
                self.finish(_prompt_key(self.session_id), attrs={"ended_by": "next prompt"})
                prompt = payload.get("prompt")
                attrs = _context(payload, "prompt_id", "permission_mode")
                if isinstance(prompt, str):
                    attrs["prompt_chars"] = len(prompt)
                self.state.failed_turn = None
                self.open(_prompt_key(self.session_id), "prompt", "READ", attrs=attrs)
            case "Stop":
                self.state.failed_turn = None
                self.finish(_prompt_key(self.session_id), attrs=_context(payload, "effort") or None)
            case "StopFailure":
                error = str(payload.get("last_assistant_message") or payload.get("error") or "the turn failed").strip()
                self.state.failed_turn = error
                attrs = _context(payload, "prompt_id") | {"error_type": _line(payload.get("error") or "unknown")}
                if self.finish(_prompt_key(self.session_id), status="FAILED", error=error, attrs=attrs):
                    pass
                elif self.state.ended_on == error:
                    self.state.ended_on = None  # SessionEnd, handled first, closed the turn with this error
                else:
                    # SessionEnd does not wait for StopFailure's hook and may be handled first (it
                    # then closed the turn FAILED without the error): the error is kept on its own.
                    self.event("turn failure", "READ", attrs=attrs)
                    self.event("turn failure", "FINISH", status="FAILED", error=error, duration_ms=0, attrs=attrs)
            case "SubagentStart":
                self.open(
                    _subagent_key(self.session_id), "subagent", "READ", attrs=_context(payload, "prompt_id") or None
                )
            case "SubagentStop":
                transcript = _context(payload, "agent_transcript_path") or None
                if not self.finish(_subagent_key(self.session_id), attrs=transcript):
                    self.event("subagent", "READ")
                    self.event("subagent", "FINISH", duration_ms=0, attrs=transcript)
            case "PreCompact":
                trigger = {"trigger": _line(payload.get("trigger", "auto"))}
                self.event("compact", "READ", attrs=trigger)
                self.event("compact", "FINISH", attrs=trigger)
            case _:  # Notification, PermissionRequest and future events: nothing to log
                pass
        return self.events

    def pre_tool_use(self) -> None:
        payload = self.payload
        if self.state.was_finished(str(payload["tool_use_id"])):
            return  # announced again after its end: nothing new
        stage = "READ" if payload.get("tool_name") in READING_TOOLS else "PENDING"
        action, cycle = _tool_cycle(payload)
        attrs = {**tool_attrs(payload), **_context(payload, "prompt_id", "permission_mode", "effort")}
        self.open(_tool_key(payload), action, stage, attrs=attrs, cycle=cycle)

    def post_tool_use(self) -> None:
        payload = self.payload
        tool_use_id = str(payload["tool_use_id"])
        attrs = _agent_link(payload) or None
        duration = _duration_ms(payload)
        if not self.finish(_tool_key(payload), duration_ms=duration, attrs=attrs):
            if self.state.was_finished(tool_use_id):
                return
            # The PreToolUse was not seen (the hook was installed mid-call): a cycle of its own.
            self.whole_call(payload, duration, attrs=attrs)
        self.state.note_finished(tool_use_id)

    def post_tool_use_failure(self) -> None:
        payload = self.payload
        tool_use_id = str(payload["tool_use_id"])
        error = str(payload.get("error") or "the tool call failed")  # cut and marked by plain_event
        attrs = _context(payload, "is_interrupt") or None
        duration = _duration_ms(payload)
        if not self.finish(_tool_key(payload), duration_ms=duration, status="FAILED", error=error, attrs=attrs):
            if self.state.was_finished(tool_use_id):
                return
            self.whole_call(payload, duration, status="FAILED", error=error, attrs=attrs)
        self.state.note_finished(tool_use_id)

    def post_tool_batch(self) -> None:
        calls = self.payload.get("tool_calls")
        if not isinstance(calls, list):
            return
        for call in calls:
            if not isinstance(call, dict) or not call.get("tool_use_id"):
                continue
            tool_use_id = str(call["tool_use_id"])
            if self.state.was_finished(tool_use_id):
                continue
            error = _response_text(call.get("tool_response"))
            if self.state.is_open(_tool_key(call)):
                # Opened and never finished: Claude Code refused it (a permission), its answer says why.
                attrs = {"ended_by": "PostToolBatch", "outcome": "refused"}
                self.finish(_tool_key(call), status="FAILED", error=error, attrs=attrs)
            else:
                # No hook saw it: Claude Code never ran it (a tool this build does not offer).
                attrs = {"ended_by": "PostToolBatch", "outcome": "not run"}
                self.whole_call(call, None, status="FAILED", error=error, attrs=attrs)
            self.state.note_finished(tool_use_id)

    def session_end(self) -> None:
        reason = _line(self.payload.get("reason") or "other")
        session_key = _session_key(self.session_id)
        left_open = 0
        prompt_key = _prompt_key(self.session_id)
        if self.state.is_open(prompt_key):
            api_error = api_error_ending(self.payload.get("transcript_path"))
            if api_error is not None:  # its StopFailure is on its way: the turn failed, not left open
                attrs_closed = {"closed_by": _CLOSED_AT_END, "error_type": "api_error"}
                self.finish(prompt_key, status="FAILED", error=api_error, attrs=attrs_closed)
                self.state.failed_turn = self.state.ended_on = api_error
        for key in self.state.open_keys():
            if key == session_key:
                continue
            error = f"still open when the session ended (reason: {reason})"
            if key == prompt_key:
                error = f"the turn had not finished when the session ended (reason: {reason})"
            if self.finish(key, status="FAILED", error=error, attrs={"closed_by": _CLOSED_AT_END}):
                left_open += 1
        failed = self.state.failed_turn
        self.state.failed_turn = None
        attrs: dict[str, Any] = {"reason": reason}
        if failed is None and left_open:
            failed = f"{left_open} cycle(s) still open at the session's end were closed FAILED"
        if failed is not None:
            attrs["failed_because"] = "the last turn failed" if not left_open else "cycles left open"
            self.finish(session_key, status="FAILED", error=failed, attrs=attrs)
        else:
            self.finish(session_key, attrs=attrs)


def _tool_key(call: dict[str, Any]) -> str:
    return f"tool\0{call['tool_use_id']}"


def _prompt_key(session_id: str) -> str:
    return f"prompt\0{session_id}"


def _session_key(session_id: str) -> str:
    return f"session\0{session_id}"


def _subagent_key(session_id: str) -> str:
    return f"subagent\0{session_id}"


def _tool_cycle(call: dict[str, Any]) -> tuple[str, str]:
    """The action of a tool call (the tool's name) and its cycle id (the call id, its last characters
    that fit): parallel calls of one tool (two Reads at once) are separate cycles, each with its own
    outcome."""
    return _line(call.get("tool_name", "?")), _line(call["tool_use_id"])[-MAX_CYCLE_LENGTH:]


def _agent_link(payload: dict[str, Any]) -> dict[str, Any]:
    """An Agent call's subagent: its gz-ia session and the totals Claude Code reports for it."""
    response = payload.get("tool_response")
    if not isinstance(response, dict) or not response.get("agentId"):
        return {}
    main, _ = session_ids({"session_id": payload["session_id"]})
    attrs: dict[str, Any] = {
        "child_session_id": child_session_id(main, str(response["agentId"])),
        "agent_id": _line(response["agentId"]),
    }
    for key, name in _AGENT_TOTALS.items():
        value = response.get(key)
        if type(value) is int:
            attrs[name] = value
        elif isinstance(value, str) and value:
            attrs[name] = _line(value)
    return attrs


def hook_events(payload: dict[str, Any], state: HookState, now_ns: int) -> list[dict[str, Any]]:
    """The events one hook payload stands for, updating ``state`` (the Claude Code session's).

    Args:
        payload: one hook input, checked by :func:`check_payload`.
        state: what the earlier payloads of this Claude Code session left (changed in place).
        now_ns: the time the payload arrived, in nanoseconds since the epoch.

    Returns:
        Per event, the keyword arguments of ``plain_event`` (``timestamp_ns`` included), in the order
        to log them. Empty for events gz-ia does not record.
    """
    return _Mapping(payload, state, now_ns).handle()
