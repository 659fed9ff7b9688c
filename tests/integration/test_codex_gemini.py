"""The real Codex CLI and Gemini CLI, driven offline by a scripted fake model API, with gz-ia's hooks
installed by ``gz-ia install``: what a real run records, against a real collector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.fixtures.agent_runners import (
    CODEX_MODEL,
    GEMINI_MODEL,
    assert_ran,
    codex_home,
    gemini_home,
    gz_install,
    run_codex,
    run_gemini,
    workspace,
)
from tests.fixtures.model_apis.gemini import CANDIDATE_TOKENS, PROMPT_TOKENS, GeminiAPI
from tests.fixtures.model_apis.openai_responses import INPUT_TOKENS, OUTPUT_TOKENS, ResponsesAPI
from tests.fixtures.model_apis.scripted import ToolCall, Turn, rounds

pytestmark = pytest.mark.agents

FAILING = "sh -c 'echo broken >&2; exit 3'"


def _cycles(lines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(action and cycle, stage, status), in the order stored."""
    return [
        (f"{line['action']} {line['cycle']}" if "cycle" in line else line["action"], line["stage"], line["status"])
        for line in lines
    ]


def _thread_id(stdout: str) -> str:
    for line in stdout.splitlines():
        event = json.loads(line)
        if event.get("type") == "thread.started":
            return str(event["thread_id"])
    raise AssertionError(f"no thread.started in {stdout!r}")


def _user_hooks(tmp_path: Path) -> tuple[str, Path]:
    """A hooks file of the user's own, in their formatting: one PostToolUse hook that leaves a mark."""
    mark = tmp_path / "user-hook-ran"
    text = (
        '{\n    "hooks": {"PostToolUse": [\n        {"hooks": [{"type": "command", '
        f'"command": "touch {mark}"}}]}}\n    ]}}\n}}\n'
    )
    return text, mark


def _codex(collector: Any, tmp_path: Path, script: Any) -> tuple[str, ResponsesAPI]:
    with ResponsesAPI(script) as api:
        home = codex_home(tmp_path, api.base_url)
        user_hooks, mark = _user_hooks(tmp_path)
        (home / ".codex" / "hooks.json").write_text(user_hooks)
        gz_install(collector, home, "codex")  # the default command: this gz-ia, by absolute path
        result = run_codex(collector, home, "run the commands", cwd=workspace(collector))
    assert_ran(result)
    assert mark.exists(), "the user's own hook ran beside gz-ia's"
    gz_install(collector, home, "codex", "--uninstall")
    assert (home / ".codex" / "hooks.json").read_text() == user_hooks
    return _thread_id(result.stdout), api


def _tokens(collector: Any, session: str) -> dict[str, int]:
    """The session's input and output tokens as ``gz-ia sessions`` counts them."""
    rows = map(json.loads, collector.gz_ia("sessions", "--json", check=True).stdout.splitlines())
    tokens = next(row["tokens"] for row in rows if row["session_id"] == session)
    return {"input": tokens["input"], "output": tokens["output"]}


def test_codex_tool_calls_one_cycle_each_a_failed_command_failed(collector: Any, tmp_path: Path) -> None:
    """Two parallel commands, one exiting 3: two cycles by tool_use_id, the failing one FINISH FAILED
    with its exit code and its own duration; prompt (with the turn's tokens) and session around them;
    agent and model named."""
    calls = (ToolCall("exec_command", {"cmd": "echo hello"}), ToolCall("exec_command", {"cmd": FAILING}))
    session, api = _codex(collector, tmp_path, rounds(Turn(calls=calls), Turn(text="done")))
    assert [path for path, _ in api.requests] == ["/v1/responses", "/v1/responses"]
    lines = collector.session_lines(session)
    cycles = _cycles(lines)
    assert cycles[:2] == [("session", "READ", "OK"), ("prompt", "READ", "OK")]
    assert cycles[-2:] == [("prompt", "FINISH", "OK"), ("session", "FINISH", "OK")]
    assert sorted(cycles[2:-2]) == [
        ("Bash call_1_0", "FINISH", "OK"),
        ("Bash call_1_0", "PENDING", "OK"),
        ("Bash call_1_1", "FINISH", "FAILED"),
        ("Bash call_1_1", "PENDING", "OK"),
    ]
    opened = lines[0]["attrs"]
    assert (opened["source"], opened["permission_mode"], opened["cwd"]) == ("startup", "bypassPermissions",
                                                                            str(workspace(collector)))  # fmt: skip
    assert opened["transcript_path"].endswith(".jsonl")
    by_cycle = {(line.get("cycle"), line["stage"]): line for line in lines}
    assert by_cycle[("call_1_0", "PENDING")]["attrs"] == {
        "model": CODEX_MODEL,
        "tool": "Bash",
        "tool_use_id": "call_1_0",
        "command": "echo hello",
    }
    failed = by_cycle[("call_1_1", "FINISH")]
    assert failed["error"] == "exit code 3: broken"
    assert failed["attrs"]["exit_code"] == 3
    assert by_cycle[("call_1_0", "FINISH")]["attrs"]["exit_code"] == 0
    assert all(line["duration_ms"] >= 0 for line in lines if line["stage"] == "FINISH")
    prompt_end = lines[-2]["attrs"]
    # The turn's usage as the hook read it, in the keys every reader counts, marked as a hook's.
    assert (prompt_end["gen_ai.usage.input_tokens"], prompt_end["gen_ai.usage.output_tokens"]) == (
        2 * INPUT_TOKENS,
        2 * OUTPUT_TOKENS,
    )
    assert prompt_end["gz-ia.usage_from"] == "hook"
    assert _tokens(collector, session) == {"input": 2 * INPUT_TOKENS, "output": 2 * OUTPUT_TOKENS}
    assert {line["agent"] for line in lines} == {"codex"}
    assert all(line["attrs"]["model"] == CODEX_MODEL for line in lines[:-1])  # SessionEnd names no model
    assert collector.rejects() == []
    logged = collector.gz_ia("logs", "--failed", "-o", "json", check=True)
    assert [json.loads(line)["cycle"] for line in logged.stdout.splitlines()] == ["call_1_1"]


