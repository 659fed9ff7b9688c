"""`gz-ia export otel` into real Arize Phoenix and real MLflow, checked through their own APIs.

The servers are the pinned releases scripts/backends.sh installs (tests/fixtures/backends.py starts
them, one of each per run). The sessions are logged through a real collector with the events and
attrs the Claude Code hook writes (a tool call per cycle keyed by its call id, the `session` and
`prompt` cycles, a subagent session, usage on the Agent call): written by hand here, because what
is under test is what each backend makes of them, not the hook.

Each backend is one test, so that under `--dist worksteal` (which ignores `xdist_group`) a run still
starts one Phoenix and one MLflow; the steps inside say what each checks.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.fixtures.backends import BackendServer, _mlflow_server, _phoenix, cycle_start_ns, http_json

pytestmark = [pytest.mark.backends, pytest.mark.timeout(1500)]
__all__ = ["_mlflow_server", "_phoenix"]  # the session fixtures, imported to be found here

CLI = "from gz_ia.collector.cli import main; main()"
SPAN_KINDS = {
    "invoke_agent claude-code": {"AGENT"},
    "invoke_agent Explore": {"AGENT"},
    "session": {"CHAIN"},
    "prompt": {"CHAIN"},
    "subagent": {"CHAIN"},
    "Bash": {"TOOL"},
    "Agent": {"LLM"},  # its FINISH records usage: Phoenix prices LLM spans only
    "Read": {"TOOL"},
}
"""Each span name of :func:`log_claude_tree`'s export and its kind, as both backends file it."""


def _ns(line: dict[str, Any]) -> int:
    return int(datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp() * 1_000_000) * 1000


def _iso_ns(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1_000_000) * 1000


def trace_hex(root: str) -> str:
    return hashlib.sha256(root.encode()).digest()[:16].hex()


def log_claude_tree(collector: Any, root: str) -> None:
    """A Claude Code session: a prompt running Bash (OK), an Agent call whose subagent Reads a file,
    and a failing Bash; then the prompt and the session end. 9 spans: 2 sessions, 7 cycles."""
    kid = f"{root}.a1"
    client = collector.client()

    def log(session: str, action: str, stage: str, **fields: Any) -> None:
        parent = root if session == kid else None
        role = "Explore" if session == kid else None
        client.log(session_id=session, parent_session_id=parent, role=role, agent="claude-code", action=action,
                   stage=stage, **fields)  # fmt: skip

    log(root, "session", "READ", attrs={"source": "startup"})
    log(root, "prompt", "READ", attrs={"prompt_chars": 24})
    log(root, "Bash", "PENDING", cycle="toolu_1",
        attrs={"tool": "Bash", "tool_use_id": "toolu_1", "command": "pytest -q"})  # fmt: skip
    log(root, "Bash", "FINISH", cycle="toolu_1", duration_ms=5)
    log(root, "Agent", "PENDING", cycle="toolu_2",
        attrs={"tool": "Agent", "tool_use_id": "toolu_2", "description": "look around"})  # fmt: skip
    log(kid, "subagent", "READ")
    log(
        kid, "Read", "READ", cycle="toolu_3", attrs={"tool": "Read", "tool_use_id": "toolu_3", "file_path": "README.md"}
    )
    log(kid, "Read", "FINISH", cycle="toolu_3", duration_ms=1)
    log(kid, "subagent", "FINISH", duration_ms=3)
    log(root, "Agent", "FINISH", cycle="toolu_2", duration_ms=9,
        attrs={"input_tokens": 1200, "output_tokens": 300, "model": "claude-test-model"})  # fmt: skip
    log(root, "Bash", "PENDING", cycle="toolu_4", attrs={"tool": "Bash", "tool_use_id": "toolu_4", "command": "make"})
    log(root, "Bash", "FINISH", cycle="toolu_4", status="FAILED", error="make: *** [all] Error 2", duration_ms=2)
    log(root, "prompt", "FINISH", duration_ms=30)
    log(root, "session", "FINISH", attrs={"reason": "other"}, duration_ms=40)
    assert client.flush(20)
    client.close()


