"""`gz-ia mcp`: the MCP server driven by the official SDK's own client over stdio, against a real collector."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from gz_ia.collector.mcp.server import TOOLS

CLI = "from gz_ia.collector.cli import main; main()"


@asynccontextmanager
async def mcp_session(collector: Any, env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """Start `gz-ia mcp` talking to ``collector`` (or in ``env``) and yield an initialised SDK session."""
    params = StdioServerParameters(command=sys.executable, args=["-c", CLI, "mcp"], env=env or collector.env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed and return its structured result."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


READING = (
    "read_session",
    "get_event",
    "events_since",
    "failed_events",
    "list_sessions",
    "session_summary",
    "why_failed",
    "hung_actions",
)


async def test_tools_are_listed_with_typed_schemas_and_annotations(collector: Any) -> None:
    """Every tool: each parameter described, stage and status as enums, an output schema, annotations; the version."""
    params = StdioServerParameters(command=sys.executable, args=["-c", CLI, "mcp"], env=collector.env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        initialized = await session.initialize()
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert initialized.server_info.name == "gz-ia"
    assert initialized.server_info.version == importlib.metadata.version("gz-ia-collector")
    assert set(tools) == {"log_event", *READING} == set(TOOLS)  # TOOLS: what the guide must document
    for name, tool in tools.items():
        for parameter, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), f"{name}.{parameter} is not described"
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
        assert tool.annotations is not None, name
        assert tool.title, name
    log_event = tools["log_event"]
    assert {"session_id", "action", "stage", "agent"} <= set(log_event.input_schema["required"])
    assert log_event.input_schema["properties"]["stage"]["enum"] == ["READ", "PENDING", "FINISH"]
    assert log_event.input_schema["properties"]["status"]["enum"] == ["OK", "FAILED"]
    assert log_event.annotations is not None
    assert log_event.annotations.read_only_hint is False
    assert log_event.annotations.destructive_hint is False
    assert log_event.annotations.idempotent_hint is False
    assert {"accepted", "session_id"} <= set(log_event.output_schema["required"])  # type: ignore[index]
    for name in READING:
        annotations = tools[name].annotations
        assert annotations is not None and annotations.read_only_hint is True, name
    assert "cursor" in tools["read_session"].input_schema["properties"]
    assert tools["get_event"].input_schema["properties"]["seq"]["minimum"] == 1
    event = tools["get_event"].output_schema["$defs"]["Event"]  # type: ignore[index]
    assert event["properties"]["stage"]["enum"] == ["READ", "PENDING", "FINISH"]
    assert {"timestamp", "session_id", "action", "stage", "status", "agent", "seq"} <= set(event["required"])


async def test_failed_events_across_sessions_and_one_event_by_seq(collector: Any) -> None:
    """failed_events finds FAILED events in every session (since a time); get_event returns one event by seq."""
    client = collector.client()
    client.log(session_id="fa", action="build", stage="PENDING", agent="claude")
    client.log(session_id="fa", action="build", stage="FINISH", agent="claude", status="FAILED", error="early")
    assert client.flush(10)
    stored = collector.session_lines("fa")
    client.log(session_id="fb", parent_session_id="fa", action="test", stage="PENDING", agent="agy")
    client.log(session_id="fb", action="test", stage="FINISH", agent="agy", status="FAILED", error="late")
    client.log(session_id="fc", action="ok", stage="READ", agent="agy")
    client.log(session_id="fc", action="ok", stage="FINISH", agent="agy")
    assert client.flush(10)
    client.close()
    later = collector.session_lines("fb")[1]["timestamp"]
    async with mcp_session(collector) as session:
        every = await call(session, "failed_events")
        since = await call(session, "failed_events", since=later)
        capped = await call(session, "failed_events", limit=1)
        one = await call(session, "get_event", session_id="fa", seq=2)
        missing = await session.call_tool("get_event", {"session_id": "fa", "seq": 9})
        bad_stage = await session.call_tool(
            "log_event", {"session_id": "fa", "action": "a", "stage": "DONE", "agent": "claude"}
        )
    assert [(e["session_id"], e["error"]) for e in every["events"]] == [("fa", "early"), ("fb", "late")]
    assert every["more"] is False
    assert [(e["session_id"], e["seq"]) for e in since["events"]] == [("fb", 2)]
    assert [e["error"] for e in capped["events"]] == ["early"]
    assert capped["more"] is True
    assert one["event"] == {key: value for key, value in stored[1].items() if key != "delivery"}
    assert missing.is_error
    assert "no event 9" in str(missing.content)
    assert bad_stage.is_error  # the enum refuses it before anything is sent
    assert [line["stage"] for line in collector.session_lines("fa")] == ["PENDING", "FINISH"]


@pytest.mark.parametrize("via", ["stream", "files"])
async def test_events_since_waits_for_the_next_event(collector: Any, via: str, short_tmp: Path) -> None:
    """With wait_seconds, events_since returns the event written while it waited: woken by the
    collector's stream when it runs, by the files otherwise; the same answer either way."""
    client = collector.client()
    client.log(session_id="w1", action="a", stage="READ", agent="claude")
    assert client.flush(10)
    env = collector.env if via == "stream" else {**collector.env, "GZ_IA_SOCKET": str(short_tmp / "nothing.sock")}
    async with mcp_session(collector, env) as session:
        first = await call(session, "events_since", session_ids=["w1"])

        def later() -> None:
            time.sleep(0.5)
            client.log(session_id="w1", action="a", stage="FINISH", agent="claude")
            client.flush(10)

        writer = threading.Thread(target=later)
        writer.start()
        waited = await call(session, "events_since", cursor=first["cursor"], session_ids=["w1"], wait_seconds=25)
        writer.join()
    client.close()
    assert [(e["seq"], e["stage"]) for e in waited["events"]] == [(2, "FINISH")]
    assert waited["events"][0] == {k: v for k, v in collector.session_lines("w1")[1].items() if k != "delivery"}


