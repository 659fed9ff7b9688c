"""`gz-ia hook claude-code` fed hand-written hook payloads, as Claude Code runs it (one real subprocess
per payload, against a real collector), for what a real Claude Code run cannot produce on demand:
eight hook processes started at the same instant, an error past the schema's limits, payloads that
are not Claude Code's, a hook installed mid-call. What the real binary sends, and what is stored of
it, is tested with the binary itself in test_claude_code_real.py; `install` is tested here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import wait_for
from tests.integration.test_cli_log import HEAVY

from gz_ia.client.limits import MAX_AGENT_LENGTH, MAX_ERROR_LENGTH
from gz_ia.client.schema import cut_text

FIXTURES = Path(__file__).parent.parent / "fixtures" / "claude_code"
SESSION = "0b6f3c1e-5d2a-4c7e-9f10-2a3b4c5d6e7f"
SPOOL_HEAVY = tuple(module for module in HEAVY if module != "re")
HOOK = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()", "hook", "claude-code"]


def _payloads(name: str, collector: Any) -> list[str]:
    """The fixture's payloads, with ``cwd`` a directory inside the collector's workspace (its root is found from it)."""
    cwd = collector.workspace / "src"
    cwd.mkdir(exist_ok=True)
    lines = (FIXTURES / name).read_text().splitlines()
    return [json.dumps({**json.loads(line), "cwd": str(cwd)}) for line in lines]


def _hook_env(collector: Any) -> dict[str, str]:
    environment = dict(collector.env)
    environment.pop("GZ_IA_ROOT")  # the root comes from the payload's cwd
    return environment


def _feed(collector: Any, payload: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        HOOK, input=payload, env=_hook_env(collector), capture_output=True, text=True, timeout=30, check=False
    )
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    return result


def _feed_all(collector: Any, payloads: list[str]) -> None:
    for payload in payloads:
        result = _feed(collector, payload)
        assert result.stderr == ""


def _cycles(lines: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(action, stage, status); a tool call's id (the event's cycle) shows after its name."""
    return [
        (f"{line['action']} {line['cycle']}" if "cycle" in line else line["action"], line["stage"], line["status"])
        for line in lines
    ]


def _tree(collector: Any, session_id: str) -> dict[str, Any]:
    result = collector.gz_ia("session", "tree", session_id, "--json", check=True)
    tree: dict[str, Any] = json.loads(result.stdout)
    return tree


def test_many_calls_of_one_tool_at_once_keep_their_own_cycles(collector: Any) -> None:
    """Eight PreToolUse hooks run concurrently, then eight PostToolUse: eight complete cycles."""
    template = json.loads(_payloads("parallel_tools.jsonl", collector)[2])
    ids = [f"toolu_par{index}" for index in range(8)]

    def run_all(event: str) -> None:
        processes = [
            subprocess.Popen(
                HOOK,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_hook_env(collector),
                text=True,
            )
            for _ in ids
        ]
        for process, tool_use_id in zip(processes, ids, strict=True):
            assert process.stdin is not None
            process.stdin.write(json.dumps({**template, "hook_event_name": event, "tool_use_id": tool_use_id}))
            process.stdin.close()
        for process in processes:
            assert process.stdout is not None
            assert process.stderr is not None
            with process.stdout, process.stderr:
                assert process.wait(30) == 0
                assert process.stdout.read() == ""

    run_all("PreToolUse")
    run_all("PostToolUse")
    lines = collector.session_lines(SESSION)
    assert sorted(_cycles(lines)) == sorted(
        [(f"Read {tool_use_id}", stage, "OK") for tool_use_id in ids for stage in ("READ", "FINISH")]
    )
    assert collector.rejects() == []


def test_a_long_tool_error_and_agent_type_are_cut_and_marked_like_every_client_cuts_them(collector: Any) -> None:
    """Free text past the schema's limits is cut with the mark that names its length, as the client
    library cuts it, not silently."""
    payloads = _payloads("failing_bash.jsonl", collector)
    failure = json.loads(payloads[3])
    assert failure["hook_event_name"] == "PostToolUseFailure"
    payloads[3] = json.dumps({**failure, "error": "e" * (MAX_ERROR_LENGTH + 100), "agent_type": "r" * 200})
    payloads[2] = json.dumps(
        {**json.loads(payloads[2]), "agent_type": "r" * 200}
    )  # the FINISH keeps its opening's role
    _feed_all(collector, payloads)
    finish = collector.session_lines(SESSION)[3]
    assert (finish["stage"], finish["status"]) == ("FINISH", "FAILED")
    assert finish["error"] == cut_text("e" * (MAX_ERROR_LENGTH + 100), MAX_ERROR_LENGTH)
    assert finish["role"] == cut_text("r" * 200, MAX_AGENT_LENGTH)


def test_gz_ia_disabled_makes_the_hook_log_nothing(collector: Any) -> None:
    """With GZ_IA_DISABLED=1 the hook reads its payload and logs nothing, like every disabled agent."""
    environment = {**_hook_env(collector), "GZ_IA_DISABLED": "1"}
    for payload in [*_payloads("failing_bash.jsonl", collector), "{not json"]:
        result = subprocess.run(HOOK, input=payload, env=environment, capture_output=True, text=True, check=False)
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    collector.gz_ia("session", "log", "marker", "--action", "a", "--stage", "READ", "--agent", "t", check=True)
    assert collector.all_sessions().keys() == {"marker"}


