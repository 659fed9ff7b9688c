"""``gz-ia install <agent>``: gz-ia's hook entries in an agent's JSON settings file, merged and removed.

Codex (``~/.codex/hooks.json``) and Gemini CLI (``~/.gemini/settings.json``) read hooks in Claude
Code's shape: under ``"hooks"``, per hook event a list of matcher groups, each with a list of
command handlers. Installing adds one group per event the agent's module uses, holding one handler
that runs ``gz-ia hook <agent>``; every other setting, group and handler stays as it was. A handler
is gz-ia's when its command ends with the :class:`HookSpec`'s ``hook_args``: installing again updates
it in place (never a second one), and uninstalling removes exactly those handlers, then the groups
and events they leave empty.

Uninstalling is exact: installing keeps the file's bytes as they were (or that there was none) in
gz-ia's state directory (``installs/``), and when the file without gz-ia's handlers means the same
as it did then, uninstalling puts those bytes back (or removes the file it created). Otherwise (the
user changed other settings meanwhile) the file is written again without gz-ia's handlers.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gz_ia.client import env
from gz_ia.collector.errors import CollectorError

__all__ = ["HookSpec", "SettingsError", "hook_command", "install", "uninstall"]


class SettingsError(CollectorError):
    """The settings file exists but is not a JSON object with a ``hooks`` object: left untouched."""


@dataclass(frozen=True)
class HookSpec:
    """How one agent names its hooks in its settings file.

    Args:
        hook_args: how gz-ia's hook command ends (``hook codex``): what marks a handler as gz-ia's.
        events: the hook events gz-ia installs, in the order it lists them.
        matchers: the ``matcher`` of an event's group, for events that take one.
        timeouts: the handler's ``timeout`` per event, in the agent's unit; ``default_timeout`` else.
        extra: further keys of gz-ia's handler (e.g. a ``name``).
    """

    hook_args: str
    events: tuple[str, ...]
    default_timeout: int
    matchers: dict[str, str] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)

    def handler(self, event: str, command: str) -> dict[str, Any]:
        return {
            **self.extra,
            "type": "command",
            "command": command,
            "timeout": self.timeouts.get(event, self.default_timeout),
        }

    def is_ours(self, handler: object) -> bool:
        return isinstance(handler, dict) and str(handler.get("command", "")).rstrip().endswith(self.hook_args)


def hook_command(hook_args: str) -> str:
    """The command line that runs this installation's ``gz-ia <hook_args>``, by absolute path."""
    beside = Path(sys.executable).with_name("gz-ia")
    if beside.exists():
        return f"{shlex.quote(str(beside.absolute()))} {hook_args}"
    found = shutil.which("gz-ia")
    if found:
        return f"{shlex.quote(str(Path(found).absolute()))} {hook_args}"
    return f"{shlex.quote(str(Path(sys.executable).absolute()))} -m gz_ia.collector.entry {hook_args}"


def _parse(path: Path, text: str | None) -> dict[str, Any]:
    try:
        settings = json.loads(text) if text and text.strip() else {}
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc}); fix it first, nothing was changed") from exc
    if not isinstance(settings, dict) or not isinstance(settings.get("hooks", {}), dict):
        raise SettingsError(f'{path} is not a settings object with a "hooks" object; nothing was changed')
    return settings


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically, keeping its mode (the agent may be reading it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _dump(settings: dict[str, Any]) -> str:
    return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"


def _record_path(path: Path) -> Path:
    """Where the file's bytes from before the install are kept, in gz-ia's state directory."""
    digest = hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:32]
    return env.state_dir() / "installs" / f"{digest}.json"


def _has_ours(settings: dict[str, Any], spec: HookSpec) -> bool:
    return any(
        spec.is_ours(handler)
        for groups in settings.get("hooks", {}).values()
        if isinstance(groups, list)
        for group in groups
        if isinstance(group, dict) and isinstance(group.get("hooks"), list)
        for handler in group["hooks"]
    )


def _normal(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without an empty ``hooks`` object: what uninstalling leaves means the same."""
    if settings.get("hooks") == {}:
        return {key: value for key, value in settings.items() if key != "hooks"}
    return settings


def install(path: Path, spec: HookSpec, command: str) -> list[str]:
    """Add (or update) gz-ia's hook handler for each of the spec's events; return the events changed.

    Raises:
        SettingsError: the file is not a settings object; it is left as it is.
    """
    original = _read_text(path)
    settings = _parse(path, original)
    fresh = not _has_ours(settings, spec)
    hooks: dict[str, Any] = settings.setdefault("hooks", {})
    changed: list[str] = []
    for event in spec.events:
        handler = spec.handler(event, command)
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise SettingsError(f'{path}: "hooks.{event}" is not a list; nothing was changed')
        ours = [h for group in groups if isinstance(group, dict) for h in group.get("hooks", []) if spec.is_ours(h)]
        if ours:
            for existing in ours:
                if existing != handler:
                    existing.clear()
                    existing.update(handler)
                    changed.append(event)
            continue
        group: dict[str, Any] = {"matcher": spec.matchers[event]} if event in spec.matchers else {}
        group["hooks"] = [handler]
        groups.append(group)
        changed.append(event)
    if not changed:
        return []
    record = _record_path(path)
    if fresh or not record.exists():
        record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write(record, json.dumps({"path": str(path.absolute()), "original": original}) + "\n")
    _write(path, _dump(settings))
    return sorted(set(changed), key=spec.events.index)


def uninstall(path: Path, spec: HookSpec) -> list[str]:
    """Remove every gz-ia hook handler, and the groups and events left empty; return the events changed.

    Raises:
        SettingsError: the file is not a settings object; it is left as it is.
    """
    settings = _parse(path, _read_text(path))
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
            if not isinstance(handlers, list) or not any(spec.is_ours(h) for h in handlers):
                kept_groups.append(group)
                continue
            changed.append(event)
            group["hooks"] = [h for h in handlers if not spec.is_ours(h)]
            if group["hooks"]:
                kept_groups.append(group)
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    if not changed:
        return []
    if not hooks:
        del settings["hooks"]
    _restore(path, settings)
    return sorted(set(changed), key=lambda event: (event not in spec.events, event))


def _restore(path: Path, settings: dict[str, Any]) -> None:
    """Write ``settings``: the bytes from before the install when they mean the same, else anew."""
    record = _record_path(path)
    try:
        original = json.loads(record.read_text(encoding="utf-8"))["original"]
    except (OSError, ValueError, KeyError, TypeError):
        original = False  # no record: nothing to put back
    try:
        same = original is not False and _normal(_parse(path, original)) == _normal(settings)
    except SettingsError:
        same = False
    if same and original is None:
        path.unlink()
    elif same:
        _write(path, original)
    else:
        _write(path, _dump(settings))
    record.unlink(missing_ok=True)
