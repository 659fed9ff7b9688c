"""The docs stay true: every `$` command of docs/user-guide.md and README.md, and every Python example of the guide.

Console blocks (```console) are run in document order against a real collector, with the workspace
holding its `.harness/` as the working directory, interleaved with the guide's Python blocks. Output
lines under a command must appear, in order, in what it printed (`...` matches anything). A command
ending in `# exit N` must exit with N. Commands that cannot run here (installing packages, starting a
foreground daemon, systemd) are checked instead: the command exists (`--help`), the files and extras
they name exist.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import FOLLOW_BOUND, INTERRUPTIBLE, kill_group, wait_for

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "user-guide.md"
README = REPO / "README.md"
BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)


@dataclass
class Command:
    """One `$` line of a console block, with the output lines the doc shows under it."""

    text: str
    expected: list[str] = field(default_factory=list)
    exit_code: int = 0


@dataclass
class Block:
    """A fenced block of a document."""

    language: str
    body: str


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` in order."""
    return [Block(match.group(1), match.group(2)) for match in BLOCK.finditer(path.read_text())]


def commands(body: str) -> list[Command]:
    """The `$` commands of a console block with their expected output and exit code."""
    found: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            text = line[2:].strip()
            exit_code = 0
            marker = re.search(r"\s+#\s*exit (\d+)\s*$", text)
            if marker:
                exit_code = int(marker.group(1))
                text = text[: marker.start()]
            found.append(Command(text, exit_code=exit_code))
        elif found and line.strip():
            found[-1].expected.append(line.rstrip())
    return found


def collector_extras() -> set[str]:
    """The optional extras gz-ia-collector declares."""
    project = tomllib.loads((REPO / "collector" / "pyproject.toml").read_text())["project"]
    return set(project.get("optional-dependencies", {}))


def check_install(command: Command, env: dict[str, str]) -> None:
    """`pip install` / `uv tool install`: the local paths exist and every extra named is declared."""
    for word in shlex.split(command.text):
        if word.startswith("./"):
            path, _, extras = word.partition("[")
            assert (REPO / path).is_dir(), f"{command.text}: {path} is not a directory of the repository"
            if extras:
                assert set(extras.rstrip("]").split(",")) <= collector_extras(), command.text


def check_help(command: Command, env: dict[str, str]) -> None:
    """A long-running command: it exists and its `--help` works (for subcommands, the subcommand's)."""
    words = shlex.split(command.text)
    positional = [word for word in words[1:] if not word.startswith("-")]
    if words[0] == "gz-ia":
        subcommand = positional[:2] if positional[:1] == ["export"] else positional[:1]
        argv = ["gz-ia", *subcommand, "--help"]
    else:
        argv = [words[0], "--help"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"{argv}: {result.stderr}"
    for unit in re.findall(r"gz-ia-collector\.(?:socket|service)", command.text):
        assert (REPO / "systemd" / unit).is_file(), f"{command.text}: systemd/{unit} missing"


def check_script(command: Command, env: dict[str, str]) -> None:
    """A repository script: executable and syntactically valid bash."""
    script = REPO / shlex.split(command.text)[0]
    assert script.is_file(), command.text
    assert os.access(script, os.X_OK), f"{script} is not executable"
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)


# Commands that cannot run inside a test, and the check made instead.
NOT_RUN: list[tuple[re.Pattern[str], Callable[[Command, dict[str, str]], None]]] = [
    (re.compile(r"^(pip|pipx|uv tool) install "), check_install),
    (re.compile(r"^gz-ia-collector( serve)?( --|$)"), check_help),  # the daemon in the foreground
    (re.compile(r"^(systemctl|loginctl|journalctl) "), check_help),
    (re.compile(r"^gz-ia mcp$"), check_help),  # waits for an MCP client on stdin
    (re.compile(r"^gz-ia export otel(?! --help)"), check_help),  # runs until stopped
    (re.compile(r"^scripts/"), check_script),  # scripts/test would run this very suite
]


