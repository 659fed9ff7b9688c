"""The real Claude Code binary, driven offline by the fake Anthropic API, with gz-ia's hooks installed
by ``gz-ia install claude-code`` into a fresh HOME, against a real collector: what is stored is what
happened. Beside gz-ia's hook a second command hook records every payload Claude Code sent, so a test
can compare what was stored with what the binary said (``duration_ms``, ids)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.fixtures.claude_run import ClaudeCode, ClaudeResult
from tests.fixtures.model_apis.anthropic import ApiError, FakeAnthropic, ToolUse, Turn

pytestmark = pytest.mark.agents

RECORDED_EVENTS = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "SessionStart",
    "SessionEnd",
    "UserPromptSubmit",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
)


@pytest.fixture(name="api")
def _api() -> Iterator[FakeAnthropic]:
    """The fake Anthropic API on 127.0.0.1, closed at the end."""
    api = FakeAnthropic()
    yield api
    api.close()


@pytest.fixture(name="claude")
def _claude(collector: Any, api: FakeAnthropic, short_tmp: Path) -> ClaudeCode:
    """Claude Code with a fresh HOME, gz-ia's hooks installed there (and a recording hook beside
    them), working in the collector's workspace."""
    claude = ClaudeCode(short_tmp / "home", collector.workspace, api, collector.env)
    recording = short_tmp / "payloads.jsonl"
    command = f"cat >> {shlex.quote(str(recording))}; echo >> {shlex.quote(str(recording))}"
    hooks = {
        event: [
            {
                **({"matcher": "*"} if event.startswith(("Pre", "Post")) else {}),
                "hooks": [{"type": "command", "command": command}],
            }
        ]
        for event in RECORDED_EVENTS
    }
    claude.write_settings({"hooks": hooks})
    claude.install_hooks()
    return claude


def _sent(short_tmp: Path, event: str | None = None) -> list[dict[str, Any]]:
    """The payloads Claude Code sent its hooks (the recording hook's copy)."""
    path = short_tmp / "payloads.jsonl"
    payloads = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [p for p in payloads if event is None or p["hook_event_name"] == event]


def _ran(result: ClaudeResult) -> str:
    assert result.returncode == 0, (result.stderr, result.messages[-3:])
    return result.session_id


def _ended(collector: Any, session_id: str, finishes: int = 1) -> list[dict[str, Any]]:
    """The session's lines once its ``session`` cycle has FINISHed ``finishes`` times."""

    def done() -> bool:
        lines = collector.session_lines(session_id)
        return sum(1 for line in lines if (line["action"], line["stage"]) == ("session", "FINISH")) >= finishes

    wait_for(done, timeout=30, message=f"the end of session {session_id}")
    lines: list[dict[str, Any]] = collector.session_lines(session_id)
    return lines


def _cycles(lines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(line["action"], line["stage"], line["status"]) for line in lines]


def _of_tool(lines: list[dict[str, Any]], tool_use_id: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("cycle") == tool_use_id]


def _tree(collector: Any, session_id: str) -> dict[str, Any]:
    tree: dict[str, Any] = json.loads(collector.gz_ia("session", "tree", session_id, "--json", check=True).stdout)
    return tree