async def test_log_event_gives_the_collectors_verdict(collector: Any, schema_validator: Any) -> None:
    """log_event returns accepted + seq for a valid event and the collector's reject reason for a bad transition."""
    async with mcp_session(collector) as session:
        first = await call(session, "log_event", session_id="m1", action="Index", stage="READ", agent="claude")
        second = await call(
            session, "log_event", session_id="m1", action="Index", stage="FINISH", agent="claude", duration_ms=12
        )
        backwards = await call(session, "log_event", session_id="m1", action="Index", stage="FINISH", agent="claude")
        invalid = await call(
            session, "log_event", session_id="m1", action="Other", stage="READ", status="FAILED", agent="claude"
        )
    assert first == {"accepted": True, "session_id": "m1", "seq": 1, "duplicate": False}
    assert second["accepted"] is True
    assert second["seq"] == 2
    assert backwards["accepted"] is False
    assert backwards["reason"] == "finish_without_start"
    assert "FINISH" in backwards["detail"]
    assert invalid == {
        "accepted": False,
        "session_id": "m1",
        "reason": "error_required",
        "detail": "status FAILED requires a non-empty error",
    }
    lines = collector.session_lines("m1")
    assert [(line["stage"], line["seq"]) for line in lines] == [("READ", 1), ("FINISH", 2)]
    for line in lines:
        schema_validator.validate(line)
    assert collector.rejects()[-1]["reason"] == "finish_without_start"


async def test_log_event_matches_the_cli_verdict(collector: Any) -> None:
    """The same rejected event gets the same reason through MCP as through `gz-ia session log`."""
    cli = collector.gz_ia("session", "log", "c1", "--action", "A", "--stage", "FINISH", "--agent", "x")
    assert cli.returncode == 1
    async with mcp_session(collector) as session:
        verdict = await call(session, "log_event", session_id="c1", action="A", stage="FINISH", agent="x")
    assert f"rejected ({verdict['reason']})" in cli.stderr
    assert verdict["detail"] in cli.stderr


