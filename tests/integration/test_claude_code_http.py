"""Claude Code's ``http`` hooks: posted to the collector's ``/hooks/claude-code``, no process per hook.

The real Claude Code drives most of these, offline against the fake Anthropic API; the restart and
the other-uid tests post the hook inputs captured from real runs
(``tests/fixtures/claude_code/captured``), since their point is the port, not the agent.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import SYSTEM_PYTHON, CollectorProcess, spool_dir, wait_for
from tests.fixtures.claude_run import ClaudeCode, scratch_home
from tests.fixtures.model_apis.anthropic import FakeAnthropic, ToolUse, Turn
from tests.fixtures.socket_holder import SocketHolder

CAPTURED = Path(__file__).parent.parent / "fixtures" / "claude_code" / "captured"
HOSTILE_UID = 65534
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TOOL_ID = re.compile(r"toolu_[0-9A-Za-z_]+")


@pytest.fixture(name="api")
def _api() -> Iterator[FakeAnthropic]:
    api = FakeAnthropic()
    yield api
    api.close()


def _post(url: str, payload: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes]:
    """POST a hook payload with ``headers`` (the key among them, as gz-ia's installed hooks send it)."""
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _captured(name: str, workspace: Path) -> dict[str, Any]:
    """A captured hook input, its ``cwd`` inside ``workspace`` (whose root the route finds)."""
    payload: dict[str, Any] = json.loads((CAPTURED / f"{name}.json").read_text())
    payload["cwd"] = str(workspace)
    return payload


def _script(api: FakeAnthropic, marker: str) -> None:
    """One run's model: a Bash call that works and one that fails at once, a call to a tool this
    build does not offer, then the answer."""
    api.script(
        marker,
        Turn(
            tools=(
                ToolUse("Bash", {"command": "echo hello", "description": "say hello"}),
                ToolUse("Bash", {"command": "exit 3", "description": "fail"}),
                ToolUse("Grep", {"pattern": "x"}),
            )
        ),
        Turn(tools=(ToolUse("Read", {"file_path": "/nonexistent/file.txt"}),)),
        Turn(text="done"),
    )


def _normal(lines: list[dict[str, Any]], session_id: str, home: Path) -> list[str]:
    """A session's events as text that two runs of one script share: no times, numbers, ids,
    durations or home directory (in the transcript's path)."""
    kept = []
    for line in lines:
        event = {
            key: value for key, value in line.items() if key not in ("timestamp", "seq", "delivery", "duration_ms")
        }
        text = json.dumps(event, sort_keys=True).replace(session_id, "<session>").replace(str(home), "<home>")
        kept.append(_TOOL_ID.sub("<tool>", _UUID.sub("<uuid>", text)))
    return kept


def _sessions_of(collector: CollectorProcess, session_id: str, home: Path) -> dict[str, list[str]]:
    """The run's session and its child sessions (subagents), normalised, by id with the run's id replaced."""
    return {
        name.replace(session_id, "<session>"): _normal(lines, session_id, home)
        for name, lines in collector.all_sessions().items()
        if name.startswith(session_id)
    }


@pytest.mark.agents
def test_http_inbox_and_command_hooks_record_the_same_events(
    make_collector: Any, api: FakeAnthropic, short_tmp: Path
) -> None:
    """The same scripted run of the real Claude Code with the command hook, the inbox hook and http
    hooks: the same events (times, ids and durations aside), SessionStart included."""
    collector = make_collector()
    recorded: dict[str, Any] = {}
    for transport in ("command", "inbox", "http"):
        marker = f"scripted run number {len(recorded)}"  # one length: the prompt's is recorded
        _script(api, marker)
        claude = ClaudeCode(
            scratch_home(short_tmp / transport),
            collector.workspace,
            api,
            {**collector.env, "GZ_IA_HTTP_ADDRESS": f"127.0.0.1:{collector.http_port}"},
        )
        installed = claude.install_hooks("--hooks", transport)
        assert f"hooks: --hooks {transport}" in installed.stdout
        result = claude.run(marker)
        assert result.returncode == 0, result.stderr
        session_id = result.session_id
        wait_for(
            lambda session_id=session_id: any(
                line["action"] == "session" and line["stage"] == "FINISH"
                for line in collector.session_lines(session_id)
            ),
            message=f"the {transport} run's session to end",
        )
        recorded[transport] = _sessions_of(collector, session_id, claude.home)
    assert recorded["http"] == recorded["command"]
    assert recorded["inbox"] == recorded["command"]
    assert collector.metric('gzia_hook_drops_total{outcome="logged"}') > 0
    lines = recorded["http"]["<session>"]
    assert any('"action": "session"' in line and '"READ"' in line for line in lines)  # SessionStart, forwarded
    assert sum('"FAILED"' in line for line in lines) >= 3  # the failing Bash, the missing tool, the Read
    assert collector.metric('gzia_http_hook_payloads_total{outcome="staged"}') > 0


@pytest.mark.agents
def test_the_inbox_keeps_every_hook_while_no_collector_runs(
    make_collector: Any, api: FakeAnthropic, short_tmp: Path
) -> None:
    """The inbox hook, as ``gz-ia install claude-code`` writes it where no service manager holds the
    HTTP port, with the collector stopped: the real Claude Code runs unhindered, every payload waits
    in the inbox, and the collector started afterwards logs the same events as a run with it up,
    at the times the hooks ran (not when they were taken)."""
    collector = make_collector()
    recorded: dict[str, Any] = {}
    for state in ("up", "down"):
        marker = f"inbox run with the collector {state:>4}"  # one length: the prompt's is recorded
        _script(api, marker)
        claude = ClaudeCode(scratch_home(short_tmp / state), collector.workspace, api, collector.env)
        installed = claude.install_hooks()
        assert installed.stdout.startswith("hooks: inbox hook: no service manager holds"), installed.stdout
        if state == "down":
            collector.stop()
        ran_from = time.time()
        result = claude.run(marker)
        ran_until = time.time()
        assert result.returncode == 0, result.stderr
        if state == "down":
            inbox = spool_dir() / "hooks"
            assert len(list(inbox.glob("*.drop"))) >= 10, "each hook's payload waits in the inbox"
            assert collector.all_sessions().keys().isdisjoint({result.session_id})
            time.sleep(1.0)  # so that a time of taking could not pass for a time of running
            collector.start()
        session_id = result.session_id
        wait_for(
            lambda session_id=session_id: any(
                line["action"] == "session" and line["stage"] == "FINISH"
                for line in collector.session_lines(session_id)
            ),
            message=f"the run's session to end with the collector {state}",
        )
        recorded[state] = _sessions_of(collector, session_id, claude.home)
        times = [line["timestamp"] for line in collector.session_lines(session_id)]
        stamps = [datetime.fromisoformat(each.replace("Z", "+00:00")).timestamp() for each in times]
        assert ran_from - 1 <= min(stamps) and max(stamps) <= ran_until + 1, (state, times)
    for name in recorded["up"]:
        assert recorded["down"][name] == recorded["up"][name], name
    assert recorded["down"].keys() == recorded["up"].keys()
    # A drop is removed once its events are written: the last one's may still be there as they show.
    wait_for(lambda: not list((spool_dir() / "hooks").glob("*.drop")), message="the inbox to be emptied")


def test_another_uid_is_refused_on_the_hook_port(collector: CollectorProcess) -> None:
    """uid 65534 posting a real hook input gets 403, and nothing of it is logged."""
    payload = _captured("B-UserPromptSubmit", collector.workspace)
    post = (
        "import json, sys, urllib.request, urllib.error\n"
        "request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), "
        "headers={'Content-Type': 'application/json'})\n"
        "try:\n"
        "    print(urllib.request.urlopen(request, timeout=30).status)\n"
        "except urllib.error.HTTPError as exc:\n"
        "    print(exc.code)\n"
    )
    as_other = ["setpriv", f"--reuid={HOSTILE_UID}", f"--regid={HOSTILE_UID}", "--clear-groups"]
    result = subprocess.run(
        [*as_other, SYSTEM_PYTHON, "-c", post, f"{collector.http_url}/hooks/claude-code", json.dumps(payload)],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout.strip()) == (0, "403"), result.stderr
    status = json.loads(collector.gz_ia("status", "--json", check=True).stdout)
    assert status["endpoints"]["hooks"] == f"{collector.http_url}/hooks/claude-code"
    # The same payload from this uid is logged: the refusal was the uid's, not the payload's.
    assert _post(f"{collector.http_url}/hooks/claude-code", payload, collector.http_headers()) == (200, b"{}")
    wait_for(lambda: collector.session_file(payload["session_id"]).exists(), message="the payload from our own uid")
    assert [line["action"] for line in collector.session_lines(payload["session_id"])] == ["prompt"]


def test_the_route_answers_200_to_what_it_cannot_use_and_counts_it(collector: CollectorProcess) -> None:
    """Not JSON, not a payload, GZ_IA_DISABLED: always 200 {} (a hook never fails Claude Code), counted."""
    url = f"{collector.http_url}/hooks/claude-code"
    request = urllib.request.Request(
        url, data=b"{not json", headers={"Content-Type": "application/json", **collector.http_headers()}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert (response.status, response.read()) == (200, b"{}")
    assert _post(url, {"hook_event_name": "Stop"}, collector.http_headers()) == (200, b"{}")
    payload = _captured("B-UserPromptSubmit", collector.workspace)
    assert _post(url, payload, collector.http_headers(**{"X-Gz-Ia-Disabled": "1"})) == (200, b"{}")
    assert collector.metric('gzia_http_hook_payloads_total{outcome="invalid"}') == 2
    assert collector.metric('gzia_http_hook_payloads_total{outcome="disabled"}') == 1
    assert not collector.session_file(payload["session_id"]).exists()


def test_the_root_header_names_the_root_as_gz_ia_root_does(collector: CollectorProcess, short_tmp: Path) -> None:
    """X-Gz-Ia-Root (the hook's $GZ_IA_ROOT) wins over the root found from the payload's cwd."""
    elsewhere = short_tmp / "elsewhere" / ".harness"
    elsewhere.mkdir(parents=True)
    payload = _captured("B-UserPromptSubmit", collector.workspace)
    headers = collector.http_headers(**{"X-Gz-Ia-Root": str(elsewhere)})
    assert _post(f"{collector.http_url}/hooks/claude-code", payload, headers) == (200, b"{}")
    session = elsewhere / "sessions" / f"{payload['session_id']}.events.jsonl"
    wait_for(session.exists, message="the session in the root the header names")
    assert not collector.session_file(payload["session_id"]).exists()


def test_a_collector_restarting_on_held_sockets_loses_nothing_posted_meanwhile(short_tmp: Path) -> None:
    """Under the socket units (held here as the user manager holds them) hooks posted while the
    collector restarts wait in the kernel's queue and are logged by the next one. What the restart
    costs is the mapping's state, held in memory: the tool call opened before it is logged again
    by its PostToolUse as a call of its own (a second PENDING, then its FINISH), and the prompt
    opened before it is never finished (its Stop finds nothing open; the record keeps it open)."""
    workspace = short_tmp / "ws"
    (workspace / ".harness").mkdir(parents=True)
    collector_env = CollectorProcess(short_tmp / "unused").env
    collector_env.update(XDG_CONFIG_HOME=str(short_tmp / "config"), GZ_IA_STATE_DIR=str(short_tmp / "state"))
    holder = SocketHolder(short_tmp, env=collector_env)
    url = f"{holder.url}/hooks/claude-code"
    try:
        holder.start("--metrics-address", "off")
        wait_for(lambda: "ready" in holder.log_since_start(), message="the collector")
        names = ["B-UserPromptSubmit", "B-PreToolUse-Bash", "B-PostToolUse-Bash", "B-Stop", "B-SessionEnd"]
        payloads = [_captured(name, workspace) for name in names]
        headers = {"X-Gz-Ia-Key": json.loads((short_tmp / "state" / "http.json").read_text())["key"]}
        for payload in payloads[:2]:
            assert _post(url, payload, headers) == (200, b"{}")
        assert holder.stop() == 0
        answers: list[tuple[int, bytes]] = []
        poster = threading.Thread(target=lambda: answers.extend(_post(url, p, headers) for p in payloads[2:]))
        poster.start()  # no collector runs: the connection waits in the held port's queue
        time.sleep(0.5)
        assert poster.is_alive() and not answers
        holder.start("--metrics-address", "off")
        poster.join(60)
        assert answers == [(200, b"{}")] * 3
        log = holder.log_since_start()
        assert "using 1 socket(s) passed by the service manager" in log
    finally:
        holder.close()
    session = workspace / ".harness" / "sessions" / f"{payloads[0]['session_id']}.events.jsonl"
    lines = [json.loads(line) for line in session.read_text().splitlines()]
    cycles = [(line["action"], line["stage"], line["status"]) for line in lines]
    assert cycles == [
        ("prompt", "READ", "OK"),
        ("Bash", "PENDING", "OK"),
        ("Bash", "PENDING", "OK"),
        ("Bash", "FINISH", "OK"),
    ], cycles
    assert not (workspace / ".harness" / "rejects.jsonl").exists()


def test_the_forwarding_command_hook_falls_back_to_the_socket_when_nothing_listens(
    collector: CollectorProcess,
) -> None:
    """``gz-ia hook claude-code --http URL`` (SessionStart's hook with http hooks) posts to URL; with
    nothing listening there it logs the payload as the command hook does, over the socket."""
    import sys

    from tests.conftest import free_port

    payload = _captured("B-SessionStart", collector.workspace)
    environment = dict(collector.env)
    environment.pop("GZ_IA_ROOT")  # found from the payload's cwd
    hook = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()", "hook", "claude-code"]
    for url in (f"http://127.0.0.1:{free_port()}/hooks/claude-code", f"{collector.http_url}/hooks/claude-code"):
        result = subprocess.run(
            [*hook, "--http", url], input=json.dumps(payload), env=environment, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    wait_for(lambda: len(collector.session_lines(payload["session_id"])) >= 1, message="the forwarded SessionStart")
    assert collector.metric('gzia_http_hook_payloads_total{outcome="staged"}') == 1  # the second one came by HTTP
    wait_for(lambda: len(collector.session_lines(payload["session_id"])) == 2, message="both SessionStarts")
    assert [(line["action"], line["stage"]) for line in collector.session_lines(payload["session_id"])] == [
        ("session", "READ"),  # over the socket (nothing listened at the first URL)
        ("session", "READ"),  # over HTTP
    ]