def test_codex_calls_it_refuses_before_running_them_are_failed_cycles(collector: Any, tmp_path: Path) -> None:
    """A call to a tool Codex does not have and one with arguments it cannot parse fire no hook: Stop
    finds them in the transcript by call id, each FINISH FAILED with what Codex told the model."""
    calls = (
        ToolCall("no_such_tool", {"path": "x"}),
        ToolCall("exec_command", {"cmd": "echo hi"}),
        ToolCall("exec_command", {"bogus": 1}),
    )
    session, _ = _codex(collector, tmp_path, rounds(Turn(calls=calls), Turn(text="done")))
    lines = collector.session_lines(session)
    assert _cycles(lines)[2:] == [
        ("Bash call_1_1", "PENDING", "OK"),
        ("Bash call_1_1", "FINISH", "OK"),
        ("no_such_tool call_1_0", "PENDING", "OK"),
        ("no_such_tool call_1_0", "FINISH", "FAILED"),
        ("exec_command call_1_2", "PENDING", "OK"),
        ("exec_command call_1_2", "FINISH", "FAILED"),
        ("prompt", "FINISH", "OK"),
        ("session", "FINISH", "OK"),
    ]
    assert lines[5]["error"] == "unsupported call: no_such_tool"
    assert lines[4]["attrs"]["path"] == "x"
    assert lines[7]["error"].startswith("failed to parse function arguments: missing field `cmd`")
    assert collector.rejects() == []


def test_codex_with_the_collector_down_spools_and_delivers_once(collector: Any, tmp_path: Path) -> None:
    """The collector is down for the whole run: every hook spools; the collector started later writes
    each event once, in order."""
    collector.stop()
    session, _ = _codex(collector, tmp_path, rounds(Turn(calls=(ToolCall("exec_command", {"cmd": "true"}),)),
                                                      Turn(text="done")))  # fmt: skip
    assert not collector.session_file(session).exists()
    collector.start()
    wait_for(lambda: len(collector.session_lines(session)) == 6, message="the spooled events written")
    assert _cycles(collector.session_lines(session)) == [
        ("session", "READ", "OK"),
        ("prompt", "READ", "OK"),
        ("Bash call_1_0", "PENDING", "OK"),
        ("Bash call_1_0", "FINISH", "OK"),
        ("prompt", "FINISH", "OK"),
        ("session", "FINISH", "OK"),
    ]
    collector.restart()  # adopting the spool again writes nothing twice
    assert len(collector.session_lines(session)) == 6


def _gemini(collector: Any, tmp_path: Path, script: Any, *, chunks: int = 1) -> tuple[str, GeminiAPI]:
    with GeminiAPI(script, chunks=chunks) as api:
        home = gemini_home(tmp_path)
        before = (home / ".gemini" / "settings.json").read_bytes()
        gz_install(collector, home, "gemini")
        result = run_gemini(collector, home, "run the commands", cwd=workspace(collector), api_base_url=api.base_url)
    assert_ran(result)
    gz_install(collector, home, "gemini", "--uninstall")
    assert (home / ".gemini" / "settings.json").read_bytes() == before
    return str(json.loads(result.stdout)["session_id"]), api