async def test_read_session_pages_with_a_cursor(collector: Any) -> None:
    """read_session returns pages in order; following next_cursor reads every event once, in both directions."""
    client = collector.client()
    for number in range(7):
        client.log(session_id="pg", action=f"step {number}", stage="READ", agent="claude")
    assert client.flush(10)
    client.close()
    async with mcp_session(collector) as session:
        seen: list[int] = []
        cursor = None
        for _ in range(10):
            page = await call(session, "read_session", session_id="pg", cursor=cursor, limit=3)
            seen += [event["seq"] for event in page["events"]]
            cursor = page["next_cursor"]
            if page["end"]:
                break
        backwards = await call(session, "read_session", session_id="pg", limit=4, newest_first=True)
        rest = await call(
            session, "read_session", session_id="pg", limit=4, newest_first=True, cursor=backwards["next_cursor"]
        )
        missing = await session.call_tool("read_session", {"session_id": "nope"})
    assert seen == [1, 2, 3, 4, 5, 6, 7]
    assert [event["seq"] for event in backwards["events"]] == [7, 6, 5, 4]
    assert [event["seq"] for event in rest["events"]] == [3, 2, 1]
    assert "delivery" not in backwards["events"][0]
    assert missing.is_error
    assert "nope" in str(missing.content)


async def test_events_since_returns_only_new_events(collector: Any) -> None:
    """events_since never blocks, returns each event once across calls, and sees new sessions as they start."""
    client = collector.client()
    client.log(session_id="f1", action="a", stage="READ", agent="claude")
    assert client.flush(10)
    async with mcp_session(collector) as session:
        first = await call(session, "events_since")
        quiet = await call(session, "events_since", cursor=first["cursor"])
        client.log(session_id="f1", action="a", stage="PENDING", agent="claude")
        client.log(session_id="f2", action="b", stage="READ", agent="agy", parent_session_id="f1")
        assert client.flush(10)
        later = await call(session, "events_since", cursor=quiet["cursor"])
        only_f2 = await call(session, "events_since", session_ids=["f2", "not-yet"])
        capped = await call(session, "events_since", limit=1)
    client.close()
    assert [(e["session_id"], e["stage"]) for e in first["events"]] == [("f1", "READ")]
    assert quiet["events"] == []
    assert quiet["more"] is False
    assert sorted((e["session_id"], e["stage"]) for e in later["events"]) == [("f1", "PENDING"), ("f2", "READ")]
    assert [e["session_id"] for e in only_f2["events"]] == ["f2"]
    assert len(capped["events"]) == 1
    assert capped["more"] is True


