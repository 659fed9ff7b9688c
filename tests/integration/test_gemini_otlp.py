"""The real Gemini CLI with its telemetry pointed at the collector's OTLP receiver (settings
``telemetry``: ``otlpEndpoint``, ``otlpProtocol: http``, which it sends as OTLP JSON), against the
fake Gemini API: each ``gemini_cli.tool_call`` a cycle, each ``api_response`` a usage record with the
API's token counts, in the session the hooks would use (its session id); with gz-ia's hooks on as
well, the hooks' record of each call and model request is the one kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.fixtures.agent_runners import GEMINI_MODEL, assert_ran, gemini_home, gz_install, run_gemini, workspace
from tests.fixtures.model_apis.gemini import CANDIDATE_TOKENS, PROMPT_TOKENS, GeminiAPI
from tests.fixtures.model_apis.scripted import ToolCall, Turn, rounds

pytestmark = pytest.mark.agents

FAILING = "sh -c 'echo broken >&2; exit 3'"
CALLS = (ToolCall("run_shell_command", {"command": "echo hi"}), ToolCall("run_shell_command", {"command": FAILING}))


def _run(collector: Any, tmp_path: Path, *, hooks: bool) -> str:
    """Two shell calls (the second exits 3) and two model calls, telemetry on as docs/user-guide.md
    says, and gz-ia's hooks when ``hooks``: the session id."""
    endpoint = json.loads(collector.gz_ia("status", "--json", check=True).stdout)["endpoints"]["otlp"]
    with GeminiAPI(rounds(Turn(calls=CALLS), Turn(text="done"))) as api:
        home = gemini_home(tmp_path)
        if hooks:
            gz_install(collector, home, "gemini")
        settings_path = home / ".gemini" / "settings.json"
        settings = json.loads(settings_path.read_text())
        settings["telemetry"] = {"enabled": True, "target": "local", "otlpEndpoint": endpoint, "otlpProtocol": "http"}
        settings_path.write_text(json.dumps(settings))
        key = {"OTEL_EXPORTER_OTLP_HEADERS": f"x-gz-ia-key={collector.key}"}
        result = run_gemini(
            collector, home, "run the command", cwd=workspace(collector), api_base_url=api.base_url, env=key
        )
    assert_ran(result)
    return str(json.loads(result.stdout)["session_id"])


def _row(collector: Any, session: str) -> dict[str, Any]:
    rows = map(json.loads, collector.gz_ia("sessions", "--json", check=True).stdout.splitlines())
    return next((item for item in rows if item["session_id"] == session), {})


def test_gemini_telemetry_makes_tool_cycles_and_usage_records(collector: Any, tmp_path: Path) -> None:
    """Two shell calls and two model calls: a PENDING/FINISH cycle of run_shell_command each with its
    duration, the one whose command exits 3 FAILED with that code (Gemini's ``success`` only says the
    tool ran), and the two responses' tokens in the session's totals, model named."""
    session = _run(collector, tmp_path, hooks=False)
    wait_for(
        lambda: _row(collector, session).get("tokens", {}).get("input") == 2 * PROMPT_TOKENS,
        message="both responses' usage",
    )
    assert _row(collector, session)["tokens"]["output"] == 2 * CANDIDATE_TOKENS
    assert _row(collector, session)["model"] == GEMINI_MODEL
    lines = collector.session_lines(session)
    shell = [line for line in lines if line["action"] == "run_shell_command"]
    assert sorted((line["stage"], line["status"], line.get("error")) for line in shell) == [
        ("FINISH", "FAILED", "exit code 3"),
        ("FINISH", "OK", None),
        ("PENDING", "OK", None),
        ("PENDING", "OK", None),
    ]
    assert all(isinstance(line["duration_ms"], int) for line in shell if line["stage"] == "FINISH")
    assert {line["agent"] for line in lines} == {"gemini-cli"}
    assert collector.rejects() == []


def test_gemini_with_hooks_and_telemetry_each_call_is_stored_once(collector: Any, tmp_path: Path) -> None:
    """Hooks and telemetry both on: Gemini's records carry no call id to join on, and its hooks
    already record every tool call (its exit code) and every model request (its tokens), so the
    telemetry's copies of a session its hooks opened are joined to them, not stored again."""
    session = _run(collector, tmp_path, hooks=True)
    joined = 'gzia_otlp_records_total{outcome="joined",signal="logs"} 4.0'
    wait_for(lambda: joined in collector.metrics(), message="two tool calls and two responses joined")
    lines = collector.session_lines(session)
    shell = [line for line in lines if line["action"] == "run_shell_command" and line["stage"] == "FINISH"]
    assert sorted((line["status"], line.get("error")) for line in shell) == [("FAILED", "exit code 3"), ("OK", None)]
    assert [line["action"] for line in lines if line["action"].startswith("model")] == ["model"] * 4
    assert _row(collector, session)["failures"] == 1
    assert collector.rejects() == []