def export(collector: Any, state_dir: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One `gz-ia export otel` run to its end (``--once`` or ``--resend``)."""
    command = [sys.executable, "-c", CLI, "export", "otel", "--state-dir", str(state_dir), "--session-idle", "0",
               "--metrics-address", "off", *args]  # fmt: skip
    return subprocess.run(
        command, env={**collector.env, **env}, capture_output=True, text=True, timeout=300, check=False
    )


def start_exporter(collector: Any, state_dir: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`gz-ia export otel` running in the background; its output in ``state_dir``/exporter.log."""
    state_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-c", CLI, "export", "otel", "--state-dir", str(state_dir), "--poll-interval", "0.1",
               "--metrics-address", "off", *args]  # fmt: skip
    with (state_dir / "exporter.log").open("ab") as log:
        return subprocess.Popen(command, env={**collector.env, **env}, stdout=log, stderr=log)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    assert proc.wait(30) == 0


# --- Phoenix ---------------------------------------------------------------------------------------


def phoenix_spans(phoenix: BackendServer, project: str) -> list[dict[str, Any]]:
    """Every span Phoenix holds in ``project`` (its REST API, all pages)."""
    spans: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = "?limit=1000" + (f"&cursor={cursor}" if cursor else "")
        try:
            page = http_json(f"{phoenix.url}/v1/projects/{project}/spans{query}")
        except OSError as exc:  # the project does not exist (yet): nothing written
            if getattr(exc, "code", None) == 404:
                return []
            raise
        spans += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return spans


def phoenix_sessions(phoenix: BackendServer, project: str) -> list[dict[str, Any]]:
    """Phoenix's Sessions tab of ``project``: each session id with its traces (GraphQL)."""
    query = """{ projects { edges { node { name sessions(first: 100) { edges { node {
        sessionId numTraces traces(first: 100) { edges { node { traceId } } } } } } } } } }"""
    answer = http_json(f"{phoenix.url}/graphql", {"query": query})
    assert "errors" not in answer, answer
    for edge in answer["data"]["projects"]["edges"]:
        if edge["node"]["name"] == project:
            return [session["node"] for session in edge["node"]["sessions"]["edges"]]
    return []


def check_phoenix_tree(collector: Any, spans: list[dict[str, Any]], root: str) -> None:
    """The tree as Phoenix shows it: ids, parents, times, status, kinds, the attributes it reads."""
    kid = f"{root}.a1"
    stored = collector.all_sessions()
    assert len(spans) == 9
    assert len({span["context"]["span_id"] for span in spans}) == 9  # no duplicate
    assert {span["context"]["trace_id"] for span in spans} == {trace_hex(root)}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    root_span = by_name["invoke_agent claude-code"][0]
    kid_span = by_name["invoke_agent Explore"][0]
    assert root_span["parent_id"] is None
    assert kid_span["parent_id"] == root_span["context"]["span_id"]
    assert (root_span["span_kind"], kid_span["span_kind"]) == ("AGENT", "AGENT")
    assert _iso_ns(root_span["start_time"]) == _ns(stored[root][0])
    assert _iso_ns(root_span["end_time"]) == _ns(stored[root][-1])  # the final session
    assert root_span["status_code"] == "ERROR"  # one of its actions failed: the run shows as failed
    assert kid_span["status_code"] == "OK"
    for span in spans:
        assert span["attributes"]["session.id"] == root  # the whole tree in one Phoenix session
    assert kid_span["attributes"]["gz_ia.session.id"] == kid
    kinds = {name: {span["span_kind"] for span in group} for name, group in by_name.items()}
    assert kinds == SPAN_KINDS
    read = by_name["Read"][0]
    assert read["parent_id"] == kid_span["context"]["span_id"]
    assert read["attributes"]["tool.name"] == "Read"
    assert json.loads(read["attributes"]["input.value"]) == {"file_path": "README.md"}
    bash_ok, bash_failed = sorted(by_name["Bash"], key=lambda span: span["start_time"])
    assert (bash_ok["status_code"], bash_failed["status_code"]) == ("OK", "ERROR")
    assert bash_failed["status_message"] == "make: *** [all] Error 2"
    exceptions = [event for event in bash_failed["events"] if event["name"] == "exception"]
    assert [event["attributes"]["exception.message"] for event in exceptions] == ["make: *** [all] Error 2"]
    assert _iso_ns(bash_ok["start_time"]) == cycle_start_ns(stored[root][2], stored[root][3])
    assert _iso_ns(bash_ok["end_time"]) == _ns(stored[root][3])
    agent = by_name["Agent"][0]
    attributes = agent["attributes"]
    assert [attributes[f"llm.token_count.{kind}"] for kind in ("prompt", "completion", "total")] == [1200, 300, 1500]
    assert attributes["llm.model_name"] == attributes["gen_ai.request.model"] == "claude-test-model"
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (1200, 300)


