"""``gz-ia install claude-code --hooks auto|http|command`` and the HTTP socket unit it looks for.

``auto`` installs http hooks only where the service manager holds the collector's HTTP port across
restarts: the unit ``gz-ia-collector install --user`` writes, enabled, on the configured address.
Enabling is shown as ``systemctl --user enable`` leaves it (a symlink in ``sockets.target.wants``),
made by hand: there is no user manager in the test.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from gz_ia.client import env
from gz_ia.collector.cli import collector_main
from gz_ia.collector.cli._install import HTTP_SOCKET_NAME, SERVICE_NAME, SOCKET_NAME
from gz_ia.collector.config import default_http_port
from gz_ia.collector.daemon import HTTP_SOCKET_NAME as HTTP_FD_NAME

GZ_IA = ["-c", "from gz_ia.collector.entry import main; main()"]


@pytest.fixture(name="home")
def _home(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home whose configuration (and so its user units) is the test's own."""
    home = short_tmp / "home"
    (home / ".config").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.delenv("GZ_IA_HTTP_ADDRESS", raising=False)
    return home


def _units(home: Path) -> Path:
    return home / ".config" / "systemd" / "user"


def _install_units(*args: str) -> str:
    result = CliRunner().invoke(collector_main, ["install", "--user", "--sandbox", "no", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _install_hooks(home: Path, *args: str) -> tuple[str, dict[str, object]]:
    import sys

    result = subprocess.run(
        [sys.executable, *GZ_IA, "install", "claude-code", *args],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    return result.stdout, settings["hooks"]


def _enable(home: Path) -> None:
    wants = _units(home) / "sockets.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / HTTP_SOCKET_NAME).symlink_to(_units(home) / HTTP_SOCKET_NAME)


def _kind(hooks: dict[str, object], event: str) -> str:
    groups = hooks[event]
    assert isinstance(groups, list)
    return str(groups[0]["hooks"][0]["type"])


def test_the_http_socket_unit_listens_on_the_users_port_and_names_its_fd_for_the_collector(home: Path) -> None:
    """install --user writes the HTTP socket unit on http_address (auto: 10000 + uid % 10000), with
    the fd name the collector looks for, and the service wants it."""
    output = _install_units()
    text = (_units(home) / HTTP_SOCKET_NAME).read_text()
    assert f"ListenStream=127.0.0.1:{default_http_port()}\n" in text
    assert f"FileDescriptorName={HTTP_FD_NAME}\n" in text
    assert f"Service={SERVICE_NAME}\n" in text
    service = (_units(home) / SERVICE_NAME).read_text()
    assert f"Wants={HTTP_SOCKET_NAME}\n" in service
    assert f"enable --now {SOCKET_NAME} {HTTP_SOCKET_NAME}" in output
    assert f"http socket: on 127.0.0.1:{default_http_port()}" in output


def test_http_address_off_writes_no_http_socket_and_removes_an_earlier_one(home: Path) -> None:
    _install_units()
    (home / ".config" / "gz-ia").mkdir()
    (home / ".config" / "gz-ia" / "collector.toml").write_text('http_address = "off"\n')
    output = _install_units()
    assert not (_units(home) / HTTP_SOCKET_NAME).exists()
    assert "Wants=" not in (_units(home) / SERVICE_NAME).read_text()
    assert "http socket: not installed: http_address is off" in output


def test_the_three_units_pass_systemd_analyze_verify(home: Path, short_tmp: Path) -> None:
    _install_units()
    runtime = short_tmp / "xdg-runtime"
    runtime.mkdir()
    result = subprocess.run(
        ["systemd-analyze", "verify", "--user", "--man=no", SOCKET_NAME, HTTP_SOCKET_NAME, SERVICE_NAME],
        cwd=_units(home),
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr, result.stdout) == (0, "", "")


def test_auto_installs_the_command_hook_until_the_port_is_held_then_http(home: Path) -> None:
    """No unit, then a unit not enabled: the command hook, saying why; enabled: http hooks (and
    SessionStart the command hook forwarding to them)."""
    output, hooks = _install_hooks(home)
    assert "hooks: inbox hook: no service manager holds" in output
    assert _kind(hooks, "PreToolUse") == "command"
    _install_units()
    output, hooks = _install_hooks(home)
    assert f"{HTTP_SOCKET_NAME} is not enabled" in output
    assert _kind(hooks, "PreToolUse") == "command"
    _enable(home)
    output, hooks = _install_hooks(home)
    assert f"hooks: http hooks: {_units(home) / HTTP_SOCKET_NAME} holds 127.0.0.1:{default_http_port()}" in output
    url = f"http://127.0.0.1:{default_http_port()}/hooks/claude-code"
    key = json.loads((env.state_dir() / "http.json").read_text())["key"]  # drawn by install: the hooks carry it
    assert hooks["PreToolUse"] == [{"matcher": "*", "hooks": [{
        "type": "http", "url": url, "timeout": 5,
        "headers": {"X-Gz-Ia-Key": key, "X-Gz-Ia-Root": "$GZ_IA_ROOT", "X-Gz-Ia-Disabled": "$GZ_IA_DISABLED"},
        "allowedEnvVars": ["GZ_IA_ROOT", "GZ_IA_DISABLED"],
    }]}]  # fmt: skip
    start = hooks["SessionStart"]
    assert isinstance(start, list)
    assert start[0]["hooks"][0]["command"].endswith(f"hook claude-code --http {url}")


def test_auto_sees_a_unit_on_another_address_and_forced_transports_obey(home: Path) -> None:
    _install_units()
    _enable(home)
    (home / ".config" / "gz-ia").mkdir()
    (home / ".config" / "gz-ia" / "collector.toml").write_text('http_address = "127.0.0.1:19999"\n')
    output, hooks = _install_hooks(home)
    assert f"listens on 127.0.0.1:{default_http_port()}, not on http_address 127.0.0.1:19999" in output
    assert _kind(hooks, "Stop") == "command"
    output, hooks = _install_hooks(home, "--hooks", "http")
    assert "hooks: --hooks http" in output
    assert hooks["Stop"][0]["hooks"][0]["url"] == "http://127.0.0.1:19999/hooks/claude-code"  # type: ignore[index]
    output, hooks = _install_hooks(home, "--hooks", "command")
    assert _kind(hooks, "Stop") == "command"
    (home / ".config" / "gz-ia" / "collector.toml").write_text('http_address = "off"\n')
    import sys

    refused = subprocess.run(
        [sys.executable, *GZ_IA, "install", "claude-code", "--hooks", "http"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2
    assert "http_address is off" in refused.stderr
