"""``gz-ia install codex`` and ``gz-ia install gemini``: idempotent, exact to the byte on uninstall,
every other setting and hook kept (the settings files as users write them, by hand)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from gz_ia.collector.cli import main
from gz_ia.collector.integrations import codex_settings, gemini_settings

USER_CODEX = """{
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh", "timeout": 9}]}
        ]
    }
}
"""
USER_GEMINI = """{"general": {"vimMode": true}, "security": {"auth": {"selectedType": "gemini-api-key"}},
 "hooks": {"BeforeTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "lint.sh"}]}]}}"""
COMMANDS = {"codex": "/opt/gz/bin/gz-ia hook codex", "gemini": "/opt/gz/bin/gz-ia hook gemini"}
SPECS = {"codex": codex_settings.SPEC, "gemini": gemini_settings.SPEC}


def _install(agent: str, settings: Path, *args: str) -> str:
    result = CliRunner().invoke(
        main, ["install", agent, "--settings", str(settings), "--command", COMMANDS[agent], *args]
    )
    assert result.exit_code == 0, result.output
    return result.output


def _ours(settings: Path, agent: str) -> dict[str, list[dict[str, object]]]:
    hooks = json.loads(settings.read_text())["hooks"]
    return {
        event: [h for group in groups for h in group["hooks"] if h["command"] == COMMANDS[agent]]
        for event, groups in hooks.items()
    }


@pytest.mark.parametrize(("agent", "original"), [("codex", USER_CODEX), ("gemini", USER_GEMINI)])
def test_install_twice_then_uninstall_leaves_the_file_byte_for_byte(tmp_path: Path, agent: str, original: str) -> None:
    """One handler per event however often it is installed; the user's hooks stay; uninstalling puts
    back the exact bytes, formatting included."""
    settings = tmp_path / "settings.json"
    settings.write_text(original)
    first = _install(agent, settings)
    assert "added gz-ia's hooks" in first
    installed = settings.read_bytes()
    assert "already" in _install(agent, settings)
    assert settings.read_bytes() == installed
    ours = _ours(settings, agent)
    assert {event for event, handlers in ours.items() if handlers} == set(SPECS[agent].events)
    assert all(len(handlers) <= 1 for handlers in ours.values())
    users = json.loads(original)["hooks"]
    for event, groups in users.items():
        assert json.loads(settings.read_text())["hooks"][event][0] == groups[0]
    assert "removed gz-ia's hooks" in _install(agent, settings, "--uninstall")
    assert settings.read_text() == original
    assert "no gz-ia hooks" in _install(agent, settings, "--uninstall")
    assert settings.read_text() == original


@pytest.mark.parametrize("agent", ["codex", "gemini"])
def test_uninstall_removes_the_file_install_created(tmp_path: Path, agent: str) -> None:
    """No settings file before: none after."""
    settings = tmp_path / "dir" / "settings.json"
    _install(agent, settings)
    assert settings.exists()
    _install(agent, settings, "--uninstall")
    assert not settings.exists()


def test_other_changes_made_meanwhile_are_kept_on_uninstall(tmp_path: Path) -> None:
    """A setting the user added after installing survives the uninstall; only gz-ia's handlers go."""
    settings = tmp_path / "settings.json"
    settings.write_text(USER_GEMINI)
    _install("gemini", settings)
    edited = json.loads(settings.read_text())
    edited["general"]["vimMode"] = False
    settings.write_text(json.dumps(edited))
    _install("gemini", settings, "--uninstall")
    expected = json.loads(USER_GEMINI)
    expected["general"]["vimMode"] = False
    assert json.loads(settings.read_text()) == expected


def test_a_changed_command_is_updated_in_place_and_uninstall_is_still_exact(tmp_path: Path) -> None:
    """Installing with another command replaces gz-ia's handlers, adds none; the original bytes still return."""
    settings = tmp_path / "hooks.json"
    settings.write_text(USER_CODEX)
    _install("codex", settings)
    result = CliRunner().invoke(
        main, ["install", "codex", "--settings", str(settings), "--command", "/usr/bin/gz-ia hook codex"]
    )
    assert result.exit_code == 0, result.output
    hooks = json.loads(settings.read_text())["hooks"]
    commands = [h["command"] for groups in hooks.values() for group in groups for h in group["hooks"]]
    assert commands.count("/usr/bin/gz-ia hook codex") == len(codex_settings.SPEC.events)
    assert COMMANDS["codex"] not in commands
    _install("codex", settings, "--uninstall")
    assert settings.read_text() == USER_CODEX


def test_codex_install_says_how_to_trust_the_hooks(tmp_path: Path) -> None:
    """Codex skips untrusted hooks silently: install says what the user must do."""
    output = _install("codex", tmp_path / "hooks.json")
    assert "/hooks" in output
    assert "trust" in output
    assert "--dangerously-bypass-hook-trust" in output


@pytest.mark.parametrize("text", ["{not json", '{"hooks": []}', "// a comment\n{}"])
def test_a_file_it_cannot_read_is_left_untouched(tmp_path: Path, text: str) -> None:
    """Invalid JSON (comments included) or a hooks value that is not an object: refused, file unchanged."""
    settings = tmp_path / "settings.json"
    settings.write_text(text)
    result = CliRunner().invoke(main, ["install", "gemini", "--settings", str(settings)])
    assert result.exit_code == 1
    assert "nothing was changed" in result.output
    assert settings.read_text() == text


def test_the_command_must_be_gz_ias_hook(tmp_path: Path) -> None:
    """A --command that does not end with the hook's arguments would never be recognised again: refused."""
    result = CliRunner().invoke(
        main, ["install", "codex", "--settings", str(tmp_path / "h.json"), "--command", "gz-ia hook gemini"]
    )
    assert result.exit_code == 2
    assert not (tmp_path / "h.json").exists()


@pytest.mark.parametrize("agent", ["codex", "gemini"])
def test_the_default_command_is_this_gz_ia_by_absolute_path(tmp_path: Path, agent: str) -> None:
    """Without --command, the handler runs this installation's gz-ia, whatever the agent's PATH."""
    settings = tmp_path / "settings.json"
    result = CliRunner().invoke(main, ["install", agent, "--settings", str(settings)])
    assert result.exit_code == 0, result.output
    commands = {h["command"] for groups in json.loads(settings.read_text())["hooks"].values() for group in groups
                for h in group["hooks"]}  # fmt: skip
    (command,) = commands
    program, _, args = command.partition(" ")
    assert args.endswith(f"hook {agent}")
    assert Path(shlex.split(program)[0]).is_absolute() and Path(shlex.split(program)[0]).exists()
