"""A machine's session on a fleet hub: the hub names it ``HOST.ID`` (docs/operations.md, "Many
machines"), and every command that takes a session id takes the machine's own id there too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gz_ia.client import env

__all__ = ["exists", "host_option", "hosted"]


def host_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--host NAME``: machine NAME's session, where several machines used the id."""
    return click.option(
        "--host",
        default=None,
        metavar="NAME",
        help="On a fleet hub: machine NAME's session SESSION_ID (where several machines used that id).",
    )(command)


def hosted(ctx: click.Context, session_id: str, host: str | None, *, choose: str = "--host") -> str:
    """The session id to read: ``HOST.ID`` with ``host``; on a hub, the one machine's session that
    used ``session_id`` when the hub holds none of that name (``choose`` says how to pick one
    where several machines used it)."""
    if host is not None:
        return f"{host}.{session_id}"
    from gz_ia.collector import reading

    named = ctx.find_root().params.get("root")  # as root_of finds it, its warning left to the command
    root = Path(named).absolute() if named else env.find_root(passed_over=[])
    if not reading.is_hub_root(root) or exists(root, session_id):
        return session_id
    found = reading.hosted_sessions(root, session_id)
    if len(found) > 1:
        hosts = ", ".join(str(reading.host_of(name)) for name in found)
        raise click.UsageError(f"session {session_id!r} exists on several machines ({hosts}): choose one with {choose}")
    return found[0] if found else session_id


def exists(root: Path, session_id: str) -> bool:
    """Whether ``root`` holds a session ``session_id``."""
    from gz_ia.collector import reading

    try:
        reading.end_cursor(root, session_id)
    except reading.SessionNotFound:
        return False
    return True
