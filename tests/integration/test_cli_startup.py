"""What ``gz-ia`` loads to start: a reading command imports its own modules only, and ``--version``
looks the version up only when it is asked for; ``--help`` and completion still see every command."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gz_ia.client import build_event

_LOADED = """
import json, sys
from gz_ia.collector.cli import main
try:
    main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as out:
        json.dump(sorted(sys.modules), out)
"""

OTHER_COMMANDS = [
    f"gz_ia.collector.cli.{name}"
    for name in (
        "_collector",
        "_export",
        "_gc",
        "_install",
        "_integrations",
        "_mcp",
        "_session",
        "_sessions",
        "_status",
        "_tree",
        "_view",
    )
]
"""The modules of commands other than ``logs`` (``_collector``: ``gz-ia-collector``'s own)."""

UNUSED_BY_READING = ["importlib.metadata", "subprocess", "shutil", "tempfile", "email", "zipfile", "csv", "pickle"]
"""What only other commands, ``--version`` or a pager need."""


def _loaded(env: dict[str, str], tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", _LOADED, str(out), *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result, set(json.loads(out.read_text()))


def test_reading_logs_imports_no_other_command_nor_the_version(collector: Any, tmp_path: Path) -> None:
    """``gz-ia logs --json`` answers from a real collector's root without importing the other commands'
    modules, the distribution metadata, or what only a pager needs."""
    client = collector.client()
    try:
        client.send(build_event(agent="claude", stage="READ", action="look", session_id="s-1"), timeout=10)
    finally:
        client.close()
    result, modules = _loaded(collector.env, tmp_path, "logs", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["action"] == "look"
    assert "gz_ia.collector.cli._reading" in modules
    assert sorted(modules & {*OTHER_COMMANDS, *UNUSED_BY_READING}) == []


def test_version_is_the_distribution_s_and_help_lists_every_command(collector: Any, tmp_path: Path) -> None:
    """``--version`` prints click's line with the installed version; ``--help`` loads every command to
    list it with its short help."""
    installed = importlib.metadata.version("gz-ia-collector")
    result, _modules = _loaded(collector.env, tmp_path, "--version")
    assert (result.returncode, result.stdout) == (0, f"gz-ia, version {installed}\n")
    daemon = subprocess.run(
        [sys.executable, "-m", "gz_ia.collector", "--version"], check=False, capture_output=True, text=True, timeout=60
    )
    assert (daemon.returncode, daemon.stdout) == (0, f"gz-ia-collector, version {installed}\n")
    result, modules = _loaded(collector.env, tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    commands = result.stdout.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in commands] == [
        "disk-usage",
        "export",
        "gc",
        "hook",
        "install",
        "key",
        "logs",
        "mcp",
        "session",
        "sessions",
        "status",
        "ui",
    ]
    assert all(len(line.split()) > 1 for line in commands)  # each with its short help
    top = ("_export", "_gc", "_integrations", "_mcp", "_reading", "_sessions", "_status")
    assert {f"gz_ia.collector.cli.{name}" for name in top} <= modules


def test_version_falls_back_when_the_distribution_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from a source tree without metadata, ``--version`` says ``0+unknown`` (the lookup is replaced:
    uninstalling the distribution under the test run is not possible)."""
    from gz_ia.collector.cli import collector_main, main

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert CliRunner().invoke(main, ["--version"]).output == "gz-ia, version 0+unknown\n"
    assert CliRunner().invoke(collector_main, ["--version"]).output == "gz-ia-collector, version 0+unknown\n"


def test_completion_offers_the_commands_of_lazy_groups(collector: Any) -> None:
    """click's bash completion lists command names of the top group and of ``session`` without running them."""
    script = Path(sys.executable).parent / "gz-ia"

    def complete(words: str) -> list[str]:
        environment = {
            **collector.env,
            "_GZ_IA_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split(" ")) - 1),
        }
        return subprocess.run([str(script)], env=environment, capture_output=True, text=True, check=True).stdout.split()

    assert complete("gz-ia se") == ["plain,session", "plain,sessions"]
    assert complete("gz-ia session l") == ["plain,log", "plain,logs"]
    assert complete("gz-ia d") == ["plain,disk-usage"]


_ENDING = """
import atexit, sys, threading, time
from gz_ia.collector.entry import main

atexit.register(lambda: print("exit handler ran", file=sys.stderr))
if sys.argv[1] == "thread":
    # Still running when the command ends: it must be joined, as an ordinary exit joins it.
    threading.Thread(target=lambda: (time.sleep(0.5), print("thread joined", file=sys.stderr))).start()
sys.argv[1:] = sys.argv[2:]
main()
"""


@pytest.mark.parametrize("thread", ["none", "thread"])
def test_the_end_keeps_the_exit_code_the_output_and_the_exit_handlers(tmp_path: Path, thread: str) -> None:
    """``gz-ia`` ends without tearing down every object, yet as an ordinary exit does: the
    command's code, its output into a pipe, the exit handlers, a running thread joined."""
    root = tmp_path / "absent"
    result = subprocess.run(
        [sys.executable, "-c", _ENDING, thread, "--root", str(root), "session", "logs", "nobody"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "gz-ia:" in result.stderr
    assert result.stderr.rstrip().endswith("exit handler ran")
    assert ("thread joined" in result.stderr) == (thread == "thread")
