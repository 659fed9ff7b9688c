"""The real Claude Code with its OpenTelemetry on, exporting its log events to the collector's OTLP
receiver, against the fake Anthropic API (which reports usage): each API request a usage record with
model and tokens in the hooks' session; with gz-ia's hooks on too, one cycle per tool call, never two;
with telemetry alone, the tool results are the cycles."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from tests.conftest import wait_for
from tests.fixtures.backends import BackendServer, _phoenix, http_json
from tests.fixtures.claude_run import ClaudeCode
from tests.fixtures.model_apis.anthropic import FakeAnthropic, ToolUse, Turn

from gz_ia.client.usage import recorded_usage

pytestmark = pytest.mark.agents
__all__ = ["_phoenix"]  # the session fixture, imported to be found here
CLI = "from gz_ia.collector.cli import main; main()"


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


def export(collector: Any, state_dir: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One `gz-ia export otel` run to its end."""
    command = [sys.executable, "-c", CLI, "export", "otel", "--state-dir", str(state_dir), "--session-idle", "0",
               "--metrics-address", "off", *args]  # fmt: skip
    return subprocess.run(
        command, env={**collector.env, **env}, capture_output=True, text=True, timeout=300, check=False
    )


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


@pytest.mark.xdist_group("phoenix")
def test_one_session_one_truth_in_the_cli_the_page_mcp_and_phoenix(
    collector: Any, api: FakeAnthropic, short_tmp: Path, phoenix: BackendServer
) -> None:
    """Hooks and telemetry on, a subagent that runs Bash. Claude Code's tool_result for the
    subagent's call carries the main session's id: it joins the cycle the hooks logged in the
    subagent's session (the main session holds no copy). Its api_request records of the subagent's
    model requests land in the subagent's session too. And the session's tokens and cost, its own
    and rolled up over the subagent, are the same in ``gz-ia sessions``, the page's API, MCP's
    ``list_sessions`` and Phoenix (after ``gz-ia export otel``), and equal to what the API served."""
    claude = ClaudeCode(short_tmp / "home", collector.workspace, api, collector.env)
    claude.install_hooks()
    task = {"description": "Run a check", "prompt": "SUB-OTLP-MARKER: run echo", "subagent_type": "general-purpose"}
    api.script("RUN-SUB-OTLP", Turn(tools=(ToolUse("Agent", task, "toolu_agent"),)), Turn(text="parent done"))
    api.script(
        "SUB-OTLP-MARKER",
        Turn(tools=(ToolUse("Bash", {"command": "echo from-subagent"}, "toolu_subcall"),), input_tokens=700),
        Turn(text="Subagent done.", input_tokens=900, output_tokens=70),
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
    child = next(name for name in stored if name.startswith(f"{session}."))
    assert {name: stages for name, stages in stored.items() if stages} == {child: ["PENDING", "FINISH"]}

    # Every model request the fake API answered is one usage record, the subagent's in its session.
    served = [request for request in api.requests if request.get("path", "").startswith("/v1/messages")]

    def records() -> dict[str, list[int]]:
        return {
            name: [line["attrs"]["gen_ai.usage.input_tokens"] for line in lines if line["action"].startswith("model ")
                   and line["stage"] == "FINISH"]
            for name, lines in collector.all_sessions().items() if name.startswith(session)
        }  # fmt: skip

    wait_for(lambda: sum(map(len, records().values())) == len(served), message="a usage record per request")
    assert sorted(records()[child]) == [700, 900]

    # gz-ia sessions: the session's own usage and its tree's.
    rows = {
        row["session_id"]: row
        for row in map(json.loads, collector.gz_ia("sessions", "--json", check=True).stdout.splitlines())
    }
    cli_tree = (rows[session]["tree_tokens"]["total"], round(rows[session]["tree_cost_usd"], 6))
    cli_child = (rows[child]["tokens"]["total"], round(rows[child]["cost_usd"], 6))
    assert rows[child]["tokens"]["input"] == 1600 and rows[child]["tokens"]["output"] == 20 + 70
    model_lines = [
        line for lines in collector.all_sessions().values() for line in lines if line["action"].startswith("model ")
    ]
    served_tokens = sum(sum(used[0]) for line in model_lines if (used := recorded_usage(line.get("attrs"))))
    assert cli_tree[0] == served_tokens and cli_tree[1] > 0

    # The page's API: the same numbers, its own and rolled up.
    address = collector.gz_ia("ui", "--no-browser", check=True).stdout.strip()
    key = parse_qs(urlsplit(address).query)["key"][0]
    page = http_json(f"{collector.http_url}/ui/api/sessions?key={key}&root={collector.root}&limit=200")
    api_rows = {row["session_id"]: row for row in page["sessions"]}
    assert (api_rows[session]["tree_tokens"]["total"], api_rows[session]["tree_cost_usd"]) == cli_tree
    assert (api_rows[child]["tokens"], api_rows[child]["cost_usd"]) == cli_child

    # The page's cycles: the one model, each cycle with its usage; they add up to the session's.
    tree = http_json(f"{collector.http_url}/ui/api/cycles?key={key}&root={collector.root}&session={session}")
    by_node = {node["session_id"]: node for node in tree["nodes"]}
    assert [(node["session_id"], node["depth"]) for node in tree["nodes"]] == [(session, 0), (child, 1)]
    for name, node in by_node.items():
        assert sum(cycle["tokens"]["total"] for cycle in node["cycles"]) == node["tokens_by_kind"]["total"], name
        assert round(sum(cycle["cost_usd"] for cycle in node["cycles"]), 6) == round(node["cost_usd"], 6), name
    assert [cycle["status"] for cycle in by_node[child]["cycles"] if cycle["cycle"] == "toolu_subcall"] == ["OK"]
    starts = [cycle["start"] for cycle in by_node[session]["cycles"]]
    assert starts == sorted(starts)  # in time order, whatever order the doors delivered in

    # MCP's list_sessions: tokens and cost of each session with its subagents'.
    listing = asyncio.run(_mcp_sessions(collector))
    mcp_rows = {row["session_id"]: row for row in listing["sessions"]}
    assert (mcp_rows[session]["tokens"], round(mcp_rows[session]["cost_usd"], 6)) == cli_tree

    # Phoenix, after gz-ia export otel: its session's tokens and cost are the tree's.
    project = f"gz-ia-{short_tmp.name}"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.url, "OTEL_EXPORTER_OTLP_TIMEOUT": "30"}
    done = export(collector, short_tmp / "export-state", "--once", "--project", project, "--signals", "traces", env=env)
    assert done.returncode == 0, done.stderr

    def phoenix_totals() -> tuple[float, float] | None:
        found = [s for s in _phoenix_usage(phoenix, project) if s["sessionId"] == session]
        return (found[0]["tokenUsage"]["total"], found[0]["costSummary"]["total"]["cost"]) if found else None

    wait_for(lambda: (phoenix_totals() or (0, 0))[0] == cli_tree[0], message="Phoenix's session tokens")
    tokens, cost = phoenix_totals() or (0, 0.0)
    assert (tokens, round(cost or 0.0, 6)) == cli_tree
    # And the same cycles: a span for each cycle of the model, a model call an LLM span.
    spans = [span for span in _phoenix_spans(phoenix, project) if span["span_kind"] != "AGENT"]
    assert len(spans) == sum(len(node["cycles"]) for node in tree["nodes"])
    llm = sorted(span["attributes"]["gz_ia.session.id"] for span in spans if span["span_kind"] == "LLM")
    assert llm == sorted(
        name for name, node in by_node.items() for cycle in node["cycles"] if cycle["action"].startswith("model ")
    )


async def _mcp_sessions(collector: Any) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, args=["-c", CLI, "mcp"], env=collector.env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("list_sessions", {"limit": 50})
        assert not result.is_error and isinstance(result.structured_content, dict), result
        return result.structured_content


def _phoenix_spans(phoenix: BackendServer, project: str) -> list[dict[str, Any]]:
    """Every span Phoenix holds in ``project`` (its REST API, one page)."""
    return list(http_json(f"{phoenix.url}/v1/projects/{project}/spans?limit=1000")["data"])


def _phoenix_usage(phoenix: BackendServer, project: str) -> list[dict[str, Any]]:
    """Phoenix's Sessions tab of ``project``: each session's token usage and cost (GraphQL)."""
    query = """{ projects { edges { node { name sessions(first: 100) { edges { node {
        sessionId tokenUsage { total } costSummary { total { cost } } } } } } } } }"""
    answer = http_json(f"{phoenix.url}/graphql", {"query": query})
    assert "errors" not in answer, answer
    for edge in answer["data"]["projects"]["edges"]:
        if edge["node"]["name"] == project:
            return [node["node"] for node in edge["node"]["sessions"]["edges"]]
    return []


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
