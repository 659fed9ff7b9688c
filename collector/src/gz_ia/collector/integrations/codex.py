"""``gz-ia hook codex``: Codex CLI's hook payloads as gz-ia stage events.

Codex runs the hook command once per hook event with one JSON object on stdin, in Claude Code's
shape (the table is in docs/user-guide.md, "Codex"):

- a tool call is one cycle keyed by its ``tool_use_id``: PENDING at ``PreToolUse``, FINISH at
  ``PostToolUse``. Codex has no failure event and its ``tool_response`` is the command's output
  alone, so the outcome comes from the session's transcript (``transcript_path``), where Codex has
  written the call's ``item_completed`` record, with its exit code and its own duration, by the time
  the hook runs: an exit code other than 0 (or a ``failed`` status) is FINISH FAILED. When the
  record is not found the call is FINISH OK, timed from its PreToolUse;
- calls Codex refuses before running them (a tool it does not have, arguments it cannot parse)
  fire no hook at all. ``Stop`` finds them in the transcript: each ``function_call`` of the turn
  whose call id no tool hook announced becomes a cycle of its own, FINISH FAILED with the output
  Codex gave the model (e.g. ``unsupported call: <tool>``);
- a prompt is the cycle ``prompt``, from ``UserPromptSubmit`` to ``Stop``, whose FINISH carries the
  turn's token counts (the transcript's last ``token_usage_record`` of the turn); the session is the cycle
  ``session``, from ``SessionStart`` to ``SessionEnd``, which also closes what is still open;
- every event of a payload that names the ``model`` carries it in ``attrs``.
"""

from __future__ import annotations

import os

from gz_ia.collector.integrations.agent_hook import (
    HookRun,
    cut_line,
    hook_usage,
    run_agent_hook,
    session_attrs,
    tool_cycle,
    tool_summary,
)
from gz_ia.collector.oneshot import _plain_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["AGENT", "TRANSCRIPT_TAIL", "call_outcome", "handle", "run_hook", "turn_usage", "unannounced_calls"]

AGENT: Final = "codex"
"""The ``agent`` of every event the hook logs."""
TRANSCRIPT_TAIL: Final = 1 << 20
"""Bytes read from the end of the transcript to find a call's outcome: the hook reads no more."""
_TOOL_EVENTS: Final = ("PreToolUse", "PostToolUse")


def _tail(transcript_path: object) -> bytes:
    """The last :data:`TRANSCRIPT_TAIL` bytes of the transcript; nothing if it cannot be read."""
    if not isinstance(transcript_path, str) or not os.path.isabs(transcript_path):
        return b""
    try:
        with open(transcript_path, "rb") as transcript:
            size = transcript.seek(0, os.SEEK_END)
            transcript.seek(max(0, size - TRANSCRIPT_TAIL))
            return transcript.read(TRANSCRIPT_TAIL)
    except OSError:
        return b""


