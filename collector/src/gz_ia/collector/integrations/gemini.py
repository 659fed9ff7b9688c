"""``gz-ia hook gemini``: Gemini CLI's hook payloads as gz-ia stage events.

Gemini CLI runs the hook command once per hook event with one JSON object on stdin (the table is in
docs/user-guide.md, "Gemini CLI"):

- a tool call is one cycle, from ``BeforeTool`` to ``AfterTool``. Gemini's payloads carry no call
  id, so calls are paired first in, first out among open calls of the same tool with the same input
  (two identical parallel calls are two cycles, finished in the order they started), else with the
  oldest open call of that tool (a BeforeTool hook may have rewritten the input). Each call gets the
  cycle id ``call<n>``, numbered per session. FINISH FAILED when the tool reports an error, or a
  shell command exits with a code other than 0; the duration is taken between the two payloads'
  own ``timestamp``, so the hooks' cost is not in it;
- a model call is the cycle ``model``, from ``BeforeModel`` to the ``AfterModel`` of the response's
  last chunk (the one with a ``finishReason``), with the token counts of ``usageMetadata``; every
  later event of the session carries the ``model``;
- a prompt is the cycle ``prompt``, from ``BeforeAgent`` to ``AfterAgent``; the session is the
  cycle ``session``, from ``SessionStart`` to ``SessionEnd``;
- calls Gemini CLI refuses before running them (an unknown tool, invalid arguments) fire no tool
  hook at all. ``AfterAgent`` finds them in the session's transcript (``transcript_path``, its last
  :data:`TRANSCRIPT_TAIL` bytes): each tool call recorded there since the prompt began that no
  ``BeforeTool`` announced becomes a cycle of its own, FINISH FAILED with the error Gemini gave the
  model. Then it closes, FAILED and saying so, the calls that never got an ``AfterTool``.
"""

from __future__ import annotations

import os

from gz_ia.collector.integrations.agent_hook import (
    HookRun,
    cut_line,
    hook_usage,
    run_agent_hook,
    session_attrs,
    tool_summary,
)
from gz_ia.collector.oneshot import _plain_json

try:  # the C digest itself: hashlib would load OpenSSL first
    from _sha256 import sha256  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.12 renamed it
    from hashlib import sha256

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = [
    "AGENT",
    "READING_TOOLS",
    "TRANSCRIPT_TAIL",
    "handle",
    "run_hook",
    "timestamp_ns",
    "tool_failure",
    "unannounced_calls",
]

AGENT: Final = "gemini-cli"
"""The ``agent`` of every event the hook logs."""
READING_TOOLS: Final = frozenset(
    {"read_file", "read_many_files", "list_directory", "glob", "search_file_content", "grep_search",
     "google_web_search", "web_fetch"}
)  # fmt: skip
"""Tools whose calls open their cycle with READ; every other tool opens it with PENDING."""
TRANSCRIPT_TAIL: Final = 1 << 20
"""Bytes read from the end of the transcript at AfterAgent: the hook reads no more."""
_EXIT_CODE: Final = "Exit Code: "
"""How a shell command's exit code starts its line in the tool's answer (re would cost the hook more
than the rest of its imports)."""


def timestamp_ns(payload: dict[str, Any]) -> int | None:
    """The payload's own ``timestamp`` (``2026-12-01T23:39:13.943Z``, as Gemini CLI writes it) in
    nanoseconds since the epoch; None if absent or in another form. Parsed by hand: ``datetime``
    would cost the hook more than the rest of its imports."""
    stamp = payload.get("timestamp")
    if not isinstance(stamp, str) or len(stamp) < 20 or stamp[10] != "T" or not stamp.endswith("Z"):
        return None
    try:
        year, month, day = int(stamp[0:4]), int(stamp[5:7]), int(stamp[8:10])
        hours, minutes = int(stamp[11:13]), int(stamp[14:16])
        whole, _, fraction = stamp[17:-1].partition(".")
        # Integers only: a float of the seconds rounds some milliseconds to the next one.
        milliseconds = int(whole) * 1000 + (int(fraction[:3].ljust(3, "0")) if fraction else 0)
    except ValueError:
        return None
    # Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146_097 + day_of_era - 719_468
    return (days * 86_400 + hours * 3600 + minutes * 60) * 1_000_000_000 + milliseconds * 1_000_000