def test_tool_calls_are_cycles_timed_by_claude_codes_own_duration(
    claude: ClaudeCode, api: FakeAnthropic, collector: Any, short_tmp: Path
) -> None:
    """Read and Bash calls in one turn (run at once), a failing Bash: one cycle per call, each FINISH
    carrying the duration_ms Claude Code sent and stamped at its opening plus it; context kept."""
    (collector.workspace / "notes.txt").write_text("a needle in here\n")
    turn = Turn(
        tools=(
            ToolUse("Read", {"file_path": str(collector.workspace / "notes.txt")}, "toolu_read1"),
            ToolUse("Read", {"file_path": str(collector.workspace / "notes.txt")}, "toolu_read2"),
            ToolUse("Bash", {"command": "sleep 0.3; echo slow", "description": "wait"}, "toolu_slow"),
        )
    )
    failing = Turn(tools=(ToolUse("Bash", {"command": "ls /nonexistent-dir", "description": "fail"}, "toolu_fail"),))
    api.script("RUN-TOOLS", turn, failing, Turn(text="carried on"))
    session = _ran(claude.run("RUN-TOOLS: read and run"))
    lines = _ended(collector, session)
    sent = {p["tool_use_id"]: p for p in _sent(short_tmp) if p["hook_event_name"].startswith("PostToolUse")}
    for tool_use_id, stage in (("toolu_read1", "READ"), ("toolu_read2", "READ"), ("toolu_slow", "PENDING")):
        opening, finish = _of_tool(lines, tool_use_id)
        assert (opening["stage"], finish["stage"], finish["status"]) == (stage, "FINISH", "OK")
        assert finish["duration_ms"] == sent[tool_use_id]["duration_ms"]
    slow_open, slow_finish = _of_tool(lines, "toolu_slow")
    assert slow_finish["duration_ms"] >= 300
    opened, finished = (_stamp(line) for line in (slow_open, slow_finish))
    assert finished - opened == pytest.approx(slow_finish["duration_ms"] / 1000, abs=0.002)
    fail_open, fail_finish = _of_tool(lines, "toolu_fail")
    assert (fail_finish["status"], fail_finish["duration_ms"]) == ("FAILED", sent["toolu_fail"]["duration_ms"])
    assert "No such file or directory" in fail_finish["error"]
    assert fail_finish["attrs"]["is_interrupt"] is False
    prompt_id = _sent(short_tmp, "UserPromptSubmit")[0]["prompt_id"]
    assert fail_open["attrs"] | {"tool_use_id": "-"} == {
        "tool": "Bash",
        "tool_use_id": "-",
        "command": "ls /nonexistent-dir",
        "description": "fail",
        "prompt_id": prompt_id,
        "permission_mode": "bypassPermissions",
        "effort": fail_open["attrs"]["effort"],
    }
    start = lines[0]
    assert (start["action"], start["attrs"]["source"]) == ("session", "startup")
    assert start["attrs"]["cwd"] == str(collector.workspace)
    assert start["attrs"]["transcript_path"] == _sent(short_tmp, "SessionStart")[0]["transcript_path"]
    # The agent carried on after the failed call and its turn ended well: the session is not failed.
    assert _cycles(lines)[-2:] == [("prompt", "FINISH", "OK"), ("session", "FINISH", "OK")]
    assert _tree(collector, session)["status"] == "ok"
    listed = collector.gz_ia("sessions", "--json", check=True).stdout.splitlines()
    row = next(row for row in map(json.loads, listed) if row["session_id"] == session)
    assert (row["status"], row["failures"]) == ("ok", 1)
    assert collector.rejects() == []


