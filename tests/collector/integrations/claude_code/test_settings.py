"""Merging gz-ia's hook handlers into Claude Code settings files, and taking exactly them out again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gz_ia.collector.integrations.claude_code.settings import (
    COMMAND_ONLY_EVENTS,
    HOOK_EVENTS,
    SettingsError,
    install,
    uninstall,
)

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


URL = "http://127.0.0.1:11000/hooks/claude-code"


def _ours(path: Path) -> dict[str, list[dict[str, object]]]:
    hooks = json.loads(path.read_text())["hooks"]
    return {event: [handler for group in hooks[event] for handler in group["hooks"]] for event in hooks}


def test_http_hooks_post_every_event_claude_code_posts_and_forward_session_start(tmp_path: Path) -> None:
    """With an http URL every event is an http handler with the key, root and disabled headers, except
    SessionStart (Claude Code posts no http hook for it): the command hook forwarding to the URL."""
    path = tmp_path / "settings.json"
    install(path, COMMAND, http_url=URL, key="the-users-key")
    handlers = _ours(path)
    assert path.stat().st_mode & 0o777 == 0o600  # it holds the key
    assert sorted(handlers) == sorted(HOOK_EVENTS)
    for event, (handler,) in handlers.items():
        if event in COMMAND_ONLY_EVENTS:
            assert handler == {"type": "command", "command": f"{COMMAND} --http {URL}", "timeout": 5}
        else:
            assert handler == {
                "type": "http",
                "url": URL,
                "timeout": 5,
                "headers": {
                    "X-Gz-Ia-Key": "the-users-key",
                    "X-Gz-Ia-Root": "$GZ_IA_ROOT",
                    "X-Gz-Ia-Disabled": "$GZ_IA_DISABLED",
                },
                "allowedEnvVars": ["GZ_IA_ROOT", "GZ_IA_DISABLED"],
            }


def test_switching_transport_replaces_the_handlers_in_place_and_uninstall_takes_both(tmp_path: Path) -> None:
    """command -> http -> command updates gz-ia's one handler per event; uninstall removes http ones too."""
    path = tmp_path / "settings.json"
    mine = {"type": "http", "url": "http://127.0.0.1:9/audit"}
    path.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [mine]}]}}))
    install(path, COMMAND)
    assert install(path, COMMAND, http_url=URL) == list(HOOK_EVENTS)
    handlers = _ours(path)
    assert handlers["Stop"] == [mine, handlers["Stop"][1]]
    assert all(len(found) == 1 for event, found in handlers.items() if event != "Stop")
    assert install(path, COMMAND, http_url=URL) == []
    assert install(path, COMMAND) == list(HOOK_EVENTS)
    assert _ours(path)["PreToolUse"] == [{"type": "command", "command": COMMAND, "timeout": 5}]
    install(path, COMMAND, http_url=URL)
    assert sorted(uninstall(path)) == sorted(HOOK_EVENTS)
    assert json.loads(path.read_text()) == {"hooks": {"Stop": [{"hooks": [mine]}]}}


def test_uninstall_puts_back_the_bytes_from_before_the_install(tmp_path: Path) -> None:
    """The user's own formatting and hooks come back byte for byte; a file install created is removed."""
    path = tmp_path / "settings.json"
    original = '{"model": "opus",\n    "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "mine.sh"}]}]}}'
    path.write_text(original)
    install(path, COMMAND)
    install(path, "/usr/bin/gz-ia hook claude-code")
    assert path.read_text() != original
    assert "Stop" in uninstall(path)
    assert path.read_text() == original
    created = tmp_path / "new" / "settings.json"
    install(created, COMMAND)
    uninstall(created)
    assert not created.exists()