def _digest(tool_name: object, tool_input: object) -> str:
    """The tool and a digest of its input (Gemini sends one object to both hooks and the transcript)."""
    return f"{tool_name}\0{sha256(_plain_json.dumps(tool_input).encode()).hexdigest()[:16]}"


def _call_key(payload: dict[str, Any]) -> str:
    """What pairs an AfterTool with its BeforeTool: the tool and a digest of its input."""
    return f"tool\0{_digest(payload.get('tool_name'), payload.get('tool_input'))}\0"


def unannounced_calls(transcript_path: object, since: str, announced: list[str]) -> list[dict[str, Any]]:
    """The tool calls of the transcript's last :data:`TRANSCRIPT_TAIL` bytes made at or after
    ``since`` (an ISO 8601 timestamp) that none of ``announced`` (digests of the calls BeforeTool
    announced, each matching one call) accounts for: ``{"name", "args", "error"}`` each, in order."""
    if not isinstance(transcript_path, str) or not os.path.isabs(transcript_path):
        return []
    try:
        with open(transcript_path, "rb") as transcript:
            size = transcript.seek(0, os.SEEK_END)
            transcript.seek(max(0, size - TRANSCRIPT_TAIL))
            tail = transcript.read(TRANSCRIPT_TAIL)
    except OSError:
        return []
    calls: dict[str, dict[str, Any]] = {}  # a message is written again as it grows: the last one counts
    for line in tail.split(b"\n"):
        if b'"toolCalls"' not in line:
            continue
        try:
            message: Any = _plain_json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or str(message.get("timestamp", "")) < since:
            continue
        for call in message.get("toolCalls") or ():
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                calls[call["id"]] = call
    left = list(announced)
    missing = []
    for call in calls.values():
        digest = _digest(call.get("name"), call.get("args"))
        if digest in left:
            left.remove(digest)
            continue
        missing.append({"name": call.get("name"), "args": call.get("args"), "error": _recorded_error(call)})
    return missing


def _recorded_error(call: dict[str, Any]) -> str:
    for result in call.get("result") or ():
        response = result.get("functionResponse", {}).get("response") if isinstance(result, dict) else None
        if isinstance(response, dict) and response.get("error"):
            return cut_line(response["error"])
    return f"the call never ran (status {cut_line(call.get('status', 'unknown'))})"


def tool_failure(response: object, tool: object) -> str | None:
    """The error of a finished call, None if it succeeded."""
    if not isinstance(response, dict):
        return None
    error = response.get("error")
    if isinstance(error, dict) and error.get("message"):
        return cut_line(error["message"])
    if error:
        return cut_line(error)
    content = response.get("llmContent")
    if tool == "run_shell_command" and isinstance(content, str):
        for line in content.splitlines():
            code = line[len(_EXIT_CODE) :].strip() if line.startswith(_EXIT_CODE) else ""
            if code.lstrip("-").isdigit() and int(code) != 0:
                return f"exit code {int(code)}"
    return None


def _model_of(payload: dict[str, Any]) -> str | None:
    request = payload.get("llm_request")
    if isinstance(request, dict) and isinstance(request.get("model"), str):
        return cut_line(request["model"])
    return None


def _last_chunk(response: object) -> bool:
    if not isinstance(response, dict):
        return False
    candidates = response.get("candidates")
    return isinstance(candidates, list) and any(
        isinstance(candidate, dict) and candidate.get("finishReason") for candidate in candidates
    )