async def test_list_sessions_and_summary_show_the_tree(collector: Any) -> None:
    """list_sessions shows every session; session_summary gives the tree, failures, open actions, durations."""
    client = collector.client()
    client.log(session_id="root1", action="plan", stage="READ", agent="claude", role="planner")
    client.log(session_id="root1", action="plan", stage="FINISH", agent="claude", role="planner", duration_ms=300)
    client.log(session_id="kid1", parent_session_id="root1", action="test", stage="PENDING", agent="agy")
    client.log(
        session_id="kid1",
        parent_session_id="root1",
        action="test",
        stage="FINISH",
        agent="agy",
        status="FAILED",
        error="2 tests failed",
        duration_ms=900,
        attrs={"gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 2, "gz-ia.cost_usd": 0.25},
    )
    client.log(session_id="grandkid", parent_session_id="kid1", action="lint", stage="READ", agent="agy")
    client.log(session_id="other", action="x", stage="READ", agent="claude")
    assert client.flush(10)
    client.close()
    async with mcp_session(collector) as session:
        listing = await call(session, "list_sessions")
        summary = await call(session, "session_summary", session_id="root1")
        alone = await call(session, "session_summary", session_id="root1", include_subagents=False)
    by_id = {row["session_id"]: row for row in listing["sessions"]}
    assert set(by_id) == {"root1", "kid1", "grandkid", "other"}
    assert by_id["kid1"]["parent_session_id"] == "root1"
    assert by_id["kid1"]["events"] == 2
    assert by_id["kid1"]["last_status"] == "FAILED"
    assert (by_id["root1"]["tokens"], by_id["root1"]["cost_usd"]) == (42, 0.25)  # with its subagent's
    tree = summary["tree"]
    assert tree["session_id"] == "root1"
    assert [child["session_id"] for child in tree["children"]] == ["kid1"]
    assert [child["session_id"] for child in tree["children"][0]["children"]] == ["grandkid"]
    body = summary["summary"]
    tokens = {"input": 40, "output": 2, "cache_read": 0, "cache_creation": 0, "total": 42}
    assert body["totals"] == {
        "events": 5, "actions": 3, "finished_ok": 1, "failed": 1, "open": 1, "tokens": tokens, "cost_usd": 0.25
    }  # fmt: skip
    assert [item["tokens"]["total"] for item in body["sessions"]] == [0, 42, 0]
    assert body["failures"] == [
        {"session_id": "kid1", "action": "test", "error": "2 tests failed", "duration_ms": 900, "seq": 2}
    ]
    assert body["open_actions"][0]["session_id"] == "grandkid"
    assert body["open_actions"][0]["action"] == "lint"
    assert body["longest_actions"][0] == {"session_id": "kid1", "action": "test", "duration_ms": 900}
    assert alone["tree"]["children"] == []
    assert alone["summary"]["totals"]["events"] == 2


async def test_log_event_without_a_collector_is_a_tool_error(collector: Any) -> None:
    """With the collector stopped, log_event reports a tool error naming the socket instead of hanging."""
    collector.stop()
    async with mcp_session(collector) as session:
        result = await session.call_tool(
            "log_event", {"session_id": "gone", "action": "a", "stage": "READ", "agent": "claude"}
        )
    assert result.is_error
    assert str(collector.socket) in str(result.content)


def test_mcp_without_the_extra_exits_2_naming_it(collector: Any) -> None:
    """Without the mcp package importable, `gz-ia mcp` exits 2 and names `pip install 'gz-ia-collector[mcp]'`."""
    blocked = "import sys; sys.modules['mcp'] = None; " + CLI  # what an install without the extra looks like
    result = subprocess.run(
        [sys.executable, "-c", blocked, "mcp"],
        env=collector.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "pip install 'gz-ia-collector[mcp]'" in result.stderr


async def test_an_agent_asks_why_its_tree_failed_and_what_hangs(collector: Any) -> None:
    """why_failed names the subagent's failure with the chain and what came after; hung_actions, in
    the session's own tree, the subagent's cycle left open; a tree that never failed says so."""
    from gz_ia.client import session

    client = collector.client()
    with session("mcp-root", agent="claude", client=client) as root:
        child = root.subagent(session_id="mcp-child")
        with child.action("run tests") as act:
            act.fail("2 tests failed")
        time.sleep(0.01)
        with root.action("retry") as act:
            act.usage(input_tokens=40, output_tokens=2, cost_usd=0.25)
        child.log("wait on the build", "PENDING")
    with session("mcp-fine", agent="codex", client=client) as fine:
        fine.log("stuck elsewhere", "READ")
    assert client.flush(10)
    client.close()
    async with mcp_session(collector) as agent:
        why = await call(agent, "why_failed", session_id="mcp-root")
        none = await call(agent, "why_failed", session_id="mcp-fine")
        mine = await call(agent, "hung_actions", session_id="mcp-root", after_seconds=0)
        everyone = await call(agent, "hung_actions", after_seconds=0)
        later = await call(agent, "hung_actions")
    assert why["failed"] is True
    assert (why["first_failure"]["session_id"], why["first_failure"]["error"]) == ("mcp-child", "2 tests failed")
    assert why["chain"] == ["mcp-root", "mcp-child"]
    assert (why["after"]["actions"], why["after"]["tokens"], why["after"]["cost_usd"]) == (2, 42, 0.25)
    assert none == {"failed": False, "message": "no cycle of session mcp-fine or its subagents failed"}
    assert [row["session_id"] for row in mine["sessions"]] == ["mcp-child"]
    assert [(cycle["action"], cycle["stage"]) for cycle in mine["sessions"][0]["hung"]] == [
        ("wait on the build", "PENDING")
    ]
    assert {row["session_id"] for row in everyone["sessions"]} == {"mcp-child", "mcp-fine"}
    assert later == {"after_seconds": 300.0, "sessions": []}