def test_the_hook_loads_neither_click_nor_asyncio(collector: Any) -> None:
    """The hook delivers to a running collector without click, asyncio, msgspec, the client's schema,
    protocol or sender, pathlib, typing, json or re (tests.integration.test_cli_log.HEAVY)."""
    probe = (
        "import sys, io; from gz_ia.collector.entry import fast_path; "
        "sys.stdin = io.TextIOWrapper(io.BytesIO(sys.argv[1].encode())); "
        "code = fast_path(['hook', 'claude-code']); "
        f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    payload = _payloads("parallel_tools.jsonl", collector)[0]
    result = subprocess.run(
        [sys.executable, "-c", probe, payload], env=_hook_env(collector), capture_output=True, text=True, check=False
    )
    assert result.stdout.strip() == "0 []", result.stderr
    assert _cycles(collector.session_lines(SESSION)) == [("session", "READ", "OK")]


def test_with_no_collector_the_hook_spools_without_loading_more(collector: Any) -> None:
    """A hook call that finds no collector spools without msgspec or the client's spool module (or
    anything else of HEAVY but ``re``, which the spool's redaction needs: a secret must not reach the
    disk even while the collector is down); the next collector writes it."""
    probe = (
        "import sys, io; from gz_ia.collector.entry import fast_path; "
        "sys.stdin = io.TextIOWrapper(io.BytesIO(sys.argv[1].encode())); "
        "code = fast_path(['hook', 'claude-code']); "
        f"print(code, sorted(m for m in {(*SPOOL_HEAVY, 'gz_ia.client.spool')!r} if m in sys.modules))"
    )
    collector.stop()
    for payload in _payloads("parallel_tools.jsonl", collector)[:2]:  # the second finds the first spooled
        result = subprocess.run(
            [sys.executable, "-c", probe, payload],
            env=_hook_env(collector),
            capture_output=True,
            text=True,
            check=False,
        )
        assert (result.stdout.strip(), result.stderr) == ("0 []", "")
    collector.start()
    wait_for(lambda: len(collector.session_lines(SESSION)) == 2, timeout=45, message="the spooled events")
    assert _cycles(collector.session_lines(SESSION)) == [("session", "READ", "OK"), ("prompt", "READ", "OK")]


def test_bad_payloads_are_counted_and_named_on_stderr_never_failing(collector: Any) -> None:
    """Not JSON, not an object, a tool event without tool_use_id: exit 0, one stderr line each, counted."""
    for payload in ("{not json", "[1, 2]", json.dumps({"session_id": SESSION, "hook_event_name": "PreToolUse"})):
        result = _feed(collector, payload)
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("gz-ia hook claude-code: payload ignored")
    counter = Path(collector.env["GZ_IA_SPOOL_DIR"]) / "ledgers" / "claude-code.invalid"
    assert counter.read_text().split(" ", 1)[0] == "3"
    assert collector.all_sessions() == {}


USER_SETTINGS: dict[str, Any] = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git status)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/check-bash.sh"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 3}]}],
    },
}


def _install(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-c", "from gz_ia.collector.entry import main; main()", "install", "claude-code", *args],
        env=environment,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_install_merges_into_user_settings_idempotently_and_uninstall_restores_them(tmp_path: Path) -> None:
    """Other settings and hooks stay; a second install changes nothing; --uninstall removes exactly ours."""
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(USER_SETTINGS, indent=2))
    first = _install(tmp_path, "--user")
    assert first.returncode == 0, first.stderr
    assert "added gz-ia's hooks for PreToolUse" in first.stdout
    merged = json.loads(settings.read_text())
    assert (merged["model"], merged["permissions"]) == ("opus", USER_SETTINGS["permissions"])
    assert merged["hooks"]["PreToolUse"][0] == USER_SETTINGS["hooks"]["PreToolUse"][0]
    assert merged["hooks"]["Stop"][0] == USER_SETTINGS["hooks"]["Stop"][0]
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionStart", "SubagentStop", "Stop"):
        ours = [h for group in merged["hooks"][event] for h in group["hooks"] if "hook claude-code" in h["command"]]
        assert len(ours) == 1, event
    assert merged["hooks"]["PostToolUse"][-1]["matcher"] == "*"
    assert "matcher" not in merged["hooks"]["SessionStart"][-1]
    text = settings.read_text()
    again = _install(tmp_path, "--user")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines() == [
        again.stdout.splitlines()[0],  # which hooks auto chose, and why (tests/integration/test_hook_transport.py)
        f"gz-ia's hooks are already in {settings}",
    ]
    assert again.stdout.startswith("hooks: inbox hook: ")
    assert settings.read_text() == text
    removed = _install(tmp_path, "--user", "--uninstall")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(settings.read_text()) == USER_SETTINGS


def test_install_into_a_project_and_the_installed_command_logs(collector: Any, tmp_path: Path) -> None:
    """--project writes .claude/settings.json in the current directory; its command really logs."""
    result = _install(tmp_path / "home", "--project", cwd=collector.workspace)
    assert result.returncode == 0, result.stderr
    settings = json.loads((collector.workspace / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    payload = json.dumps({"session_id": SESSION, "hook_event_name": "SessionStart", "cwd": str(collector.workspace)})
    ran = subprocess.run(
        ["sh", "-c", command], input=payload, env=_hook_env(collector), capture_output=True, text=True, check=False
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")
    wait_for(lambda: collector.session_lines(SESSION), message="the inbox's drop to be logged")
    assert _cycles(collector.session_lines(SESSION)) == [("session", "READ", "OK")]
    assert not (tmp_path / "home" / ".claude").exists()


def test_install_refuses_a_settings_file_that_is_not_json(tmp_path: Path) -> None:
    """A broken settings.json is named and left exactly as it was."""
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"hooks": {,}')
    result = _install(tmp_path)
    assert result.returncode == 1
    assert "is not valid JSON" in result.stderr
    assert settings.read_text() == '{"hooks": {,}'