def call_outcome(transcript_path: object, call_id: str) -> dict[str, Any] | None:
    """The ``item_completed`` record of ``call_id`` in the last :data:`TRANSCRIPT_TAIL` bytes of the
    transcript (its ``item``), or None when it is not there or the transcript cannot be read."""
    tail = _tail(transcript_path)
    needle = f'"id":"{call_id}"'.encode()
    for line in reversed(tail.split(b"\n")):
        if needle not in line or b'"item_completed"' not in line:
            continue
        try:
            record: Any = _plain_json.loads(line)
            item = record["payload"]["item"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(item, dict) and item.get("id") == call_id:
            return item
    return None


def turn_usage(tail: bytes, turn_id: str) -> dict[str, Any]:
    """The usage attrs (:func:`.agent_hook.hook_usage`) of turn ``turn_id`` so far, from its last
    ``token_usage_record`` in ``tail`` (the transcript's end); empty when there is none."""
    needle = f'"turn_id":"{turn_id}"'.encode()
    for line in reversed(tail.split(b"\n")):
        if b'"token_usage_record"' not in line or needle not in line:
            continue
        try:
            record: Any = _plain_json.loads(line)
            usage = record["payload"]["turn_token_usage"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(usage, dict):
            return hook_usage(usage.get("input_tokens"), usage.get("output_tokens"), usage.get("cached_input_tokens"))
    return {}


def unannounced_calls(tail: bytes, turn_id: str, announced: list[str]) -> list[dict[str, Any]]:
    """The ``function_call`` items of turn ``turn_id`` in ``tail`` (the transcript's end) whose call
    id is not in ``announced``: ``{"call_id", "name", "arguments", "output"}`` each, in the model's order."""
    calls: dict[str, dict[str, Any]] = {}
    outputs: dict[str, str] = {}
    for line in tail.split(b"\n"):
        if b'"function_call' not in line:
            continue
        try:
            record: Any = _plain_json.loads(line)
            item = record["payload"]
        except (ValueError, KeyError, TypeError):
            continue
        if not isinstance(item, dict) or not isinstance(item.get("call_id"), str):
            continue
        if item.get("type") == "function_call_output":
            outputs[item["call_id"]] = str(item.get("output", ""))
        elif item.get("type") == "function_call" and item["call_id"] not in announced:
            metadata = item.get("internal_chat_message_metadata_passthrough")
            if isinstance(metadata, dict) and metadata.get("turn_id") == turn_id:
                calls[item["call_id"]] = {"call_id": item["call_id"], "name": item.get("name"),
                                          "arguments": item.get("arguments")}  # fmt: skip
    for call_id, call in calls.items():
        call["output"] = outputs.get(call_id, "")
    return list(calls.values())


def _verdict(item: dict[str, Any]) -> tuple[str, str | None, int | None]:
    """(status, error, duration in ms) of a completed call's record."""
    exit_code = item.get("exit_code")
    duration = item.get("duration")
    duration_ms = None
    if isinstance(duration, dict) and isinstance(duration.get("secs"), int) and isinstance(duration.get("nanos"), int):
        duration_ms = duration["secs"] * 1000 + duration["nanos"] // 1_000_000
    failed = item.get("status") == "failed" or (isinstance(exit_code, int) and exit_code != 0)
    if not failed:
        return "OK", None, duration_ms
    error = f"exit code {exit_code}" if isinstance(exit_code, int) else f"status {item.get('status')}"
    detail = item.get("error") or item.get("aggregated_output")
    if detail and cut_line(detail):
        error += f": {cut_line(detail)}"
    return "FAILED", error, duration_ms


def handle(run: HookRun) -> None:
    """Add the events of one Codex payload to ``run``."""
    payload = run.payload
    if payload.get("model"):
        run.labels["model"] = cut_line(payload["model"])
    prompt_key = f"prompt\0{run.session_id}"
    match payload.get("hook_event_name"):
        case "PreToolUse":
            run.remember("announced", str(payload["tool_use_id"]))
            action, cycle = tool_cycle(payload, str(payload["tool_use_id"]))
            run.open(f"tool\0{payload['tool_use_id']}", action, "PENDING", attrs=tool_summary(payload), cycle=cycle)
        case "PostToolUse":
            call_id = str(payload["tool_use_id"])
            if call_id not in run.data.get("announced", ()):
                run.remember("announced", call_id)
            item = call_outcome(payload.get("transcript_path"), call_id)
            status, error, duration_ms = _verdict(item) if item is not None else ("OK", None, None)
            fields: dict[str, Any] = {"error": error} if error else {}
            if item is not None and isinstance(item.get("exit_code"), int):
                fields["attrs"] = {"exit_code": item["exit_code"]}
            if not run.finish(f"tool\0{call_id}", status, duration_ms=duration_ms, **fields):
                # The PreToolUse was not seen (the hook was installed mid-call): a cycle of its own.
                action, cycle = tool_cycle(payload, call_id)
                run.single(action, status, attrs=tool_summary(payload), cycle=cycle, duration_ms=duration_ms,
                           error=fields.get("error"), finish_attrs=fields.get("attrs"))  # fmt: skip
        case "SessionStart":
            facts = session_attrs(payload, "source", "cwd", "permission_mode", "transcript_path")
            run.open(f"session\0{run.session_id}", "session", "READ", attrs=facts)
        case "SessionEnd":
            run.finish_all("tool\0", "FAILED", error="the session ended before the tool call finished")
            run.finish(prompt_key, attrs={"ended_by": "session end"})
            run.finish(f"session\0{run.session_id}", attrs={"reason": cut_line(payload.get("reason", "other"))})
        case "UserPromptSubmit":
            run.finish(prompt_key, attrs={"ended_by": "next prompt"})  # Stop does not follow an interrupt
            prompt = payload.get("prompt")
            attrs: dict[str, str | int] = {"prompt_chars": len(prompt)} if isinstance(prompt, str) else {}
            if payload.get("turn_id"):
                attrs["turn_id"] = cut_line(payload["turn_id"])
            run.open(prompt_key, "prompt", "READ", attrs=attrs)
            run.data["announced"] = []
        case "Stop":
            tail = _tail(payload.get("transcript_path"))
            _record_unannounced(run, tail)
            turn_id = payload.get("turn_id")
            run.finish(prompt_key, attrs=turn_usage(tail, turn_id) if isinstance(turn_id, str) else None)
        case "PreCompact":
            run.open(
                f"compact\0{run.session_id}",
                "compact",
                "READ",
                attrs={"trigger": cut_line(payload.get("trigger", "auto"))},
            )
        case "PostCompact":
            run.finish(f"compact\0{run.session_id}")
        case _:  # PermissionRequest, subagents and future events: nothing to log
            return


def _record_unannounced(run: HookRun, tail: bytes) -> None:
    """A cycle, FAILED, for each call of the turn the transcript has and no tool hook announced."""
    turn_id = run.payload.get("turn_id")
    announced = run.data.pop("announced", [])
    if not isinstance(turn_id, str):
        return
    for call in unannounced_calls(tail, turn_id, announced):
        try:
            arguments = _plain_json.loads(str(call["arguments"]))
        except ValueError:
            arguments = None
        tool = {"tool_name": call["name"] or "?", "tool_use_id": call["call_id"], "tool_input": arguments}
        action, cycle = tool_cycle(tool, call["call_id"])
        error = cut_line(call["output"]) or "the call never ran"
        run.single(action, "FAILED", attrs=tool_summary(tool), cycle=cycle, error=error)


def _check(payload: dict[str, Any]) -> None:
    if payload["hook_event_name"] in _TOOL_EVENTS and not payload.get("tool_use_id"):
        raise ValueError(f"{payload['hook_event_name']} without tool_use_id")


def run_hook(raw: bytes, *, socket_path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> int:
    """Log the events of one Codex hook payload; always 0, never a word on stdout.

    Args:
        raw: the payload, as read from stdin.
        socket_path: the collector socket.
        root: the session root; None finds it from the payload's ``cwd``.
    """
    return run_agent_hook(
        raw, agent=AGENT, command="codex", handle=handle, check=_check, socket_path=socket_path, root=root
    )
