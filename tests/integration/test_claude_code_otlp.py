"""The real Claude Code with its OpenTelemetry on, exporting its log events to the collector's OTLP
receiver, against the fake Anthropic API (which reports usage): each API request a usage record with
model and tokens in the hooks' session; with gz-ia's hooks on too, one cycle per tool call, never two;
with telemetry alone, the tool results are the cycles."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.fixtures.claude_run import ClaudeCode
from tests.fixtures.model_apis.anthropic import FakeAnthropic, ToolUse, Turn

pytestmark = pytest.mark.agents


@pytest.fixture(name="api")
def _api() -> Iterator[FakeAnthropic]:
    api = FakeAnthropic()
    yield api
    api.close()


def _telemetry(collector: Any, protocol: str) -> dict[str, str]:
    """Claude Code's documented switches, pointed at the collector's ``endpoints.otlp``."""
    endpoint = json.loads(collector.gz_ia("status", "--json", check=True).stdout)["endpoints"]["otlp"]
    return {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_LOGS_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-gz-ia-key={collector.key},x-gz-ia-root={collector.root}",
        "OTEL_LOGS_EXPORT_INTERVAL": "500",
    }


def _script(api: FakeAnthropic, workspace: Path, marker: str) -> None:
    (workspace / "notes.txt").write_text("a needle in here\n")
    api.script(
        marker,
        Turn(
            tools=(
                ToolUse("Read", {"file_path": str(workspace / "notes.txt")}, "toolu_read1"),
                ToolUse("Bash", {"command": "ls /nonexistent-dir", "description": "fail"}, "toolu_fail"),
            ),
            input_tokens=1200,
            output_tokens=30,
        ),
        Turn(text="done", input_tokens=1500, output_tokens=10),
    )


def _usage(collector: Any, session_id: str) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {
        row["session_id"]: row
        for row in map(json.loads, collector.gz_ia("sessions", "--json", check=True).stdout.splitlines())
    }
    return rows.get(session_id, {})


def _tool_lines(collector: Any, session_id: str, tool_use_id: str) -> list[dict[str, Any]]:
    return [line for line in collector.session_lines(session_id) if line.get("cycle") == tool_use_id]


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_hooks_and_telemetry_make_one_cycle_per_call_and_usage_per_request(
    collector: Any, api: FakeAnthropic, short_tmp: Path, protocol: str
) -> None:
    """With gz-ia's hooks and Claude Code's telemetry both on: the hooks' cycle of each tool call is
    the only one (the telemetry's tool_result is joined to it by tool_use_id), and each API request
    is a usage record (model, tokens, cost) in the same session, counted in its totals."""
    claude = ClaudeCode(short_tmp / "home", collector.workspace, api, collector.env)
    claude.install_hooks()
    _script(api, collector.workspace, "BOTH-ON")
    result = claude.run("BOTH-ON: read and run", env=_telemetry(collector, protocol))
    assert result.returncode == 0, result.stderr
    session = result.session_id
    wait_for(lambda: _usage(collector, session).get("tokens", {}).get("output", 0) >= 40, message="the usage records")
    for tool_use_id in ("toolu_read1", "toolu_fail"):
        lines = _tool_lines(collector, session, tool_use_id)
        assert [line["stage"] for line in lines] == [lines[0]["stage"], "FINISH"], lines
    assert _tool_lines(collector, session, "toolu_fail")[1]["status"] == "FAILED"
    usage = _usage(collector, session)
    model = usage["model"]  # the model Claude Code asked for (the fake API answers as MODEL)
    assert model.startswith("claude-")
    assert (usage["tokens"]["input"], usage["tokens"]["output"]) == (2700, 40)
    records = [line for line in collector.session_lines(session) if line["action"] == f"model {model}"]
    assert {line["agent"] for line in records} == {"claude-code"}
    assert all("gz-ia.cost_usd" in line["attrs"] for line in records if line["stage"] == "FINISH")
    wait_for(lambda: 'gzia_otlp_records_total{outcome="joined",signal="logs"} 2.0' in collector.metrics())
    assert collector.rejects() == []


def test_telemetry_finds_the_workspace_its_hooks_use_with_the_documented_setup(
    make_collector: Any, api: FakeAnthropic, short_tmp: Path
) -> None:
    """The collector started as a service starts it (no GZ_IA_ROOT), Claude Code in a workspace with
    gz-ia's hooks as installed and its telemetry set up exactly as docs/user-guide.md says (the key,
    no root header): the telemetry's usage and joins land in the session the hooks made in the
    workspace's root, and no other root holds any of that session."""
    collector = make_collector(env={"GZ_IA_ROOT": ""})
    as_user = {**collector.env, "GZ_IA_ROOT": ""}
    claude = ClaudeCode(short_tmp / "home", collector.workspace, api, as_user)
    claude.install_hooks()
    _script(api, collector.workspace, "AS-DOCUMENTED")
    telemetry = _telemetry(collector, "http/protobuf")
    telemetry["OTEL_EXPORTER_OTLP_HEADERS"] = f"x-gz-ia-key={collector.key}"  # the docs' snippet
    result = claude.run("AS-DOCUMENTED: read and run", env=telemetry)
    assert result.returncode == 0, result.stderr
    session = result.session_id
    wait_for(lambda: _usage(collector, session).get("tokens", {}).get("output", 0) >= 40, message="the usage records")
    assert (_usage(collector, session)["tokens"]["input"], _usage(collector, session)["tokens"]["output"]) == (2700, 40)
    for tool_use_id in ("toolu_read1", "toolu_fail"):
        lines = _tool_lines(collector, session, tool_use_id)
        assert [line["stage"] for line in lines] == [lines[0]["stage"], "FINISH"], lines
    elsewhere = [path for path in collector.base.rglob(f"*{session}*") if collector.root not in path.parents]
    assert elsewhere == []


