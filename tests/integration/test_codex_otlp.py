"""The real Codex with its ``[otel]`` exporter pointed at the collector's OTLP receiver, against the
fake Responses API: its ``codex.tool_result`` events are the tool cycles of the thread's session
without hooks, and are joined to the hooks' cycles (one per call) with them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.fixtures.agent_runners import assert_ran, codex_home, gz_install, run_codex, workspace
from tests.fixtures.model_apis.openai_responses import ResponsesAPI
from tests.fixtures.model_apis.scripted import ToolCall, Turn, rounds

pytestmark = pytest.mark.agents


def _thread_id(stdout: str) -> str:
    for line in stdout.splitlines():
        event = json.loads(line)
        if event.get("type") == "thread.started":
            return str(event["thread_id"])
    raise AssertionError(f"no thread.started in {stdout!r}")


def _with_otel(home: Path, collector: Any, protocol: str) -> None:
    endpoint = json.loads(collector.gz_ia("status", "--json", check=True).stdout)["endpoints"]["otlp"]
    config = home / ".codex" / "config.toml"
    config.write_text(
        config.read_text()
        + f'\n[otel]\nexporter = {{ otlp-http = {{ endpoint = "{endpoint}/v1/logs", protocol = "{protocol}", '
        f'headers = {{ "x-gz-ia-key" = "{collector.key}" }} }} }}\n'
    )


def _tool_lines(collector: Any, session: str, call_id: str) -> list[dict[str, Any]]:
    return [line for line in collector.session_lines(session) if line.get("cycle") == call_id]


@pytest.mark.parametrize("hooks", [False, True])
def test_codex_tool_results_are_cycles_once(collector: Any, tmp_path: Path, hooks: bool) -> None:
    """Two commands, one exiting 3: a cycle each, the failing one FAILED, named ``Bash`` as the hooks
    name Codex's shell tool, in the thread's session; with gz-ia's hooks on too, still one cycle per
    call (the telemetry's are joined)."""
    calls = (ToolCall("exec_command", {"cmd": "echo hello"}), ToolCall("exec_command", {"cmd": "sh -c 'exit 3'"}))
    with ResponsesAPI(rounds(Turn(calls=calls), Turn(text="done"))) as api:
        home = codex_home(tmp_path, api.base_url)
        _with_otel(home, collector, "binary")
        if hooks:
            gz_install(collector, home, "codex")  # the default command: this gz-ia, by absolute path
        result = run_codex(collector, home, "run the commands", cwd=workspace(collector))
    assert_ran(result)
    session = _thread_id(result.stdout)
    wait_for(lambda: len(_tool_lines(collector, session, "call_1_1")) >= 2, message="the failing call's cycle")
    if hooks:
        joined = 'gzia_otlp_records_total{outcome="joined",signal="logs"} 2.0'
        wait_for(lambda: joined in collector.metrics(), message="both tool results joined")
    for call_id in ("call_1_0", "call_1_1"):
        lines = _tool_lines(collector, session, call_id)
        assert [line["stage"] for line in lines] == ["PENDING", "FINISH"], lines
    assert _tool_lines(collector, session, "call_1_1")[1]["status"] == "FAILED"
    assert _tool_lines(collector, session, "call_1_0")[1]["status"] == "OK"
    assert {line["agent"] for line in collector.session_lines(session)} == {"codex"}
    # Named as the hooks name it, whichever record holds the call.
    assert {line["action"] for line in _tool_lines(collector, session, "call_1_0")} == {"Bash"}

    def input_tokens() -> int:
        rows = map(json.loads, collector.gz_ia("sessions", "--json", check=True).stdout.splitlines())
        return next((row["tokens"]["input"] for row in rows if row["session_id"] == session), 0)

    # Each response.completed sse_event's token counts: the fake Responses API reports 100 input tokens.
    wait_for(lambda: input_tokens() == 200, message="the two responses' usage")
    if hooks:
        # The hook read the same turn's usage (200 input tokens): both doors are stored, counted once.
        def both_doors() -> bool:
            lines = collector.session_lines(session)
            hook = [line for line in lines if (line.get("attrs") or {}).get("gz-ia.usage_from") == "hook"]
            telemetry = [line for line in lines if line["action"].startswith("model ") and line["stage"] == "FINISH"]
            return len(hook) == 1 and len(telemetry) == 2

        wait_for(both_doors, message="the hook's reading and both responses' records")
        assert input_tokens() == 200
