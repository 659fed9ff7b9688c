"""`gz-ia hook codex` and `gz-ia hook gemini` fed payloads captured from real runs
(tests/fixtures/agent_hooks/), one real subprocess per payload against a real collector: the cases a
real run does not produce on demand (a hook installed mid-call, a session ending with a call open,
an unreadable transcript, a payload the hook cannot use)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures" / "agent_hooks"
CODEX_SESSION = "01a233fa-0bee-7333-9e26-1f589291b7ab"
GEMINI_SESSION = "2bfd2fe1-fe2d-4499-979b-7b3378b62681"


def _payload(name: str, collector: Any, **changes: Any) -> dict[str, Any]:
    """A captured payload, its ``cwd`` inside the collector's workspace (the root is found from it)."""
    cwd = collector.workspace / "src"
    cwd.mkdir(exist_ok=True)
    payload: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return {**payload, "cwd": str(cwd), **changes}


def _hook(collector: Any, agent: str, payload: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**collector.env, **env}
    environment.pop("GZ_IA_ROOT")
    command = [sys.executable, "-m", "gz_ia.collector.entry", "hook", agent]
    result = subprocess.run(
        command, input=json.dumps(payload), env=environment, capture_output=True, text=True, timeout=30, check=False
    )
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    return result


def _feed(collector: Any, agent: str, *payloads: dict[str, Any]) -> None:
    for payload in payloads:
        assert _hook(collector, agent, payload).stderr == ""


def _cycles(lines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (f"{line['action']} {line['cycle']}" if "cycle" in line else line["action"], line["stage"], line["status"])
        for line in lines
    ]


def test_codex_post_tool_use_without_its_pre_is_a_cycle_of_its_own(collector: Any) -> None:
    """The hook installed while a call ran: its PostToolUse alone makes a whole cycle; an unreadable
    transcript leaves the outcome OK."""
    _feed(
        collector,
        "codex",
        _payload("codex-SessionStart", collector),
        _payload("codex-UserPromptSubmit", collector),
        _payload("codex-PostToolUse", collector),  # transcript_path names a file that is not there
    )
    lines = collector.session_lines(CODEX_SESSION)
    assert _cycles(lines) == [
        ("session", "READ", "OK"),
        ("prompt", "READ", "OK"),
        ("Bash call_fake1", "PENDING", "OK"),
        ("Bash call_fake1", "FINISH", "OK"),
    ]
    assert lines[2]["attrs"] == {
        "model": "gpt-fake",
        "tool": "Bash",
        "tool_use_id": "call_fake1",
        "command": "echo hello",
    }


def test_codex_session_end_closes_what_is_open_saying_so(collector: Any) -> None:
    """A PreToolUse never followed by its PostToolUse, and no Stop: SessionEnd finishes the call FAILED,
    the prompt and the session OK, each saying why."""
    _feed(
        collector,
        "codex",
        _payload("codex-SessionStart", collector),
        _payload("codex-UserPromptSubmit", collector),
        _payload("codex-PreToolUse", collector),
        _payload("codex-SessionEnd", collector),
    )
    lines = collector.session_lines(CODEX_SESSION)
    assert _cycles(lines)[3:] == [
        ("Bash call_fake1", "FINISH", "FAILED"),
        ("prompt", "FINISH", "OK"),
        ("session", "FINISH", "OK"),
    ]
    assert lines[3]["error"] == "the session ended before the tool call finished"
    assert lines[4]["attrs"]["ended_by"] == "session end"
    assert lines[5]["attrs"] == {"reason": "other"}
    tree = json.loads(collector.gz_ia("session", "tree", CODEX_SESSION, "--json", check=True).stdout)
    assert tree["status"] != "running"


