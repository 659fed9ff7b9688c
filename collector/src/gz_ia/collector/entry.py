"""The ``gz-ia`` entry point: ``session log`` and ``hook`` without loading the click CLI.

Both run once per event, from scripts and from an agent's hooks, where the interpreter's start is
most of their cost; importing click, asyncio and every command module would triple it. So the entry
point handles a well-formed ``gz-ia [--socket S] [--root R] session log ...`` or
``gz-ia hook claude-code|codex|gemini`` itself, and hands everything else to the click CLI: other commands,
``--help``, and any command line it does not fully understand (the click CLI then answers it, with
the same behaviour and its usage errors). Even msgspec, pathlib and typing would be a large part of a
call's cost: the fast paths import only what :mod:`.oneshot.ledger` needs to reach a collector.
"""

from __future__ import annotations

import os
import sys

from gz_ia.client import env
from gz_ia.collector.oneshot.session_log import attr_scalar, log_event

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final


__all__ = ["fast_path", "main"]

_GLOBAL_OPTIONS: Final = {"--socket": "socket", "--root": "root"}
_LOG_VALUE_OPTIONS: Final = {
    "--action": "action",
    "--stage": "stage",
    "--status": "status",
    "--agent": "agent",
    "--role": "role",
    "--parent": "parent",
    "--root-session": "root_session",
    "--duration": "duration",
    "--error": "error",
    "--attr": "attr",
    "--timeout": "timeout",
}


def main() -> None:
    """Run ``gz-ia``: the fast paths, else the click CLI."""
    code = fast_path(sys.argv[1:])
    if code is None:
        from gz_ia.collector.cli import main as cli

        try:
            cli()
        except SystemExit as ending:
            _end_now(ending)
            raise
    else:
        sys.exit(code)


def _end_now(ending: SystemExit) -> None:
    """End the process without freeing, one by one, every object the command made (as mypy ends).

    A search over a big root leaves hundreds of thousands of them; tearing them and every module
    down only delays the prompt. The exit handlers still run and the standard streams are flushed.
    Returns (the ordinary exit follows) while another thread runs, which must be joined rather than
    killed, or when the exit code is not a number or a stream cannot be flushed.
    """
    import atexit
    import threading

    code = 0 if ending.code is None else ending.code
    if not isinstance(code, int) or threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # the ordinary exit reports it
    atexit._run_exitfuncs()
    os._exit(code)


def fast_path(argv: list[str]) -> int | None:
    """Run ``argv`` if it is a command this module handles; None hands it to the click CLI."""
    options: dict[str, str] = {}
    index = 0
    while index < len(argv) and argv[index].startswith("--"):
        name, value, index = _option(argv, index, _GLOBAL_OPTIONS)
        if name is None:
            return None
        options[name] = value
    command = argv[index : index + 2]
    rest = argv[index + 2 :]
    if command == ["hook", "claude-code"] and not rest:
        from gz_ia.collector.integrations.claude_code.command_hook import run_hook

        return run_hook(
            sys.stdin.buffer.read(),
            socket_path=_socket_path(options),
            root=env.absolute(options["root"]) if options.get("root") else None,
        )
    if command in (["hook", "codex"], ["hook", "gemini"]) and not rest:
        return _agent_hook(command[1], options)
    if command == ["session", "log"]:
        return _session_log(rest, options)
    return None


def _agent_hook(agent: str, options: dict[str, str]) -> int:
    """``gz-ia hook codex`` or ``gz-ia hook gemini``, as ``cli._agent_hooks`` defines them."""
    if agent == "codex":
        from gz_ia.collector.integrations.codex import run_hook
    else:
        from gz_ia.collector.integrations.gemini import run_hook
    root = env.absolute(options["root"]) if options.get("root") else None
    return run_hook(sys.stdin.buffer.read(), socket_path=_socket_path(options), root=root)


def _option(argv: list[str], index: int, known: dict[str, str]) -> tuple[str | None, str, int]:
    """Parse ``--name value`` or ``--name=value`` at ``argv[index]``; (None, ...) if not understood."""
    word = argv[index]
    flag, equals, value = word.partition("=")
    name = known.get(flag)
    if name is None:
        return None, "", index
    if equals:
        return name, value, index + 1
    if index + 1 >= len(argv):
        return None, "", index
    return name, argv[index + 1], index + 2


def _socket_path(options: dict[str, str]) -> str:
    # Without the flag, $GZ_IA_SOCKET as click reads it (an empty one counts as absent), else the default.
    return env.normal(options["socket"]) if options.get("socket") else env.locate_socket()


def _root(options: dict[str, str]) -> str:
    return env.absolute(options["root"]) if options.get("root") else env.locate_root()


def _session_log(argv: list[str], global_options: dict[str, str]) -> int | None:
    """``gz-ia session log``, exactly as ``cli._session`` defines it; None for anything unusual."""
    from gz_ia.client.limits import STAGES, STATUSES
    from gz_ia.collector.oneshot.ledger import plain_event

    values: dict[str, str] = {}
    attrs: list[str] = []
    positional: list[str] = []
    quiet = False
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            positional.extend(argv[index + 1 :])
            break
        if word in ("-q", "--quiet"):
            quiet = True
            index += 1
            continue
        if word.startswith("-") and word != "-":
            name, value, index = _option(argv, index, _LOG_VALUE_OPTIONS)
            if name is None:
                return None
            if name == "attr":
                attrs.append(value)
            else:
                values[name] = value
            continue
        positional.append(word)
        index += 1
    for name, variable in (("agent", env.GZ_IA_AGENT), ("role", env.GZ_IA_ROLE)):
        if name not in values and os.environ.get(variable):
            values[name] = os.environ[variable]
    stage = values.get("stage", "").upper()
    status = values.get("status", "OK").upper()
    if len(positional) != 1 or "action" not in values or "agent" not in values:
        return None
    if stage not in STAGES or status not in STATUSES:
        return None
    try:
        duration = int(values["duration"]) if "duration" in values else None
        timeout = float(values.get("timeout", "5.0"))
        parsed_attrs = _parse_attrs(attrs)
    except ValueError:
        return None
    if (duration is not None and duration < 0) or parsed_attrs is None:
        return None
    if status == "FAILED" and not values.get("error"):
        return None
    session_id = positional[0]
    parent = values.get("parent")
    if parent is None:
        parent = env.inherited_parent(session_id)
    top = values.get("root_session")
    event = plain_event(
        session_id=session_id,
        action=values["action"],
        stage=stage,
        status=status,
        agent=values["agent"],
        role=values.get("role"),
        parent_session_id=parent,
        duration_ms=duration,
        error=values.get("error"),
        attrs=parsed_attrs or None,
        root_session_id=env.inherited_root(session_id, parent) if top is None else top,
    )
    return log_event(
        event,
        socket_path=_socket_path(global_options),
        root=_root(global_options),
        timeout=timeout,
        quiet=quiet,
    )


def _parse_attrs(values: list[str]) -> dict[str, bool | int | float | str] | None:
    """``KEY=VALUE`` items as ``--attr`` reads them; None if one is malformed (click then says so)."""
    attrs: dict[str, bool | int | float | str] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            return None
        attrs[key] = attr_scalar(raw)
    return attrs


if __name__ == "__main__":  # ``python -m gz_ia.collector.entry``: where no gz-ia script is installed
    main()
