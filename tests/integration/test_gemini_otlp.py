"""The real Gemini CLI with its telemetry pointed at the collector's OTLP receiver (settings
``telemetry``: ``otlpEndpoint``, ``otlpProtocol: http``, which it sends as OTLP JSON), against the
fake Gemini API: each ``gemini_cli.tool_call`` a cycle, each ``api_response`` a usage record with the
API's token counts, in the session the hooks would use (its session id)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.fixtures.agent_runners import GEMINI_MODEL, assert_ran, gemini_home, run_gemini, workspace
from tests.fixtures.model_apis.gemini import CANDIDATE_TOKENS, PROMPT_TOKENS, GeminiAPI
from tests.fixtures.model_apis.scripted import ToolCall, Turn, rounds

pytestmark = pytest.mark.agents


def test_gemini_telemetry_makes_tool_cycles_and_usage_records(collector: Any, tmp_path: Path) -> None:
    """One shell call and two model calls: a PENDING/FINISH cycle of run_shell_command with its
    duration, and the two responses' tokens in the session's totals, model named."""
    endpoint = json.loads(collector.gz_ia("status", "--json", check=True).stdout)["endpoints"]["otlp"]
    calls = (ToolCall("run_shell_command", {"command": "echo hi"}),)
    with GeminiAPI(rounds(Turn(calls=calls), Turn(text="done"))) as api:
        home = gemini_home(tmp_path)
        settings_path = home / ".gemini" / "settings.json"
        settings = json.loads(settings_path.read_text())
        settings["telemetry"] = {"enabled": True, "target": "local", "otlpEndpoint": endpoint, "otlpProtocol": "http"}
        settings_path.write_text(json.dumps(settings))
        key = {"OTEL_EXPORTER_OTLP_HEADERS": f"x-gz-ia-key={collector.key}"}  # as docs/user-guide.md says
        result = run_gemini(
            collector, home, "run the command", cwd=workspace(collector), api_base_url=api.base_url, env=key
        )
    assert_ran(result)
    session = str(json.loads(result.stdout)["session_id"])

    def row() -> dict[str, Any]:
        rows = map(json.loads, collector.gz_ia("sessions", "--json", check=True).stdout.splitlines())
        return next((item for item in rows if item["session_id"] == session), {})

    wait_for(lambda: row().get("tokens", {}).get("input") == 2 * PROMPT_TOKENS, message="both responses' usage")
    assert row()["tokens"]["output"] == 2 * CANDIDATE_TOKENS
    assert row()["model"] == GEMINI_MODEL
    lines = collector.session_lines(session)
    shell = [line for line in lines if line["action"] == "run_shell_command"]
    assert [(line["stage"], line["status"]) for line in shell] == [("PENDING", "OK"), ("FINISH", "OK")]
    assert isinstance(shell[1]["duration_ms"], int)
    assert {line["agent"] for line in lines} == {"gemini-cli"}
    assert collector.rejects() == []
