"""Which machine a session came from, on a fleet hub's root (docs/operations.md, "Many machines").

A hub writes machine ``laptop``'s session ``s1`` as ``laptop.s1`` (two machines' sessions of one id
kept apart) and marks its root with a ``fleet-hub`` file, so readers know the first part of an id
names a machine there and nowhere else.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["HUB_MARK", "host_of", "hosted_sessions", "is_hub_root"]

HUB_MARK: Final = "fleet-hub"
"""The file a hub leaves at the top of its root."""


def is_hub_root(root: Path) -> bool:
    """Whether ``root`` is a fleet hub's (its sessions named ``<host>.<id>``)."""
    return os.path.exists(root / HUB_MARK)


def host_of(session_id: str) -> str | None:
    """The machine of a hub's session id (None for an id without one)."""
    host, dot, _rest = session_id.partition(".")
    return host if dot and host else None


def hosted_sessions(root: Path, session_id: str) -> list[str]:
    """The hub's sessions that are ``session_id`` on some machine (``<host>.<session_id>``), sorted."""
    suffix = f".{session_id}.events.jsonl"
    try:
        names = os.listdir(root / "sessions")
    except OSError:
        return []
    hosts = [name[: -len(suffix)] for name in names if name.endswith(suffix)]
    return sorted(f"{host}.{session_id}" for host in hosts if host and "." not in host)
