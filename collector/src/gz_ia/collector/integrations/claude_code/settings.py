"""``gz-ia install claude-code``: the hook entries in Claude Code's ``settings.json``, merged and removed.

Claude Code reads hooks from ``~/.claude/settings.json`` (user) and ``.claude/settings.json``
(project) under ``"hooks"``: per hook event a list of matcher groups, each with a list of command
handlers. Installing adds one group per event that :mod:`.mapping` uses, holding one handler
that runs ``gz-ia hook claude-code``; every other setting, group and handler stays as it was.
A handler is gz-ia's when its command ends with :data:`HOOK_ARGS`: installing again updates it in
place (never a second one), and uninstalling removes exactly those handlers, then the groups and
events they leave empty.
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

__all__ = ["HOOK_ARGS", "HOOK_EVENTS", "TOOL_EVENTS", "hook_command", "install", "uninstall"]

HOOK_ARGS: Final = "hook claude-code"
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
    return isinstance(handler, dict) and str(handler.get("command", "")).rstrip().endswith(HOOK_ARGS)


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


def install(path: Path, command: str) -> list[str]:
    """Add (or update) gz-ia's hook handler for each of :data:`HOOK_EVENTS`; return the events changed.

    Raises:
        SettingsError: the file is not a settings object; it is left as it is.
    """
    settings = _read(path)
    hooks: dict[str, Any] = settings.setdefault("hooks", {})
    handler = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT}
    changed: list[str] = []
    for event in HOOK_EVENTS:
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