def test_gemini_parallel_calls_of_one_tool_paired_first_in_first_out(collector: Any, tmp_path: Path) -> None:
    """Two identical parallel shell calls and a failing one: three cycles (no call id, paired FIFO per
    tool and input), the failing one FAILED with its exit code; model calls as cycles with tokens."""
    calls = (
        ToolCall("run_shell_command", {"command": "echo hello"}),
        ToolCall("run_shell_command", {"command": "echo hello"}),
        ToolCall("run_shell_command", {"command": FAILING}),
    )
    session, api = _gemini(collector, tmp_path, rounds(Turn(calls=calls), Turn(text="all done now")), chunks=3)
    assert len(api.requests) == 2
    lines = collector.session_lines(session)
    cycles = _cycles(lines)
    assert cycles[:3] == [("session", "READ", "OK"), ("prompt", "READ", "OK"), ("model", "READ", "OK")]
    assert cycles[-2:] == [("prompt", "FINISH", "OK"), ("session", "FINISH", "OK")]
    tools = [cycle for cycle in cycles if cycle[0].startswith("run_shell_command")]
    assert sorted((action, stage) for action, stage, _ in tools) == sorted(
        (f"run_shell_command call{n}", stage) for n in (1, 2, 3) for stage in ("PENDING", "FINISH")
    )
    assert lines[0]["attrs"]["cwd"] == str(workspace(collector))
    assert "/chats/session-" in lines[0]["attrs"]["transcript_path"]
    # Each hook is a process of its own, so the order calls are announced in (call1, call2, ...) is the
    # order their hook processes ran: what must hold is that each FINISH closes a call of its input.
    by_cycle = {(line.get("cycle"), line["stage"]): line for line in lines}
    closed = sorted(
        (by_cycle[(cycle, "PENDING")]["attrs"]["command"], by_cycle[(cycle, "FINISH")]["status"])
        for cycle in ("call1", "call2", "call3")
    )
    assert closed == sorted([("echo hello", "OK"), ("echo hello", "OK"), (FAILING, "FAILED")])
    failed = next(cycle for cycle in ("call1", "call2", "call3") if by_cycle[(cycle, "FINISH")]["status"] == "FAILED")
    assert by_cycle[(failed, "FINISH")]["error"] == "exit code 3"
    models = [line for line in lines if line["action"] == "model"]
    assert _cycles(models) == [("model", "READ", "OK"), ("model", "FINISH", "OK")] * 2  # one FINISH per response
    assert {key: value for key, value in models[-1]["attrs"].items() if key != "gen_ai.request.model"} == {
        "model": GEMINI_MODEL,
        "gen_ai.usage.input_tokens": PROMPT_TOKENS,
        "gen_ai.usage.output_tokens": CANDIDATE_TOKENS,
        "gz-ia.usage_from": "hook",
    }
    assert _tokens(collector, session) == {"input": 2 * PROMPT_TOKENS, "output": 2 * CANDIDATE_TOKENS}
    assert {line["agent"] for line in lines} == {"gemini-cli"}
    assert all(line["attrs"]["model"] == GEMINI_MODEL for line in lines[2:])  # named from the first BeforeModel on
    assert collector.rejects() == []


def test_gemini_a_tool_error_and_a_call_no_hook_announced_are_failed_cycles(collector: Any, tmp_path: Path) -> None:
    """A read of a missing file fails in AfterTool; a call to a tool Gemini does not have fires no tool
    hook at all and is found in the transcript at AfterAgent: both FINISH FAILED with Gemini's error."""
    calls = (ToolCall("read_file", {"file_path": "missing.txt"}), ToolCall("no_such_tool", {"path": "x"}))
    session, _ = _gemini(collector, tmp_path, rounds(Turn(calls=calls), Turn(text="done")))
    lines = collector.session_lines(session)
    tools = [line for line in lines if line["action"] in ("read_file", "no_such_tool")]
    assert _cycles(tools) == [
        ("read_file call1", "READ", "OK"),
        ("read_file call1", "FINISH", "FAILED"),
        ("no_such_tool call2", "PENDING", "OK"),
        ("no_such_tool call2", "FINISH", "FAILED"),
    ]
    assert tools[1]["error"].startswith("File not found: ")
    assert tools[1]["error"].endswith("missing.txt")
    assert tools[2]["attrs"]["path"] == "x"
    assert tools[3]["error"].startswith('Tool "no_such_tool" not found.')
    assert _cycles(lines)[-2:] == [("prompt", "FINISH", "OK"), ("session", "FINISH", "OK")]
    assert collector.rejects() == []


def test_gemini_with_the_collector_down_spools_and_delivers_once(collector: Any, tmp_path: Path) -> None:
    """Collector down for the run, up afterwards: each event written once."""
    collector.stop()
    call = ToolCall("run_shell_command", {"command": "true"})
    session, _ = _gemini(collector, tmp_path, rounds(Turn(calls=(call,)), Turn(text="done")))
    collector.start()
    expected = [
        ("session", "READ", "OK"),
        ("prompt", "READ", "OK"),
        ("model", "READ", "OK"),
        ("model", "FINISH", "OK"),
        ("run_shell_command call1", "PENDING", "OK"),
        ("run_shell_command call1", "FINISH", "OK"),
        ("model", "READ", "OK"),
        ("model", "FINISH", "OK"),
        ("prompt", "FINISH", "OK"),
        ("session", "FINISH", "OK"),
    ]
    wait_for(lambda: len(collector.session_lines(session)) == len(expected), message="the spooled events written")
    assert _cycles(collector.session_lines(session)) == expected
    collector.restart()
    assert len(collector.session_lines(session)) == len(expected)
