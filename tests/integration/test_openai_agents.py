"""The OpenAI Agents SDK processor: a real Agent run by the SDK's Runner, on a model the test scripts
(no network, no key), in a real child process logging to a real collector."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.conftest import wait_for

AGENT_PROGRAM = '''
import json
from collections.abc import AsyncIterator
from typing import Any

import agents
from agents import Agent, ModelResponse, Runner, Usage, function_tool
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from gz_ia.client.integrations.openai_agents import GzIaProcessor


def call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", name=name, arguments=json.dumps(arguments), call_id=call_id, id=f"fc_{call_id}"
    )


def say(text: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return ResponseOutputMessage(type="message", id="msg_1", role="assistant", status="completed", content=content)


class ScriptedModel(Model):
    """Answers each call with the next scripted output: the SDK's Model interface, offline."""

    def __init__(self, steps: list[list[Any]]) -> None:
        self.steps = steps

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=self.steps.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@function_tool
def fetch(url: str) -> str:
    """Fetch a page."""
    raise RuntimeError("connection refused")


agents.set_trace_processors([GzIaProcessor()])
helper = Agent(
    name="helper", instructions="-", tools=[add],
    model=ScriptedModel([[call("add", {"a": 2, "b": 3}, "c3")], [say("5")]]),
)
planner = Agent(
    name="planner", instructions="-", tools=[add, fetch], handoffs=[helper],
    model=ScriptedModel([
        [call("add", {"a": 1, "b": 2}, "c1"), call("fetch", {"url": "https://example.invalid"}, "c2")],
        [call("transfer_to_helper", {}, "c4")],
    ]),
)
result = Runner.run_sync(planner, "add things")
assert result.final_output == "5", result.final_output
'''


def _cycles(lines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(action, stage, status), in order."""
    return [(line["action"], line["stage"], line["status"]) for line in lines]


def _run_agents(collector: Any, program: str, *, sessions: int) -> None:
    """Run ``program`` against the collector and wait for the ``sessions`` it makes."""
    result = subprocess.run(
        [sys.executable, "-c", program], env=collector.env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    wait_for(lambda: len(collector.all_sessions()) == sessions, message=f"{sessions} sessions")


def test_a_run_with_tools_and_a_handoff_becomes_a_session_tree(collector: Any) -> None:
    """Trace -> session; agent spans -> subagent sessions (the handoff's target under its source);
    tool spans -> cycles with durations, the failing one FAILED with its error."""
    _run_agents(collector, AGENT_PROGRAM, sessions=3)
    sessions = collector.all_sessions()
    (trace_id,) = [sid for sid in sessions if sid.startswith("trace_")]
    planner_id, helper_id = sorted(
        (sid for sid in sessions if sid != trace_id), key=lambda sid: sessions[sid][0]["agent"] != "planner"
    )
    assert _cycles(sessions[trace_id]) == [
        ("workflow Agent workflow", "READ", "OK"),
        ("workflow Agent workflow", "FINISH", "OK"),
    ]
    planner = sessions[planner_id]
    assert {line["parent_session_id"] for line in planner} == {trace_id}
    assert {line["agent"] for line in planner} == {"planner"}
    cycles = _cycles(planner)
    assert cycles[0] == ("agent planner", "READ", "OK")
    assert cycles[-1] == ("agent planner", "FINISH", "OK")
    assert sorted(cycles[1:5]) == sorted(
        [("add", "PENDING", "OK"), ("fetch", "PENDING", "OK"), ("add", "FINISH", "OK"), ("fetch", "FINISH", "FAILED")]
    )
    assert cycles[5:7] == [("handoff to helper", "READ", "OK"), ("handoff to helper", "FINISH", "OK")]
    tool_cycles = {line["cycle"] for line in planner if line["action"] in ("add", "fetch")}
    assert len(tool_cycles) == 2, tool_cycles  # each tool call's span id, PENDING and FINISH alike
    (failed,) = [line for line in planner if line["status"] == "FAILED"]
    assert "Error running tool" in failed["error"]
    assert failed["attrs"]["tool"] == "fetch"
    assert "example.invalid" not in json.dumps(planner)  # tool input is never copied
    assert all("duration_ms" in line for line in planner if line["stage"] == "FINISH")
    helper = sessions[helper_id]
    assert {line["parent_session_id"] for line in helper} == {planner_id}
    assert _cycles(helper) == [
        ("agent helper", "READ", "OK"),
        ("add", "PENDING", "OK"),
        ("add", "FINISH", "OK"),
        ("agent helper", "FINISH", "OK"),
    ]
    tree = json.loads(collector.gz_ia("session", "tree", trace_id, "--json", check=True).stdout)
    assert [child["session_id"] for child in tree["children"]] == [planner_id]
    assert [child["session_id"] for child in tree["children"][0]["children"]] == [helper_id]
    assert collector.rejects() == []


USAGE_PROGRAM = '''
from collections.abc import AsyncIterator
from typing import Any

import agents
from agents import Agent, ModelResponse, Runner, Usage, generation_span
from agents.models.interface import Model
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from gz_ia.client.integrations.openai_agents import GzIaProcessor


class MeteredModel(Model):
    """Answers at once and reports its usage in a generation span, as a model implementation does."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        with generation_span(model="scripted-1") as span:
            span.span_data.usage = {
                "input_tokens": 120, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 100},
            }
        content = [ResponseOutputText(type="output_text", text="done", annotations=[])]
        message = ResponseOutputMessage(type="message", id="m", role="assistant", status="completed", content=content)
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


agents.set_trace_processors([GzIaProcessor()])
result = Runner.run_sync(Agent(name="solo", instructions="-", model=MeteredModel()), "hi")
assert result.final_output == "done", result.final_output
'''


def test_a_model_span_with_usage_becomes_a_usage_record(collector: Any) -> None:
    """A generation span's usage and model become a ``model <name>`` cycle whose FINISH carries the
    tokens, counted in its agent session's totals and rolled up into the trace's session."""
    _run_agents(collector, USAGE_PROGRAM, sessions=2)
    sessions = collector.all_sessions()
    (trace_id,) = [sid for sid in sessions if sid.startswith("trace_")]
    (agent_id,) = [sid for sid in sessions if sid != trace_id]
    wait_for(lambda: len(collector.session_lines(agent_id)) == 4, message="the agent session's four events")
    model = [line for line in collector.session_lines(agent_id) if line["action"] == "model scripted-1"]
    assert [line["stage"] for line in model] == ["READ", "FINISH"]
    assert model[1]["attrs"] == {
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.request.model": "scripted-1",
    }
    rows = {
        row["session_id"]: row
        for row in map(json.loads, collector.gz_ia("sessions", "--json", check=True).stdout.splitlines())
    }
    assert rows[agent_id]["tokens"]["total"] == 227
    assert rows[agent_id]["model"] == "scripted-1"
    assert rows[trace_id]["tokens"]["total"] == 0
    assert rows[trace_id]["tree_tokens"]["total"] == 227