@pytest.mark.xdist_group("phoenix")
def test_phoenix_shows_the_sessions_as_its_own(collector: Any, phoenix: BackendServer, tmp_path: Path) -> None:
    """Phoenix gets every span with the default signals, files the tree under one session, shows a
    live session as it finally was, and --resend restores a Phoenix that lost everything."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.url, "OTEL_EXPORTER_OTLP_TIMEOUT": "30"}
    project = f"gz-ia-{tmp_path.name}"

    # 1. Default signals (traces, logs): Phoenix answers /v1/logs with 405; every span arrives anyway.
    log_claude_tree(collector, "cc1")
    done = export(collector, tmp_path / "state", "--once", "--project", project, env=env)
    assert done.returncode == 1, done.stderr  # the logs were refused
    refusals = [line for line in done.stderr.splitlines() if "OTLP logs REFUSED" in line]
    assert len(refusals) == 1, done.stderr  # once, loudly, with the endpoint and the answer
    assert f"by {phoenix.url}/v1/logs: HTTP 405 Method Not Allowed" in refusals[0]
    assert "--signals traces" in refusals[0]
    wait_for(lambda: len(phoenix_spans(phoenix, project)) >= 9, message="the 9 spans in Phoenix")
    check_phoenix_tree(collector, phoenix_spans(phoenix, project), "cc1")
    sessions = phoenix_sessions(phoenix, project)
    assert [(s["sessionId"], s["numTraces"]) for s in sessions] == [("cc1", 1)]  # not under its subagent

    # 2. A live session: cycles go out as they finish, its own span only once it is final.
    live_state = tmp_path / "live-state"
    exporter = start_exporter(collector, live_state, "--project", project, "--signals", "traces",
                              "--session-idle", "2", env=env)  # fmt: skip
    try:
        client = collector.client()
        client.log(session_id="live", action="session", stage="READ", agent="claude-code")
        client.log(session_id="live", action="Bash", cycle="t1", stage="PENDING", agent="claude-code",
                   attrs={"tool": "Bash"})  # fmt: skip
        client.log(session_id="live", action="Bash", cycle="t1", stage="FINISH", agent="claude-code")
        assert client.flush(10)

        def live() -> list[dict[str, Any]]:
            return [s for s in phoenix_spans(phoenix, project) if s["context"]["trace_id"] == trace_hex("live")]

        wait_for(lambda: len(live()) == 1, message="the finished Bash cycle of the live session")
        time.sleep(3)  # longer than --session-idle: a session with an open cycle is not final
        assert [span["name"] for span in live()] == ["Bash"]
        for number in range(2, 5):  # the session grows, then ends
            client.log(session_id="live", action="Bash", cycle=f"t{number}", stage="PENDING", agent="claude-code",
                       attrs={"tool": "Bash"})  # fmt: skip
            client.log(session_id="live", action="Bash", cycle=f"t{number}", stage="FINISH", agent="claude-code")
        client.log(session_id="live", action="session", stage="FINISH", agent="claude-code")
        assert client.flush(10)
        client.close()
        wait_for(lambda: len(live()) == 6, message="the live session's span once final")
    finally:
        stop(exporter)
    stored = collector.session_lines("live")
    session_span = next(span for span in live() if span["span_kind"] == "AGENT")
    assert (_iso_ns(session_span["start_time"]), _iso_ns(session_span["end_time"])) == (
        _ns(stored[0]),
        _ns(stored[-1]),
    )
    assert session_span["attributes"]["gz_ia.events"] == len(stored) == 10

    # 3. Phoenix answers before it writes: one restarted empty has lost what gz-ia counts as sent.
    before = {span["context"]["span_id"]: span for span in phoenix_spans(phoenix, project)}
    assert len(before) == 15
    phoenix.restart_fresh()
    assert phoenix_spans(phoenix, project) == []
    resent = export(collector, tmp_path / "state", "--project", project, "--resend", env=env)
    assert resent.returncode == 0, resent.stderr
    assert "15 spans sent again" in resent.stderr
    wait_for(lambda: len(phoenix_spans(phoenix, project)) >= 15, message="every span restored")
    again = export(collector, tmp_path / "state", "--project", project, "--resend", "--since", "-1h", env=env)
    assert again.returncode == 0, again.stderr  # idempotent: the same ids once more
    time.sleep(2)  # Phoenix writes after answering: give a duplicate the time to appear
    after = phoenix_spans(phoenix, project)
    assert len(after) == 15
    assert {span["context"]["span_id"] for span in after} == set(before)
    check_phoenix_tree(collector, [s for s in after if s["context"]["trace_id"] == trace_hex("cc1")], "cc1")
    assert [(s["sessionId"], s["numTraces"]) for s in sorted(phoenix_sessions(phoenix, project),
                                                             key=lambda s: s["sessionId"])] == [
        ("cc1", 1), ("live", 1)]  # fmt: skip


# --- MLflow ----------------------------------------------------------------------------------------


def mlflow_trace(mlflow: BackendServer, root: str) -> dict[str, Any] | None:
    """MLflow's trace of the tree rooted at ``root``, with its spans (its traces API), or None."""
    try:
        return http_json(f"{mlflow.url}/api/3.0/mlflow/traces/get?trace_id=tr-{trace_hex(root)}")["trace"]  # type: ignore[no-any-return]
    except OSError as exc:
        if getattr(exc, "code", None) == 404:
            return None
        raise


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes as MLflow returns them (OTLP JSON values), as plain values."""
    return {item["key"]: next(iter(item["value"].values())) for item in span.get("attributes", [])}


@pytest.mark.xdist_group("mlflow")
def test_mlflow_shows_the_sessions_as_its_own(collector: Any, mlflow_server: BackendServer, tmp_path: Path) -> None:
    """MLflow gets every span with the default signals (it has no /v1/logs): one trace per tree,
    filed under the root session, its state the root's, the spans' types, inputs, tokens and model."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": mlflow_server.url,
        "OTEL_EXPORTER_OTLP_HEADERS": "x-mlflow-experiment-id=0",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "30",
    }
    log_claude_tree(collector, "ml1")
    done = export(collector, tmp_path / "state", "--once", env=env)
    assert done.returncode == 1, done.stderr
    refusals = [line for line in done.stderr.splitlines() if "OTLP logs REFUSED" in line]
    assert len(refusals) == 1, done.stderr
    assert f"by {mlflow_server.url}/v1/logs: HTTP 404 Not Found" in refusals[0]
    trace = mlflow_trace(mlflow_server, "ml1")  # MLflow writes before it answers
    assert trace is not None
    info, spans = trace["trace_info"], trace["spans"]
    assert info["state"] == "ERROR"  # the root's status: one of its actions failed
    assert info["trace_metadata"]["mlflow.trace.session"] == "ml1"  # the whole tree, one session
    assert json.loads(info["trace_metadata"]["mlflow.trace.tokenUsage"]) == {
        "input_tokens": 1200, "output_tokens": 300, "total_tokens": 1500}  # fmt: skip
    assert len(spans) == 9
    stored = collector.all_sessions()
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    (root_span,) = by_name["invoke_agent claude-code"]
    (kid_span,) = by_name["invoke_agent Explore"]
    assert "parent_span_id" not in root_span
    assert kid_span["parent_span_id"] == root_span["span_id"]
    assert {span["parent_span_id"] for span in by_name["Read"] + by_name["subagent"]} == {kid_span["span_id"]}
    assert (int(root_span["start_time_unix_nano"]), int(root_span["end_time_unix_nano"])) == (
        _ns(stored["ml1"][0]),
        _ns(stored["ml1"][-1]),
    )
    types = {name: {_attrs(span)["mlflow.spanType"] for span in group} for name, group in by_name.items()}
    assert types == SPAN_KINDS
    statuses = sorted(span["status"]["code"] for span in by_name["Bash"])
    assert statuses == ["STATUS_CODE_ERROR", "STATUS_CODE_OK"]
    agent = _attrs(by_name["Agent"][0])
    assert agent["mlflow.llm.model"] == "claude-test-model"
    usage = {item["key"]: item["value"]["int_value"] for item in agent["mlflow.chat.tokenUsage"]["values"]}
    assert usage == {"input_tokens": 1200, "output_tokens": 300, "total_tokens": 1500}
    read_input = _attrs(by_name["Read"][0])["mlflow.spanInputs"]["values"]
    assert read_input == [{"key": "file_path", "value": {"string_value": "README.md"}}]
