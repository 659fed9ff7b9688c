"""``gz-ia install claude-code``: the hook entries in Claude Code's ``settings.json``, merged and removed.

Claude Code reads hooks from ``~/.claude/settings.json`` (user) and ``.claude/settings.json``
(project) under ``"hooks"``: per hook event a list of matcher groups, each with a list of command
handlers. Installing adds one group per event that :mod:`.mapping` uses, holding one handler
that runs ``gz-ia hook claude-code``; every other setting, group and handler stays as it was.
A handler is gz-ia's when its command runs :data:`HOOK_ARGS` or it posts to gz-ia's hook path
(:data:`HTTP_HOOK_PATH`): installing again updates it in place (never a second one), also from one
transport to the other, and uninstalling removes exactly those handlers, then the groups and events
they leave empty.

With the ``http`` transport every event is an ``http`` handler posting to the collector, except
those Claude Code never posts (:data:`COMMAND_ONLY_EVENTS`): there the command hook runs with
``--http URL`` and forwards the payload to the same place, so the collector holds all of a session's
state.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

from gz_ia.collector.errors import CollectorError

__all__ = [
    "COMMAND_ONLY_EVENTS",
    "HOOK_ARGS",
    "HOOK_EVENTS",
    "HTTP_ENV_VARS",
    "HTTP_HOOK_PATH",
    "TOOL_EVENTS",
    "hook_command",
    "http_handler",
    "install",
    "uninstall",
]

HOOK_ARGS: Final = "hook claude-code"
HTTP_HOOK_PATH: Final = "/hooks/claude-code"
"""Where the collector's HTTP server takes Claude Code's hooks."""
COMMAND_ONLY_EVENTS: Final = frozenset({"SessionStart"})
"""Events whose ``http`` handlers Claude Code does not run (seen with the real binary: it posts
every other event, and no SessionStart)."""
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


class SettingsError(CollectorError):
    """The settings file exists but is not a JSON object with a ``hooks`` object: left untouched."""


def hook_command() -> str:
    """The command line that runs this installation's ``gz-ia hook claude-code``, by absolute path."""
    beside = Path(sys.executable).with_name("gz-ia")
    if beside.exists():
        return f"{shlex.quote(str(beside.absolute()))} {HOOK_ARGS}"
    found = shutil.which("gz-ia")
    if found:
        return f"{shlex.quote(str(Path(found).absolute()))} {HOOK_ARGS}"
    return f"{shlex.quote(str(Path(sys.executable).absolute()))} -m gz_ia.collector.entry {HOOK_ARGS}"


def _is_ours(handler: object) -> bool:
    if not isinstance(handler, dict):
        return False
    if handler.get("type") == "http":
        return str(handler.get("url", "")).rstrip("/").endswith(HTTP_HOOK_PATH)
    command = str(handler.get("command", "")).rstrip()
    return command.endswith(HOOK_ARGS) or f" {HOOK_ARGS} --http " in command


def _handler(event: str, command: str, http_url: str | None) -> dict[str, Any]:
    """gz-ia's handler of ``event``: the command hook, or with ``http_url`` an http one (the
    command hook forwarding to it where Claude Code posts nothing)."""
    if http_url is None:
        return {"type": "command", "command": command, "timeout": HOOK_TIMEOUT}
    if event in COMMAND_ONLY_EVENTS:
        return {"type": "command", "command": f"{command} --http {shlex.quote(http_url)}", "timeout": HOOK_TIMEOUT}
    return http_handler(http_url)


def http_handler(url: str) -> dict[str, Any]:
    """gz-ia's ``http`` handler posting to ``url``, with the headers of :data:`HTTP_ENV_VARS`."""
    return {
        "type": "http",
        "url": url,
        "timeout": HOOK_TIMEOUT,
        "headers": {header: f"${name}" for header, name in HTTP_ENV_VARS.items()},
        "allowedEnvVars": list(HTTP_ENV_VARS.values()),
    }


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        settings = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc}); fix it first, nothing was changed") from exc
    if not isinstance(settings, dict) or not isinstance(settings.get("hooks", {}), dict):
        raise SettingsError(f'{path} is not a settings object with a "hooks" object; nothing was changed')
    return settings


def _write(path: Path, settings: dict[str, Any]) -> None:
    """Replace ``path`` atomically, keeping its mode (Claude Code may be reading it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(settings, out, indent=2, ensure_ascii=False)
            out.write("\n")
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def install(path: Path, command: str, *, http_url: str | None = None) -> list[str]:
    """Add (or update) gz-ia's hook handler for each of :data:`HOOK_EVENTS`; return the events changed.

    Args:
        path: the settings file.
        command: the command hook's command line.
        http_url: install ``http`` handlers posting there instead (see :data:`COMMAND_ONLY_EVENTS`).

    Raises:
        SettingsError: the file is not a settings object; it is left as it is.
    """
    settings = _read(path)
    hooks: dict[str, Any] = settings.setdefault("hooks", {})
    changed: list[str] = []
    for event in HOOK_EVENTS:
        handler = _handler(event, command, http_url)
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise SettingsError(f'{path}: "hooks.{event}" is not a list; nothing was changed')
        ours = [h for group in groups if isinstance(group, dict) for h in group.get("hooks", []) if _is_ours(h)]
        if ours:
            for existing in ours:
                if existing != handler:
                    existing.clear()
                    existing.update(handler)
                    changed.append(event)
            continue
        group: dict[str, Any] = {"matcher": "*"} if event in TOOL_EVENTS else {}
        group["hooks"] = [dict(handler)]
        groups.append(group)
        changed.append(event)
    if changed:
        _write(path, settings)
    return sorted(set(changed), key=HOOK_EVENTS.index)


def uninstall(path: Path) -> list[str]:
    """Remove every gz-ia hook handler, and the groups and events left empty; return the events changed.

    Raises:
        SettingsError: the file is not a settings object; it is left as it is.
    """
    settings = _read(path)
    hooks = settings.get("hooks")
    if not hooks:
        return []
    changed: list[str] = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(handlers, list) or not any(_is_ours(h) for h in handlers):
                kept_groups.append(group)
                continue
            changed.append(event)
            group["hooks"] = [h for h in handlers if not _is_ours(h)]
            if group["hooks"]:
                kept_groups.append(group)
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    if not hooks:
        del settings["hooks"]
    if changed:
        _write(path, settings)
    return sorted(set(changed), key=lambda event: (event not in HOOK_EVENTS, event))
