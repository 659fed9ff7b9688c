"""Environment variables understood by gz-ia, and where the socket and the session root are.

Every variable is read at call time, never at import, so that a test or a parent process can change
it and the next call sees the change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = [
    "GZ_IA_DISABLED",
    "GZ_IA_PAGER",
    "GZ_IA_PARENT_SESSION_ID",
    "GZ_IA_ROOT",
    "GZ_IA_SOCKET",
    "GZ_IA_SPOOL_DIR",
    "HARNESS_DIR",
    "default_socket_path",
    "default_spool_dir",
    "find_root",
    "inherited_parent",
    "parent_session",
    "tracing_disabled",
]

GZ_IA_SOCKET: Final = "GZ_IA_SOCKET"
"""Path of the collector's Unix socket, for the collector and every client alike."""

GZ_IA_ROOT: Final = "GZ_IA_ROOT"
"""Session root (a ``.harness`` directory) to write to and read from, overriding discovery."""

GZ_IA_PARENT_SESSION_ID: Final = "GZ_IA_PARENT_SESSION_ID"
"""Set by a session scope for child processes: the session that spawned them."""

GZ_IA_SPOOL_DIR: Final = "GZ_IA_SPOOL_DIR"
"""Where clients spill events while the collector is unreachable, and where the collector adopts them."""

GZ_IA_DISABLED: Final = "GZ_IA_DISABLED"
"""``1``/``true``/``yes``: the default client is the null client; nothing is sent."""

GZ_IA_PAGER: Final = "GZ_IA_PAGER"
"""The pager of ``gz-ia``'s long human output on a terminal (before ``PAGER``; empty or ``cat``: none)."""

HARNESS_DIR: Final = ".harness"
SOCKET_NAME: Final = "collector.sock"


def default_socket_path() -> Path:
    """Return the socket path: ``$GZ_IA_SOCKET``, else ``$XDG_RUNTIME_DIR/gz-ia/collector.sock``.

    Without ``XDG_RUNTIME_DIR`` (no login session, containers, cron) the socket lives in a private
    per-user directory ``/tmp/gz-ia-<uid>/``; the collector creates it 0700 and refuses one owned by
    someone else.
    """
    explicit = os.environ.get(GZ_IA_SOCKET)
    if explicit:
        return Path(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "gz-ia" / SOCKET_NAME
    return Path("/tmp") / f"gz-ia-{os.getuid()}" / SOCKET_NAME  # noqa: S108 - private, ownership checked


def _home() -> Path:
    # Path.home() raises without $HOME for a uid that has no passwd entry; an agent must not crash.
    try:
        return Path.home()
    except RuntimeError:
        return Path("/tmp") / f"gz-ia-{os.getuid()}" / "home"  # noqa: S108 - private per-uid fallback


def default_root() -> Path:
    """Return the root used outside any workspace: ``$XDG_DATA_HOME/gz-ia/.harness``."""
    data = os.environ.get("XDG_DATA_HOME") or str(_home() / ".local" / "share")
    return Path(data) / "gz-ia" / HARNESS_DIR


def find_root(start: Path | None = None) -> Path:
    """Find the session root the way git finds ``.git``.

    ``$GZ_IA_ROOT`` wins; otherwise the nearest ancestor of ``start`` (default: the working directory)
    holding a ``.harness`` directory gives ``<ancestor>/.harness``; otherwise :func:`default_root`.
    The result is absolute but symlinks are kept as written: the collector checks them.
    """
    explicit = os.environ.get(GZ_IA_ROOT)
    if explicit:
        return Path(explicit).absolute()
    here = (start or Path.cwd()).absolute()
    for directory in (here, *here.parents):
        candidate = directory / HARNESS_DIR
        if candidate.is_dir():
            return candidate
    return default_root()


def default_spool_dir() -> Path:
    """Return ``$GZ_IA_SPOOL_DIR``, else ``$XDG_STATE_HOME/gz-ia/spool`` (``~/.local/state/gz-ia/spool``)."""
    explicit = os.environ.get(GZ_IA_SPOOL_DIR)
    if explicit:
        return Path(explicit)
    state = os.environ.get("XDG_STATE_HOME") or str(_home() / ".local" / "state")
    return Path(state) / "gz-ia" / "spool"


_invalid_parent_reported = False


def parent_session() -> str | None:
    """Return ``$GZ_IA_PARENT_SESSION_ID`` when it is set and a valid session id.

    An invalid value is reported once per process (a ``gz_ia.client`` logging warning) and ignored:
    a parent's mistake must not make every event of this process's sessions fail validation.
    """
    value = os.environ.get(GZ_IA_PARENT_SESSION_ID)
    if not value:
        return None
    from .schema import is_safe_session_id  # here: the module itself stays free of msgspec

    if is_safe_session_id(value):
        return value
    global _invalid_parent_reported  # noqa: PLW0603 - once per process
    if not _invalid_parent_reported:
        _invalid_parent_reported = True
        import logging  # here: agents that never take this path never pay for importing it

        logging.getLogger("gz_ia.client").warning(
            "gz-ia: ignoring %s=%r, not a valid session id: this process's sessions get no parent",
            GZ_IA_PARENT_SESSION_ID,
            value,
        )
    return None


def inherited_parent(session_id: str) -> str | None:
    """Return ``$GZ_IA_PARENT_SESSION_ID`` as the parent of ``session_id``, unless it is that session.

    Commands and tools that log on behalf of a script (``gz-ia session log``, the MCP server) use it so
    that a subagent started inside a session scope names its parent without being told.
    """
    inherited = parent_session()
    return inherited if inherited != session_id else None


def tracing_disabled() -> bool:
    """Tell whether ``$GZ_IA_DISABLED`` asks for the null client."""
    return os.environ.get(GZ_IA_DISABLED, "").strip().lower() in {"1", "true", "yes", "on"}