def test_codex_outcome_read_from_the_transcript(collector: Any, tmp_path: Path) -> None:
    """The outcome and duration come from the call's item_completed record in the transcript (a
    hand-written transcript line in the shape the real Codex writes, see test_codex_gemini.py)."""
    transcript = tmp_path / "rollout.jsonl"
    record = {
        "type": "event_msg",
        "payload": {
            "type": "item_completed",
            "item": {"type": "CommandExecution", "id": "call_fake1", "status": "failed", "exit_code": 2,
                     "aggregated_output": "ls: cannot access 'x'\n", "duration": {"secs": 1, "nanos": 250_000_000}},
        },
    }  # fmt: skip
    second = json.loads(json.dumps(record))
    second["payload"]["item"].update(
        id="call_fake2", exit_code=0, status="completed", duration={"secs": 0, "nanos": 7_000_000}
    )
    lines = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in (record, second))
    transcript.write_text('{"type":"session_meta"}\n' + lines)
    changes = {"transcript_path": str(transcript)}
    _feed(
        collector,
        "codex",
        _payload("codex-PreToolUse", collector, **changes),
        _payload("codex-PostToolUse", collector, **changes),
        _payload("codex-PostToolUse", collector, tool_use_id="call_fake2", **changes),  # its PreToolUse not seen
    )
    alone = collector.session_lines(CODEX_SESSION)[-2:]
    assert _cycles(alone) == [("Bash call_fake2", "PENDING", "OK"), ("Bash call_fake2", "FINISH", "OK")]
    assert (alone[1]["duration_ms"], alone[1]["attrs"]["exit_code"]) == (7, 0)
    finish = collector.session_lines(CODEX_SESSION)[-3]
    assert (finish["status"], finish["error"], finish["duration_ms"]) == (
        "FAILED",
        "exit code 2: ls: cannot access 'x'",
        1250,
    )
    assert finish["attrs"]["exit_code"] == 2


@pytest.mark.parametrize("agent", ["codex", "gemini"])
def test_a_payload_it_cannot_use_is_counted_and_named_never_fatal(collector: Any, agent: str) -> None:
    """A tool event without what pairs it: exit 0, nothing on stdout, one line on stderr, counted."""
    name = "codex-PreToolUse" if agent == "codex" else "gemini-BeforeTool"
    payload = _payload(name, collector)
    payload.pop("tool_use_id" if agent == "codex" else "tool_name")
    result = _hook(collector, agent, payload)
    assert result.stderr.startswith(f"gz-ia hook {agent}: payload ignored: ValueError")
    invalid = Path(collector.env["GZ_IA_SPOOL_DIR"]) / "ledgers" / f"{agent}.invalid"
    assert invalid.read_text().startswith("1 ValueError")
    assert collector.all_sessions() == {}


def test_disabled_logs_nothing(collector: Any) -> None:
    """GZ_IA_DISABLED=1: as for every agent, nothing is logged."""
    _hook(collector, "gemini", _payload("gemini-SessionStart", collector), GZ_IA_DISABLED="1")
    assert collector.all_sessions() == {}


def test_gemini_after_tool_without_before_and_identical_calls_first_in_first_out(collector: Any) -> None:
    """Two identical calls open at once are finished in the order they started; an AfterTool whose
    BeforeTool was not seen is a cycle of its own; the duration comes from the payloads' timestamps."""
    before = _payload("gemini-BeforeTool", collector)
    after = _payload("gemini-AfterTool", collector)
    _feed(
        collector,
        "gemini",
        _payload("gemini-SessionStart", collector),
        {**before, "timestamp": "2026-12-01T23:39:13.000Z"},
        {**before, "timestamp": "2026-12-01T23:39:13.100Z"},
        {**after, "timestamp": "2026-12-01T23:39:13.500Z"},
        {**after, "timestamp": "2026-12-01T23:39:13.900Z"},
        {**after, "tool_name": "read_file", "tool_input": {"file_path": "a.txt"}},
    )
    lines = collector.session_lines(GEMINI_SESSION)
    assert _cycles(lines) == [
        ("session", "READ", "OK"),
        ("run_shell_command call1", "PENDING", "OK"),
        ("run_shell_command call2", "PENDING", "OK"),
        ("run_shell_command call1", "FINISH", "OK"),
        ("run_shell_command call2", "FINISH", "OK"),
        ("read_file call3", "PENDING", "OK"),
        ("read_file call3", "FINISH", "OK"),
    ]
    assert [lines[3]["duration_ms"], lines[4]["duration_ms"]] == [500, 800]
    assert lines[1]["attrs"]["command"] == "echo hello"
