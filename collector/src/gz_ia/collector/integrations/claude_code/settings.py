"""``gz-ia install claude-code``: the hook entries in Claude Code's ``settings.json``, merged and removed.

Claude Code reads hooks from ``~/.claude/settings.json`` (user) and ``.claude/settings.json``
(project) under ``"hooks"``: per hook event a list of matcher groups, each with a list of command
handlers. Installing adds one group per event that :mod:`.mapping` uses, holding one handler
that runs ``gz-ia hook claude-code``; every other setting, group and handler stays as it was.
A handler is gz-ia's when its command runs :data:`HOOK_ARGS` or it posts to gz-ia's hook path
(:data:`HTTP_HOOK_PATH`): installing again updates it in place (never a second one), also from one
transport to the other, and uninstalling removes exactly those handlers (the file's bytes from
before the install put back when nothing else changed), as for every agent
(:mod:`..hook_settings`).

With the inbox (the default where http hooks are not installed) the command is a shell script that
leaves the payload for the collector (:mod:`.inbox_drop`), written beside the settings' owner's data
(:func:`inbox_script_path`) and falling back to ``gz-ia hook claude-code``.

With the ``http`` transport every event is an ``http`` handler posting to the collector, except
those Claude Code never posts (:data:`COMMAND_ONLY_EVENTS`): there the command hook runs with
``--http URL`` and forwards the payload to the same place, so the collector holds all of a session's
state.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from gz_ia.collector.integrations import hook_settings
from gz_ia.collector.integrations.hook_settings import HookSpec, SettingsError

from .inbox_drop import drop_script

__all__ = [
    "COMMAND_ONLY_EVENTS",
    "HOOK_ARGS",
    "HOOK_EVENTS",
    "HTTP_ENV_VARS",
    "HTTP_HOOK_PATH",
    "KEY_HEADER_NAME",
    "SPEC",
    "TOOL_EVENTS",
    "SettingsError",
    "hook_command",
    "http_handler",
    "inbox_script_path",
    "install",
    "uninstall",
    "write_inbox_script",
]

HOOK_ARGS: Final = "hook claude-code"
HTTP_HOOK_PATH: Final = "/hooks/claude-code"
"""Where the collector's HTTP server takes Claude Code's hooks."""
COMMAND_ONLY_EVENTS: Final = frozenset({"SessionStart"})
"""Events whose ``http`` handlers Claude Code does not run (seen with the real binary: it posts
every other event, and no SessionStart)."""
KEY_HEADER_NAME: Final = "X-Gz-Ia-Key"
"""The header that carries the user's key (the HTTP side refuses a hook without it)."""
HTTP_ENV_VARS: Final = {"X-Gz-Ia-Root": "GZ_IA_ROOT", "X-Gz-Ia-Disabled": "GZ_IA_DISABLED"}
"""Headers an ``http`` handler sends, each the value of a variable of Claude Code's environment (as
a command hook would read it; empty when unset)."""
TOOL_EVENTS: Final = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
"""Events that take a ``matcher``: ``"*"``, every tool."""
HOOK_EVENTS: Final = (
    *TOOL_EVENTS,
    "PostToolBatch",
    "SessionStart",
    "SessionEnd",
    "UserPromptSubmit",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
)
HOOK_TIMEOUT: Final = 5
"""Seconds Claude Code gives the hook; it returns long before (a spooled event costs no waiting)."""


@dataclass(frozen=True)
class ClaudeCodeSpec(HookSpec):
    """Claude Code's hooks: command handlers, or with ``http_url`` http ones posting there with the
    user's ``key`` (the command hook forwarding to it where Claude Code posts nothing)."""

    http_url: str | None = None
    key: str = ""

    def handler(self, event: str, command: str) -> dict[str, Any]:
        if self.http_url is None:
            return super().handler(event, command)
        if event in COMMAND_ONLY_EVENTS:
            return super().handler(event, f"{command} --http {shlex.quote(self.http_url)}")
        return http_handler(self.http_url, self.key)

    def is_ours(self, handler: object) -> bool:
        if isinstance(handler, dict) and handler.get("type") == "http":
            return str(handler.get("url", "")).rstrip("/").endswith(HTTP_HOOK_PATH)
        command = str(handler.get("command", "")).rstrip() if isinstance(handler, dict) else ""
        return command.endswith(HOOK_ARGS) or f" {HOOK_ARGS} --http " in command


SPEC: Final = ClaudeCodeSpec(
    hook_args=HOOK_ARGS,
    events=HOOK_EVENTS,
    default_timeout=HOOK_TIMEOUT,
    matchers=dict.fromkeys(TOOL_EVENTS, "*"),
)


def hook_command() -> str:
    """The command line that runs this installation's ``gz-ia hook claude-code``, by absolute path."""
    return hook_settings.hook_command(HOOK_ARGS)


def http_handler(url: str, key: str) -> dict[str, Any]:
    """gz-ia's ``http`` handler posting to ``url`` with the user's ``key`` and the headers of
    :data:`HTTP_ENV_VARS`."""
    return {
        "type": "http",
        "url": url,
        "timeout": HOOK_TIMEOUT,
        "headers": {KEY_HEADER_NAME: key, **{header: f"${name}" for header, name in HTTP_ENV_VARS.items()}},
        "allowedEnvVars": list(HTTP_ENV_VARS.values()),
    }


def inbox_script_path() -> Path:
    """Where ``gz-ia install claude-code`` writes the inbox hook: ``$XDG_DATA_HOME/gz-ia/claude-code-hook``."""
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "gz-ia" / "claude-code-hook"


def write_inbox_script(script: Path, command: str) -> str:
    """Write the inbox hook at ``script`` (``0700``), falling back to ``command``; return the command
    line that runs it (ending in :data:`HOOK_ARGS`, as every gz-ia hook command does)."""
    script.parent.mkdir(parents=True, exist_ok=True)
    partial = script.with_name(f".{script.name}.{os.getpid()}")
    partial.write_text(drop_script(command))
    partial.chmod(0o700)
    partial.replace(script)  # a hook running meanwhile reads the old script or the new one, whole
    return f"{shlex.quote(str(script))} {HOOK_ARGS}"


def install(
    path: Path, command: str, *, http_url: str | None = None, key: str = "", inbox_script: Path | None = None
) -> list[str]:
    """Add (or update) gz-ia's hook handler for each of :data:`HOOK_EVENTS`; return the events changed.

    Args:
        path: the settings file.
        command: the command hook's command line.
        http_url: install ``http`` handlers posting there instead (see :data:`COMMAND_ONLY_EVENTS`),
            with ``key``; the file is then made readable by its owner alone (it holds the key).
        inbox_script: install the inbox hook, written there, which runs ``command`` where it finds
            no inbox.

    Raises:
        SettingsError: the file is not a settings object; it is left as it is.
    """
    if inbox_script is not None:
        command = write_inbox_script(inbox_script, command)
    changed = hook_settings.install(path, replace(SPEC, http_url=http_url, key=key), command)
    if http_url is not None:
        path.chmod(0o600)
    return changed


def uninstall(path: Path) -> list[str]:
    """Remove every gz-ia hook handler (either transport), and the groups and events left empty;
    return the events changed.

    Raises:
        SettingsError: the file is not a settings object; it is left as it is.
    """
    return hook_settings.uninstall(path, SPEC)