def handle(run: HookRun) -> None:
    """Add the events of one Gemini CLI payload to ``run``."""
    payload = run.payload
    data = run.data
    model = _model_of(payload)
    if model:
        data["model"] = model
    if data.get("model"):
        run.labels["model"] = data["model"]
    at = timestamp_ns(payload)
    prompt_key = f"prompt\0{run.session_id}"
    model_key = f"model\0{run.session_id}"
    match payload.get("hook_event_name"):
        case "BeforeTool":
            data["calls"] = number = int(data.get("calls", 0)) + 1
            stage = "READ" if payload.get("tool_name") in READING_TOOLS else "PENDING"
            key = f"{_call_key(payload)}{number}"
            run.remember("announced", _digest(payload.get("tool_name"), payload.get("tool_input")))
            action = cut_line(payload.get("tool_name", "?"))
            run.open(key, action, stage, started_ns=at, attrs=tool_summary(payload), cycle=f"call{number}")
        case "AfterTool":
            open_calls = run.open_keys(_call_key(payload)) or run.open_keys(f"tool\0{payload.get('tool_name')}\0")
            error = tool_failure(payload.get("tool_response"), payload.get("tool_name"))
            status = "FAILED" if error else "OK"
            if not open_calls:  # the BeforeTool was not seen (the hook was installed mid-call)
                data["calls"] = number = int(data.get("calls", 0)) + 1
                action = cut_line(payload.get("tool_name", "?"))
                run.single(action, status, attrs=tool_summary(payload), cycle=f"call{number}", error=error)
            else:
                run.finish(open_calls[0], status, ended_ns=at, error=error)
        case "BeforeModel":
            run.finish(model_key, "FAILED", error="the model call got no last chunk")
            run.open(model_key, "model", "READ", started_ns=at)
        case "AfterModel":
            response = payload.get("llm_response")
            if _last_chunk(response):
                assert isinstance(response, dict)
                usage = response.get("usageMetadata")
                if not isinstance(usage, dict):
                    usage = {}
                tokens = hook_usage(
                    usage.get("promptTokenCount"), usage.get("candidatesTokenCount"),
                    usage.get("cachedContentTokenCount"), response.get("modelVersion"),
                )  # fmt: skip
                run.finish(model_key, ended_ns=at, attrs=tokens)
        case "SessionStart":
            attrs = session_attrs(payload, "source", "cwd", "transcript_path")
            run.open(f"session\0{run.session_id}", "session", "READ", started_ns=at, attrs=attrs)
        case "SessionEnd":
            _close_turn(run, at)
            run.finish(prompt_key, ended_ns=at, attrs={"ended_by": "session end"})
            reason = {"reason": cut_line(payload.get("reason", "other"))}
            run.finish(f"session\0{run.session_id}", ended_ns=at, attrs=reason)
        case "BeforeAgent":
            run.finish(prompt_key, ended_ns=at, attrs={"ended_by": "next prompt"})
            prompt = payload.get("prompt")
            size = {"prompt_chars": len(prompt)} if isinstance(prompt, str) else None
            run.open(prompt_key, "prompt", "READ", started_ns=at, attrs=size)
            data["announced"] = []
            data["prompt_at"] = str(payload.get("timestamp", ""))
        case "AfterAgent":
            _record_unannounced(run)
            _close_turn(run, at)
            run.finish(prompt_key, ended_ns=at)
        case _:  # PreCompress (fired before every prompt), BeforeToolSelection, Notification: nothing to log
            return


def _record_unannounced(run: HookRun) -> None:
    """A cycle, FAILED, for each call of this prompt the transcript has and no BeforeTool announced."""
    data = run.data
    since = str(data.pop("prompt_at", ""))
    if not since:  # the prompt's start was not seen: nothing tells this prompt's calls from earlier ones
        return
    for call in unannounced_calls(run.payload.get("transcript_path"), since, data.pop("announced", [])):
        data["calls"] = number = int(data.get("calls", 0)) + 1
        summary = tool_summary({"tool_name": call["name"], "tool_input": call["args"]})
        run.single(cut_line(call["name"] or "?"), "FAILED", attrs=summary, cycle=f"call{number}", error=call["error"])


def _close_turn(run: HookRun, at: int | None) -> None:
    """FINISH FAILED what the turn left open: calls without AfterTool, a model call without its end."""
    run.finish_all("tool\0", "FAILED", ended_ns=at, error="no AfterTool: the call was refused or never ran")
    run.finish(f"model\0{run.session_id}", "FAILED", ended_ns=at, error="the model call got no last chunk")


def _check(payload: dict[str, Any]) -> None:
    if payload["hook_event_name"] in ("BeforeTool", "AfterTool") and not payload.get("tool_name"):
        raise ValueError(f"{payload['hook_event_name']} without tool_name")


def run_hook(raw: bytes, *, socket_path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> int:
    """Log the events of one Gemini CLI hook payload; always 0, never a word on stdout.

    Args:
        raw: the payload, as read from stdin.
        socket_path: the collector socket.
        root: the session root; None finds it from the payload's ``cwd``.
    """
    return run_agent_hook(
        raw, agent=AGENT, command="gemini", handle=handle, check=_check, socket_path=socket_path, root=root
    )
