"""Where the socket, the session root and the spool are, as :mod:`gz_ia.client.env` finds them, in str paths.

The one-shot commands need these three answers and nothing else from ``env``, whose ``Path`` results
cost them the import of :mod:`pathlib` (with the regular expressions, enums and URL parsing it pulls
in), more than the rest of a call. The rules are ``env``'s, read from the same variables at call
time; paths come out as ``str(Path(...))`` would write them (the tests hold the two side by side).
"""

from __future__ import annotations

import os

__all__ = [
    "absolute",
    "default_socket_path",
    "default_spool_dir",
    "find_root",
    "inherited_parent",
    "is_safe_session_id",
    "normal",
    "tracing_disabled",
]

_ID_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ID_REST = _ID_FIRST | {"."}
_MAX_ID = 128


def normal(path: str) -> str:
    """``path`` as ``str(PurePosixPath(path))`` writes it: no empty or ``.`` parts, no trailing slash."""
    slashes = len(path) - len(path.lstrip("/"))
    root = "//" if slashes == 2 else "/" if slashes else ""  # POSIX leaves a leading "//" to the system
    parts = [part for part in path.split("/") if part and part != "."]
    return root + "/".join(parts) if root or parts else "."


def absolute(path: str) -> str:
    """``str(Path(path).absolute())``: joined to the working directory, ``..`` and symlinks kept."""
    return normal(path if path.startswith("/") else os.getcwd() + "/" + path)


def _join(directory: str, name: str) -> str:
    return directory + name if directory.endswith("/") else directory + "/" + name


def _home() -> str:
    home = os.environ.get("HOME")
    if home is None:
        home = os.path.expanduser("~")  # the passwd entry
        if home == "~":  # none: env's private per-uid fallback
            return f"/tmp/gz-ia-{os.getuid()}/home"  # noqa: S108 - private, as in env
    return normal(home)


def default_socket_path() -> str:
    """``env.default_socket_path()``: ``$GZ_IA_SOCKET``, else the runtime directory's, else /tmp's."""
    explicit = os.environ.get("GZ_IA_SOCKET")
    if explicit:
        return normal(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return normal(runtime + "/gz-ia/collector.sock")
    return f"/tmp/gz-ia-{os.getuid()}/collector.sock"  # noqa: S108 - private, ownership checked


def find_root(start: str | None = None) -> str:
    """``env.find_root(start)``: ``$GZ_IA_ROOT``, else the nearest ``.harness`` up from ``start`` (the
    working directory), else ``$XDG_DATA_HOME/gz-ia/.harness``."""
    explicit = os.environ.get("GZ_IA_ROOT")
    if explicit:
        return absolute(explicit)
    here = absolute(start) if start else normal(os.getcwd())
    while True:
        candidate = _join(here, ".harness")
        if os.path.isdir(candidate):
            return candidate
        parent = here.rsplit("/", 1)[0] or "/"
        if here.startswith("//") and parent == "/":
            parent = "//"
        if parent == here:
            break
        here = parent
    data = os.environ.get("XDG_DATA_HOME") or _join(_home(), ".local/share")
    return normal(data + "/gz-ia/.harness")


def default_spool_dir() -> str:
    """``env.default_spool_dir()``: ``$GZ_IA_SPOOL_DIR``, else ``$XDG_STATE_HOME/gz-ia/spool``."""
    explicit = os.environ.get("GZ_IA_SPOOL_DIR")
    if explicit:
        return normal(explicit)
    state = os.environ.get("XDG_STATE_HOME") or _join(_home(), ".local/state")
    return normal(state + "/gz-ia/spool")


def is_safe_session_id(value: str) -> bool:
    """``schema.is_safe_session_id``: the session id pattern, checked without the re module."""
    return 0 < len(value) <= _MAX_ID and value[0] in _ID_FIRST and all(char in _ID_REST for char in value)


def inherited_parent(session_id: str) -> str | None:
    """``env.inherited_parent(session_id)``: ``$GZ_IA_PARENT_SESSION_ID`` unless it is that session."""
    value = os.environ.get("GZ_IA_PARENT_SESSION_ID")
    if not value:
        return None
    if not is_safe_session_id(value):  # env warns about it once: let it
        from gz_ia.client import env

        return env.inherited_parent(session_id)
    return value if value != session_id else None


def tracing_disabled() -> bool:
    """``env.tracing_disabled()``: ``$GZ_IA_DISABLED`` asks for nothing to be logged."""
    return os.environ.get("GZ_IA_DISABLED", "").strip().lower() in {"1", "true", "yes", "on"}