def _stamp(line: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(line["timestamp"]).timestamp()


def test_a_refused_write_finishes_failed_with_the_reason_and_nothing_stays_running(
    claude: ClaudeCode, api: FakeAnthropic, collector: Any
) -> None:
    """--permission-mode default refuses a Write in -p: PENDING, then FINISH FAILED from PostToolBatch."""
    target = collector.workspace / "denied.txt"
    api.script(
        "RUN-REFUSED",
        Turn(tools=(ToolUse("Write", {"file_path": str(target), "content": "no\n"}, "toolu_w"),)),
        Turn(text="could not write"),
    )
    session = _ran(claude.run("RUN-REFUSED: write a file", permissions="default"))
    lines = _ended(collector, session)
    assert not target.exists()
    opening, finish = _of_tool(lines, "toolu_w")
    assert (opening["stage"], finish["status"], finish["attrs"]["outcome"]) == ("PENDING", "FAILED", "refused")
    assert "haven't granted it yet" in finish["error"]
    assert opening["attrs"]["permission_mode"] == "default"
    tree = _tree(collector, session)
    assert tree["status"] != "running"


def test_a_call_to_a_tool_this_build_does_not_offer_finishes_failed_and_grep_is_a_read_only_when_offered(
    claude: ClaudeCode, api: FakeAnthropic, collector: Any
) -> None:
    """Grep is not in the request's tools unless --allowedTools names it: then a call to it fires no
    hook but PostToolBatch, and is one cycle FINISH FAILED with the tool_use_error; offered, it is a READ."""
    grep = ToolUse("Grep", {"pattern": "needle"}, "toolu_grep")
    script = api.script("RUN-MISSING", Turn(tools=(grep,)), Turn(text="no grep"))
    session = _ran(claude.run("RUN-MISSING: grep"))
    assert "Grep" not in script.tools_offered()
    opening, finish = _of_tool(_ended(collector, session), "toolu_grep")
    assert (opening["stage"], finish["status"], finish["attrs"]["outcome"]) == ("READ", "FAILED", "not run")
    assert "No such tool available: Grep" in finish["error"]

    (collector.workspace / "hay.txt").write_text("needle\n")
    offered = api.script(
        "RUN-OFFERED", Turn(tools=(ToolUse("Grep", {"pattern": "needle"}, "toolu_grep2"),)), Turn(text="found")
    )
    second = _ran(claude.run("RUN-OFFERED: grep", "--allowedTools", "Grep,Glob"))
    assert {"Grep", "Glob"} <= set(offered.tools_offered())
    opening, finish = _of_tool(_ended(collector, second), "toolu_grep2")
    assert (opening["stage"], finish["stage"], finish["status"]) == ("READ", "FINISH", "OK")


def test_an_api_error_fails_the_turn_and_the_session(claude: ClaudeCode, api: FakeAnthropic, collector: Any) -> None:
    """HTTP 400 from the API: StopFailure closes the prompt FAILED with the error; the session is failed."""
    api.script("RUN-APIERR", ApiError(400, "scripted failure for the test"))
    result = claude.run("RUN-APIERR: anything")
    session = result.session_id
    lines = _ended(collector, session)
    prompt = [line for line in lines if (line["action"], line["stage"]) == ("prompt", "FINISH")]
    assert [line["status"] for line in prompt] == ["FAILED"]

    # SessionEnd does not wait for StopFailure's hook: whichever is handled first, the error is kept.
    def failed_with_the_api_error() -> bool:
        return any(
            "API Error: 400 scripted failure for the test" in line.get("error", "")
            for line in collector.session_lines(session)
        )

    wait_for(failed_with_the_api_error, timeout=30, message="the API error stored")
    assert ("session", "FINISH", "FAILED") in _cycles(lines)
    assert _tree(collector, session)["status"] == "failed"
    failed = collector.gz_ia("logs", "--failed", "-o", "json", check=True).stdout.splitlines()
    assert "prompt" in {json.loads(line)["action"] for line in failed}


def test_a_subagent_is_a_child_session_with_its_own_tools_named_by_the_agent_call(
    claude: ClaudeCode, api: FakeAnthropic, collector: Any
) -> None:
    """The Agent call's FINISH names the child session and keeps its totals; the child's Bash is its own."""
    task = {
        "description": "Run subagent check",
        "prompt": "SUBAGENT-MARKER: run echo",
        "subagent_type": "general-purpose",
    }
    api.script("RUN-AGENT", Turn(tools=(ToolUse("Agent", task, "toolu_agent"),)), Turn(text="parent done"))
    api.script(
        "SUBAGENT-MARKER",
        Turn(tools=(ToolUse("Bash", {"command": "echo from-subagent"}, "toolu_sub"),)),
        Turn(text="Subagent done."),
    )
    session = _ran(claude.run("RUN-AGENT: use a subagent"))
    lines = _ended(collector, session)
    _, finish = _of_tool(lines, "toolu_agent")
    child_id = finish["attrs"]["child_session_id"]
    assert child_id.startswith(f"{session}.")
    assert finish["attrs"]["total_tool_use_count"] == 1
    assert finish["attrs"]["total_tokens"] > 0
    assert {"resolved_model", "total_duration_ms"} <= finish["attrs"].keys()
    child = collector.session_lines(child_id)
    assert {line["parent_session_id"] for line in child} == {session}
    assert [(c[0], c[1]) for c in _cycles(child)] == [
        ("subagent", "READ"),
        ("Bash", "PENDING"),
        ("Bash", "FINISH"),
        ("subagent", "FINISH"),
    ]
    assert child[1]["cycle"] == "toolu_sub"
    tree = _tree(collector, session)
    assert [node["session_id"] for node in tree["children"]] == [child_id]


def test_continue_resumes_the_same_session(claude: ClaudeCode, api: FakeAnthropic, collector: Any) -> None:
    """--continue reuses the session id, SessionStart source resume: one session, two session cycles."""
    api.script("RUN-FIRST", Turn(text="first"))
    session = _ran(claude.run("RUN-FIRST: hello"))
    _ended(collector, session)
    again = _ran(claude.run("and again", "--continue"))
    assert again == session
    lines = _ended(collector, session, finishes=2)
    starts = [line["attrs"]["source"] for line in lines if (line["action"], line["stage"]) == ("session", "READ")]
    assert starts == ["startup", "resume"]
    assert _tree(collector, session)["status"] == "ok"


def test_with_the_collector_down_the_run_is_spooled_silently_and_delivered_once(
    claude: ClaudeCode, api: FakeAnthropic, collector: Any
) -> None:
    """No collector: Claude Code runs as ever (exit 0, no hook output); the next collector writes the
    whole session, each event once."""
    api.script("RUN-DOWN", Turn(tools=(ToolUse("Bash", {"command": "echo hi"}, "toolu_down"),)), Turn(text="ok"))
    collector.stop()
    result = claude.run("RUN-DOWN: run")
    session = _ran(result)
    assert "gz-ia" not in result.stderr
    assert not any("gz-ia" in json.dumps(m) for m in result.messages if m.get("type") == "system")
    collector.start()
    lines = _ended(collector, session)
    assert _cycles(lines) == [
        ("session", "READ", "OK"),
        ("prompt", "READ", "OK"),
        ("Bash", "PENDING", "OK"),
        ("Bash", "FINISH", "OK"),
        ("prompt", "FINISH", "OK"),
        ("session", "FINISH", "OK"),
    ]
    assert collector.rejects() == []


def test_session_end_closes_what_is_still_open_failed_and_says_so(
    claude: ClaudeCode, api: FakeAnthropic, collector: Any, short_tmp: Path
) -> None:
    """SIGTERM during a long Bash call: Claude Code fires SessionEnd with the call and the turn still
    open; both FINISH FAILED, closed_by "session end", and the session FINISHes FAILED."""
    api.script("RUN-TERM", Turn(tools=(ToolUse("Bash", {"command": "sleep 20", "description": "long"}, "toolu_long"),)))
    process = claude.start("RUN-TERM: wait")
    wait_for(lambda: bool(_sent(short_tmp, "PreToolUse")), timeout=60, message="the Bash call to start")
    session = _sent(short_tmp, "PreToolUse")[0]["session_id"]
    # The call's READ stored before the signal: the hook that sends it may still be running when
    # the recording hook beside it has written its copy.
    wait_for(lambda: bool(_of_tool(collector.session_lines(session), "toolu_long")), message="the call's READ")
    process.terminate()
    process.communicate(timeout=60)
    lines = _ended(collector, session)
    _, finish = _of_tool(lines, "toolu_long")
    assert (finish["status"], finish["attrs"]) == ("FAILED", {"closed_by": "session end"})
    assert "still open when the session ended" in finish["error"]
    prompt = [line for line in lines if (line["action"], line["stage"]) == ("prompt", "FINISH")]
    assert [line["status"] for line in prompt] == ["FAILED"]
    end = lines[-1]
    assert (end["action"], end["status"], end["attrs"]["failed_because"]) == ("session", "FAILED", "cycles left open")
    assert _tree(collector, session)["status"] == "failed"


def test_why_on_the_root_names_the_failing_call_of_its_subagent(
    claude: ClaudeCode, api: FakeAnthropic, collector: Any
) -> None:
    """A subagent's Bash call fails, the subagent and its parent carry on: `gz-ia session why` on the
    parent finds that call in the child session, with the chain down to it."""
    task = {"description": "Check a dir", "prompt": "SUBFAIL-MARKER: list it", "subagent_type": "general-purpose"}
    api.script("RUN-SUBFAIL", Turn(tools=(ToolUse("Agent", task, "toolu_agent"),)), Turn(text="parent done"))
    api.script(
        "SUBFAIL-MARKER",
        Turn(tools=(ToolUse("Bash", {"command": "ls /nonexistent-dir", "description": "fail"}, "toolu_subfail"),)),
        Turn(text="Subagent done."),
    )
    session = _ran(claude.run("RUN-SUBFAIL: use a subagent"))
    lines = _ended(collector, session)
    _, finish = _of_tool(lines, "toolu_agent")
    child_id = finish["attrs"]["child_session_id"]
    answered = collector.gz_ia("session", "why", session, "--json")
    assert answered.returncode == 0, answered.stderr
    answer = json.loads(answered.stdout)
    failure = answer["first_failure"]
    assert (failure["session_id"], failure["action"]) == (child_id, "Bash")
    assert "No such file or directory" in failure["error"]
    assert answer["chain"] == [session, child_id]
    assert answer["after"]["duration_ms"] >= 0
    stored = next(line for line in collector.session_lines(child_id) if line.get("cycle") == "toolu_subfail")
    assert stored["action"] == "Bash"


def test_a_tool_call_still_running_is_listed_hung_and_no_more_once_it_returns(
    claude: ClaudeCode, api: FakeAnthropic, collector: Any, tmp_path: Path
) -> None:
    """While a Bash call waits (for a file the test makes once it has seen the call listed), its
    PreToolUse has no PostToolUse yet: `gz-ia sessions --hung --after 1s` lists it, PENDING; once it
    returns, the cycle is closed and the list is empty."""
    release = tmp_path / "release"
    command = f"sleep 1; while [ ! -e {release} ]; do sleep 0.1; done; echo woke"
    slow = ToolUse("Bash", {"command": command, "description": "wait"}, "toolu_sleep")
    api.script("RUN-SLEEP", Turn(tools=(slow,)), Turn(text="awake"))
    running = claude.start("RUN-SLEEP: wait a while")
    try:
        found: list[dict[str, Any]] = []

        def listed() -> bool:
            out = collector.gz_ia("sessions", "--hung", "--after", "1s", "--json").stdout
            found[:] = [json.loads(line) for line in out.splitlines()]
            return bool(found)

        wait_for(listed, timeout=30, interval=0.2, message="the running Bash listed hung")
        (session,) = found
        assert [(cycle["action"], cycle["stage"]) for cycle in session["hung"]] == [("Bash", "PENDING")]
        assert 1 <= session["hung"][0]["open_for_s"] < 30
        release.touch()
        _, stderr = running.communicate(timeout=120)
        assert running.returncode == 0, stderr
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    lines = _ended(collector, session["session_id"])
    assert ("Bash", "FINISH", "OK") in _cycles(lines)
    assert collector.gz_ia("sessions", "--hung", "--after", "0s", "--json").stdout == ""