def test_a_subagents_call_is_stored_once_in_the_subagents_session(
    collector: Any, api: FakeAnthropic, short_tmp: Path
) -> None:
    """Hooks and telemetry on, a subagent that runs Bash: Claude Code's tool_result for the subagent's
    call carries the main session's id; it joins the cycle the hooks logged in the subagent's
    session, and the main session holds no copy of it."""
    claude = ClaudeCode(short_tmp / "home", collector.workspace, api, collector.env)
    claude.install_hooks()
    task = {"description": "Run a check", "prompt": "SUB-OTLP-MARKER: run echo", "subagent_type": "general-purpose"}
    api.script("RUN-SUB-OTLP", Turn(tools=(ToolUse("Agent", task, "toolu_agent"),)), Turn(text="parent done"))
    api.script(
        "SUB-OTLP-MARKER",
        Turn(tools=(ToolUse("Bash", {"command": "echo from-subagent"}, "toolu_subcall"),)),
        Turn(text="Subagent done."),
    )
    result = claude.run("RUN-SUB-OTLP: use a subagent", env=_telemetry(collector, "http/protobuf"))
    assert result.returncode == 0, result.stderr
    session = result.session_id
    wait_for(
        lambda: 'gzia_otlp_records_total{outcome="joined",signal="logs"} 2.0' in collector.metrics(),
        message="both tool results joined to the hooks' cycles",
    )
    stored = {
        name: [line["stage"] for line in lines if line.get("cycle") == "toolu_subcall"]
        for name, lines in collector.all_sessions().items()
        if name.startswith(session)
    }
    assert {name: stages for name, stages in stored.items() if stages} == {
        next(name for name in stored if name.startswith(f"{session}.")): ["PENDING", "FINISH"]
    }


def test_telemetry_alone_makes_the_tool_cycles(collector: Any, api: FakeAnthropic, short_tmp: Path) -> None:
    """Without hooks, Claude Code's tool_result events are the cycles: READ for Read, PENDING for
    Bash, FINISH with its duration_ms, FAILED for the failing call; in the session the hooks would use."""
    claude = ClaudeCode(short_tmp / "home", collector.workspace, api, collector.env)
    _script(api, collector.workspace, "TELEMETRY-ONLY")
    result = claude.run("TELEMETRY-ONLY: read and run", env=_telemetry(collector, "http/protobuf"))
    assert result.returncode == 0, result.stderr
    session = result.session_id
    wait_for(lambda: len(_tool_lines(collector, session, "toolu_fail")) == 2, message="the tool cycles")
    read = _tool_lines(collector, session, "toolu_read1")
    assert [(line["action"], line["stage"], line["status"]) for line in read] == [
        ("Read", "READ", "OK"),
        ("Read", "FINISH", "OK"),
    ]
    assert isinstance(read[1]["duration_ms"], int)
    failed = _tool_lines(collector, session, "toolu_fail")
    assert [(line["stage"], line["status"]) for line in failed] == [("PENDING", "OK"), ("FINISH", "FAILED")]
    assert failed[1]["error"]
    wait_for(lambda: _usage(collector, session).get("tokens", {}).get("output", 0) >= 40, message="the usage records")
    usage = _usage(collector, session)
    assert (usage["tokens"]["input"], usage["tokens"]["output"]) == (2700, 40)  # the fake API's usage
    assert usage["cost_usd"] > 0