def matches(expected: list[str], output: str) -> bool:
    """Whether the expected lines appear in order in ``output`` (`...` matches any text)."""
    lines = output.splitlines()
    position = 0
    for want in expected:
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")) + "$")
        while position < len(lines) and not pattern.match(lines[position]):
            position += 1
        if position == len(lines):
            return False
        position += 1
    return True


class Runner:
    """Runs a document's commands and Python blocks against one collector."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector
        self.env = dict(collector.env)
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["NO_COLOR"] = "1"
        self.ran: list[str] = []
        self.checked: list[str] = []

    def console(self, command: Command) -> None:
        for pattern, check in NOT_RUN:
            if pattern.search(command.text):
                check(command, self.env)
                self.checked.append(command.text)
                return
        if command.text.startswith("gz-ia-collector install"):
            text = f"{command.text} --dry-run --unit-dir {self.collector.base / 'units'}"
        else:
            text = command.text
        if re.search(r"\s(-f|--follow)\b", text):
            self.follow(command, text)
            return
        result = subprocess.run(
            ["bash", "-o", "pipefail", "-c", text],
            cwd=self.collector.workspace,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        output = result.stdout + result.stderr
        assert result.returncode == command.exit_code, f"$ {text} -> {result.returncode}\n{output}"
        assert matches(command.expected, output), f"$ {text}\nexpected {command.expected}\ngot:\n{output}"
        self.ran.append(command.text)

    def follow(self, command: Command, text: str) -> None:
        """Following never ends by itself: watch the command until it has printed what the document
        shows (or exited), then stop it as Ctrl-C would."""
        out, err = self.collector.base / "follow.out", self.collector.base / "follow.err"
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(
                [*INTERRUPTIBLE, "bash", "-o", "pipefail", "-c", text],
                cwd=self.collector.workspace, env=self.env, stdout=stdout, stderr=stderr, start_new_session=True,
            )  # fmt: skip

        def shown() -> bool:
            printed = out.read_text()
            return bool(printed.strip()) and matches(command.expected, printed + err.read_text())

        try:
            wait_for(lambda: proc.poll() is not None or shown(), FOLLOW_BOUND, message=f"$ {text} to print its output")
        finally:
            ended = proc.poll()
            if ended is None:
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(FOLLOW_BOUND)
            except subprocess.TimeoutExpired:
                kill_group(proc)  # bash -c and the follower under it
                proc.wait()
                raise
        output = out.read_text() + err.read_text()
        assert ended in (None, 0), f"$ {text} -> {ended}\n{output}"
        assert out.read_text().strip(), f"$ {text} printed nothing"
        assert matches(command.expected, output), f"$ {text}\nexpected {command.expected}\ngot:\n{output}"
        self.ran.append(command.text)

    def python(self, code: str) -> None:
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=self.collector.workspace,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, f"{code}\n{result.stdout}{result.stderr}"
        self.ran.append(code.splitlines()[0])


def run_document(path: Path, collector: Any, *, python: bool) -> Runner:
    """Run every console command (and, with ``python``, every Python block) of ``path`` in order."""
    runner = Runner(collector)
    for block in blocks(path):
        if block.language == "console":
            for command in commands(block.body):
                runner.console(command)
        elif block.language == "python" and python:
            runner.python(block.body)
    return runner


def test_user_guide_commands_and_examples_work(collector: Any, schema_validator: Any) -> None:
    """Every command and Python example of the user guide runs as documented against a real collector."""
    runner = run_document(GUIDE, collector, python=True)
    assert len(runner.ran) >= 20
    assert len(runner.checked) >= 7
    sessions = collector.all_sessions()
    # What the guide's examples promise: scopes, a FAILED action, subagents in and across processes.
    guide1 = sessions["guide-1"]
    assert [line["stage"] for line in guide1 if line["action"] == "Run the tests"] == ["PENDING", "FINISH"]
    assert guide1[-1]["status"] == "FAILED"
    assert guide1[-1]["error"] == "RuntimeError: 3 tests failed"
    assert any(line.get("attrs") == {"files_changed": 2} for line in guide1)
    children = {sid: lines[0].get("parent_session_id") for sid, lines in sessions.items()}
    assert children["guide-3-child"] == "guide-3"
    assert sum(1 for parent in children.values() if parent == "guide-1") == 1
    assert sum(1 for parent in children.values() if parent == "guide-4") == 2
    assert [line["seq"] for line in sessions["demo"]] == [1, 2, 3, 4]
    # Agents without code changes: the Claude Code hook by hand, and the logging handler.
    assert [(line["action"], line["agent"]) for line in sessions["cc-demo"]] == [("session", "claude-code")]
    assert [(line["action"], line["agent"]) for line in sessions["gem-demo"]] == [("session", "gemini-cli")]
    assert json.loads((collector.workspace / ".codex" / "hooks.json").read_text())["hooks"]["PostToolUse"]
    assert json.loads((collector.workspace / ".gemini" / "settings.json").read_text())["hooks"]["AfterTool"]
    assert [(line["action"], line["stage"], line["status"]) for line in sessions["guide-logging"]] == [
        ("Index deps", "READ", "OK"),
        ("Index deps", "FINISH", "OK"),
        ("Upload", "PENDING", "OK"),
        ("Upload", "FINISH", "FAILED"),
    ]
    assert sessions["guide-logging"][-1]["error"] == "TimeoutError: registry did not answer"
    assert sessions["guide-logging"][1]["attrs"] == {"files": 12}
    assert json.loads((collector.workspace / ".claude" / "settings.json").read_text())["hooks"]["PreToolUse"]
    for lines in sessions.values():
        for line in lines:
            schema_validator.validate(line)
    assert (collector.workspace / "timeline.html").read_text().startswith("<!DOCTYPE html>")


def test_readme_commands_work(collector: Any) -> None:
    """Every `$` command of the README runs (or, where it cannot run here, exists) as documented."""
    runner = run_document(README, collector, python=False)
    assert runner.ran
    assert runner.checked


def test_the_readme_agent_example_leaves_no_session_running(collector: Any) -> None:
    """The README's first Python example, run as an agent would: every session it starts ends
    (none stays ``running`` in ``gz-ia sessions``)."""
    code = next(block.body for block in blocks(README) if block.language == "python")
    ran = subprocess.run(
        [sys.executable, "-c", code], cwd=collector.workspace, env=collector.env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    listing = collector.gz_ia("sessions", "--json")
    statuses = {record["session_id"]: record["status"] for record in map(json.loads, listing.stdout.splitlines())}
    assert len(statuses) == 2 and "running" not in statuses.values(), statuses


def test_guide_mcp_config_snippet_is_valid() -> None:
    """The guide's MCP JSON snippet parses and registers `gz-ia mcp`, a command that exists."""
    snippets = [json.loads(block.body) for block in blocks(GUIDE) if block.language == "json"]
    assert snippets
    server = snippets[0]["mcpServers"]["gz-ia"]
    assert [server["command"], *server["args"]] == ["gz-ia", "mcp"]
    assert shutil.which("gz-ia", path=str(Path(sys.executable).parent))


