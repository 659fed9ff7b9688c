"""Merging gz-ia's hook handlers into Claude Code settings files, and taking exactly them out again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gz_ia.collector.integrations.claude_code.settings import HOOK_EVENTS, SettingsError, install, uninstall

COMMAND = "/opt/gz/bin/gz-ia hook claude-code"


def test_a_new_command_path_updates_the_handler_in_place(tmp_path: Path) -> None:
    """Installing from another gz-ia updates its handler; there is never a second one."""
    path = tmp_path / "settings.json"
    install(path, COMMAND)
    assert install(path, "/usr/bin/gz-ia hook claude-code") == list(HOOK_EVENTS)
    hooks = json.loads(path.read_text())["hooks"]
    for event in HOOK_EVENTS:
        assert [handler["command"] for group in hooks[event] for handler in group["hooks"]] == [
            "/usr/bin/gz-ia hook claude-code"
        ]


def test_uninstall_keeps_a_user_handler_that_shares_a_group_with_ours(tmp_path: Path) -> None:
    """A user who put their own handler into gz-ia's group keeps it (and the group) after uninstall."""
    path = tmp_path / "settings.json"
    install(path, COMMAND)
    settings = json.loads(path.read_text())
    mine = {"type": "command", "command": "my-audit.sh"}
    settings["hooks"]["Stop"][0]["hooks"].append(mine)
    path.write_text(json.dumps(settings))
    assert "Stop" in uninstall(path)
    assert json.loads(path.read_text()) == {"hooks": {"Stop": [{"hooks": [mine]}]}}
    assert uninstall(path) == []


def test_settings_that_are_not_an_object_are_left_alone(tmp_path: Path) -> None:
    """A list, or hooks that are not an object, raise SettingsError and change nothing."""
    path = tmp_path / "settings.json"
    for text in ("[1]", '{"hooks": []}', '{"hooks": {"Stop": {}}}'):
        path.write_text(text)
        with pytest.raises(SettingsError):
            install(path, COMMAND)
        assert path.read_text() == text