def test_guide_documents_every_exporter_metric_and_tool() -> None:
    """The guide names every gzia_otel_* metric the exporter exposes and every MCP tool the server offers."""
    from prometheus_client import CollectorRegistry

    from gz_ia.collector.otel.export import _Metrics

    registry = CollectorRegistry()
    _Metrics(registry)
    exposed = {
        sample.name
        for metric in registry.collect()
        for sample in metric.samples
        if not sample.name.endswith("_created")
    }
    text = GUIDE.read_text()
    assert exposed, "no exporter metrics"
    for name in exposed:
        assert f"`{name}`" in text, name
    from gz_ia.collector.mcp.server import TOOLS

    for tool in TOOLS:
        assert f"`{tool}`" in text, tool


@pytest.mark.parametrize("path", [GUIDE, README], ids=["user-guide", "README"])
def test_documents_have_console_commands(path: Path) -> None:
    """Each checked document has console blocks, so a renamed fence cannot silently skip them."""
    assert any(block.language == "console" and commands(block.body) for block in blocks(path))


def _span_table() -> dict[str, tuple[str, set[str]]]:
    """The guide's span table: kind -> (the name it documents, the attributes it names)."""
    text = GUIDE.read_text()
    section = text[text.index("## 11. OpenTelemetry export") : text.index("## 12.")]
    rows: dict[str, tuple[str, set[str]]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in ("session", "cycle", "span event"):
            names = set(re.findall(r"`([a-z_]+(?:\.[a-z_<>]+)+)`", cells[2]))
            rows[cells[0]] = (cells[1], names)
    return rows


def test_guide_otel_span_table_matches_what_the_exporter_sends(collector: Any, tmp_path: Path) -> None:
    """Every span attribute the guide's table names is sent, and every attribute sent is in the table."""
    from tests.conftest import free_port
    from tests.integration.test_otel import Receiver

    from gz_ia.client.usage import usage_attrs

    client = collector.client()
    client.log(session_id="d1", action="plan", stage="READ", agent="claude", role="planner", attrs={"tokens": 3})
    usage = usage_attrs(
        input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_creation_tokens=4, cost_usd=0.5, model="m"
    )
    client.log(
        session_id="d1", action="plan", stage="FINISH", agent="claude", role="planner", duration_ms=5, attrs=usage
    )
    client.log(session_id="d1", action="edit", cycle="c1", stage="PENDING", agent="claude")
    client.log(session_id="d1", action="edit", cycle="c1", stage="FINISH", agent="claude")
    client.log(session_id="d2", parent_session_id="d1", action="test", stage="PENDING", agent="agy")
    client.log(session_id="d2", action="test", stage="FINISH", agent="agy", status="FAILED", error="boom")
    assert client.flush(10)
    client.close()
    receiver = Receiver(free_port())
    receiver.start()
    try:
        result = subprocess.run(
            ["gz-ia", "export", "otel", "--once", "--session-idle", "0", "--metrics-address", "off",
             "--endpoint", f"http://127.0.0.1:{receiver.port}", "--state-dir", str(tmp_path)],
            env={**collector.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        receiver.stop()
    assert result.returncode == 0, result.stderr
    table = _span_table()
    assert set(table) == {"session", "cycle", "span event"}
    # Only past 128 stage events in one cycle, or from attrs these events do not carry.
    conditional = {"gz_ia.dropped_span_events", "gen_ai.tool.call.id"}
    sent: dict[str, set[str]] = {"session": set(), "cycle": set(), "span event": set()}
    for span in receiver.spans:
        kind = "session" if span["attributes"]["openinference.span.kind"] == "AGENT" else "cycle"
        if kind == "session":
            assert span["name"].startswith(table[kind][0].strip("`").split(" <")[0] + " "), span["name"]
        else:
            assert span["name"] == span["attributes"]["gz_ia.action"]  # "the action text"
        usage_and_io = (
            "gen_ai.usage.",
            "gen_ai.request.",
            "gz_ia.cost_usd",
            "llm.",
            "input.",
            "output.",
        )  # own paragraph
        sent[kind] |= {
            re.sub(r"^gz_ia\.attr\..*", "gz_ia.attr.<key>", key)
            for key in span["attributes"]
            if not key.startswith(usage_and_io)
        }
        for _name, _time, attributes in span["events"]:
            sent["span event"] |= set(attributes)
    for kind, (_name, documented) in table.items():
        assert sent[kind] == documented - conditional, kind
