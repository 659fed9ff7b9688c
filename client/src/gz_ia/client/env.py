"""Environment variables understood by gz-ia, and where the socket and the session root are.

Every variable is read at call time, never at import, so that a test or a parent process can change
it and the next call sees the change.

The rules work on ``str`` paths (:func:`locate_socket`, :func:`locate_root`, :func:`locate_spool`),
written as ``str(Path(...))`` would write them; the ``Path`` functions wrap them. The one-shot
commands (``gz-ia session log``, the Claude Code hook) use the ``str`` ones: importing
:mod:`pathlib` (and :mod:`typing`) would cost them more than the rest of a call.
"""

from __future__ import annotations

import os

from .limits import MAX_SESSION_ID_LENGTH

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Final

__all__ = [
    "DEFAULT_LINGER_MS",
    "GZ_IA_AGENT",
    "GZ_IA_DISABLED",
    "GZ_IA_EXIT_TIMEOUT",
    "GZ_IA_LINGER_MS",
    "GZ_IA_PAGER",
    "GZ_IA_PARENT_PID",
    "GZ_IA_PARENT_SESSION_ID",
    "GZ_IA_REDACTION_DISABLE",
    "GZ_IA_REDACTION_ENABLED",
    "GZ_IA_REDACTION_PATTERNS",
    "GZ_IA_ROLE",
    "GZ_IA_ROOT",
    "GZ_IA_ROOT_SESSION_ID",
    "GZ_IA_SOCKET",
    "GZ_IA_SPOOL_DIR",
    "GZ_IA_STATE_DIR",
    "GZ_IA_TRUSTED_UIDS",
    "HARNESS_DIR",
    "absolute",
    "config_home",
    "default_socket_path",
    "default_spool_dir",
    "exit_timeout",
    "find_root",
    "harness_above",
    "inherited_parent",
    "inherited_root",
    "linger",
    "locate_root",
    "locate_socket",
    "locate_spool",
    "normal",
    "parent_session",
    "passed_over_warning",
    "root_session",
    "state_dir",
    "state_home",
    "tracing_disabled",
    "trusted_uids",
]

GZ_IA_SOCKET: Final = "GZ_IA_SOCKET"
"""Path of the collector's Unix socket, for the collector and every client alike."""

GZ_IA_ROOT: Final = "GZ_IA_ROOT"
"""Session root (a ``.harness`` directory) to write to and read from, overriding discovery."""

GZ_IA_PARENT_SESSION_ID: Final = "GZ_IA_PARENT_SESSION_ID"
"""Set by a session scope for child processes: the session that spawned them."""

GZ_IA_ROOT_SESSION_ID: Final = "GZ_IA_ROOT_SESSION_ID"
"""Set beside ``GZ_IA_PARENT_SESSION_ID`` by a session scope: the root of that session's tree (the
session itself when it has no parent), which child processes' subagent sessions name as their
``root_session_id`` so that the tree is found from its root even if sessions between never log."""

GZ_IA_SPOOL_DIR: Final = "GZ_IA_SPOOL_DIR"
"""Where clients spill events while the collector is unreachable, and where the collector adopts them."""

GZ_IA_DISABLED: Final = "GZ_IA_DISABLED"
"""``1``/``true``/``yes``: the default client is the null client; nothing is sent."""

GZ_IA_PARENT_PID: Final = "GZ_IA_PARENT_PID"
"""Set beside ``GZ_IA_PARENT_SESSION_ID`` by a session scope: the process that set it, whose own
later sessions are its siblings, not its subagents."""

GZ_IA_EXIT_TIMEOUT: Final = "GZ_IA_EXIT_TIMEOUT"
"""Seconds a process's clients may spend delivering at its exit before they spool the rest (2)."""

GZ_IA_LINGER_MS: Final = "GZ_IA_LINGER_MS"
"""Milliseconds a client holds a lone event back so that the events after it share its frame
(250; 0 sends each at once). See :func:`linger`."""

GZ_IA_AGENT: Final = "GZ_IA_AGENT"
"""The ``--agent`` of ``gz-ia session log`` when the option is not given."""

GZ_IA_ROLE: Final = "GZ_IA_ROLE"
"""The ``--role`` of ``gz-ia session log`` when the option is not given."""

GZ_IA_STATE_DIR: Final = "GZ_IA_STATE_DIR"
"""Where the collector keeps its own state (the roots it serves), instead of ``$XDG_STATE_HOME/gz-ia``."""

GZ_IA_PAGER: Final = "GZ_IA_PAGER"
"""The pager of ``gz-ia``'s long human output on a terminal (before ``PAGER``; empty or ``cat``: none)."""

GZ_IA_TRUSTED_UIDS: Final = "GZ_IA_TRUSTED_UIDS"
"""Comma-separated uids, besides the user's own and root, whose collector a client may talk to: the
user of a collector shared on purpose (its ``allow_uids`` lists this user)."""

GZ_IA_REDACTION_ENABLED: Final = "GZ_IA_REDACTION_ENABLED"
"""``false`` turns redaction off, at ingest (the collector's ``redaction.enabled``) and in the client's
spool alike (docs/user-guide.md, "Secrets")."""

GZ_IA_REDACTION_PATTERNS: Final = "GZ_IA_REDACTION_PATTERNS"
"""More redaction rules, one ``name=regex`` per line, for the collector's ingest and the client's spool."""

GZ_IA_REDACTION_DISABLE: Final = "GZ_IA_REDACTION_DISABLE"
"""Default redaction rules to leave out, by name, separated by commas."""

HARNESS_DIR: Final = ".harness"
SOCKET_NAME: Final = "collector.sock"
_FORMAT: Final = 0o170000
_DIRECTORY: Final = 0o040000


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


def _private_dir() -> str:
    """The per-user directory under /tmp for what has no better place (created 0700 by its user)."""
    return f"/tmp/gz-ia-{os.getuid()}"  # noqa: S108 - private: ownership checked by the collector and its clients


def locate_socket() -> str:
    """:func:`default_socket_path` as ``str``."""
    explicit = os.environ.get(GZ_IA_SOCKET)
    if explicit:
        return normal(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return normal(_join(runtime, "gz-ia/" + SOCKET_NAME))
    return _private_dir() + "/" + SOCKET_NAME


def default_socket_path() -> Path:
    """Return the socket path: ``$GZ_IA_SOCKET``, else ``$XDG_RUNTIME_DIR/gz-ia/collector.sock``.

    Without ``XDG_RUNTIME_DIR`` (no login session, containers, cron) the socket lives in a private
    per-user directory ``/tmp/gz-ia-<uid>/``; the collector creates it 0700, and the collector and its
    clients refuse one owned by someone else (:mod:`gz_ia.client.trust`).
    """
    from pathlib import Path

    return Path(locate_socket())


def _home() -> str:
    # $HOME, else the passwd entry; a uid without either gets a private directory: an agent must not crash.
    home = os.environ.get("HOME")
    if home is None:
        home = os.path.expanduser("~")
        if home == "~":
            return _private_dir() + "/home"
    return normal(home)


def _default_root() -> str:
    data = os.environ.get("XDG_DATA_HOME") or _join(_home(), ".local/share")
    return normal(_join(data, "gz-ia/" + HARNESS_DIR))


def default_root() -> Path:
    """Return the root used outside any workspace: ``$XDG_DATA_HOME/gz-ia/.harness``."""
    from pathlib import Path

    return Path(_default_root())


def locate_root(start: str | None = None, passed_over: list[str] | None = None) -> str:
    """:func:`find_root` as ``str``."""
    explicit = os.environ.get(GZ_IA_ROOT)
    if explicit:
        return absolute(explicit)
    return harness_above(start, passed_over) or _default_root()


def harness_above(start: str | None = None, passed_over: list[str] | None = None) -> str | None:
    """The nearest ``<ancestor>/.harness`` directory of ``start`` (default: the working directory)
    that belongs to this user, or None: :func:`locate_root` without ``$GZ_IA_ROOT`` and the default root.

    A ``.harness`` of another uid is passed over (and appended to ``passed_over``): anyone may make one
    in a shared directory above a workspace (``/tmp``, a group's tree), where the collector would
    refuse to write this user's events and a reader would show what someone else put there.
    """
    here = absolute(start) if start else normal(os.getcwd())
    me = os.geteuid()
    while True:
        candidate = _join(here, HARNESS_DIR)
        try:
            info = os.stat(candidate)
        except OSError:
            info = None
        if info is not None and info.st_mode & _FORMAT == _DIRECTORY:
            if info.st_uid == me:
                return candidate
            if passed_over is not None:
                passed_over.append(candidate)
        parent = here.rsplit("/", 1)[0] or "/"
        if here.startswith("//") and parent == "/":
            parent = "//"
        if parent == here:
            return None
        here = parent


def find_root(start: Path | None = None, passed_over: list[str] | None = None) -> Path:
    """Find the session root the way git finds ``.git``.

    ``$GZ_IA_ROOT`` wins; otherwise the nearest ancestor of ``start`` (default: the working directory)
    holding a ``.harness`` directory of this user gives ``<ancestor>/.harness`` (one of another uid
    is passed over and listed in ``passed_over``); otherwise :func:`default_root`. The result is
    absolute but symlinks are kept as written: the collector checks them.
    """
    from pathlib import Path

    return Path(locate_root(None if start is None else os.fspath(start), passed_over))


def passed_over_warning(passed_over: list[str], root: str) -> str:
    """The sentence a program prints when it passed over a ``.harness`` of another user."""
    them = ", ".join(passed_over)
    return (
        f"gz-ia: passing over {them}: another user's directory, which may have been made to catch your "
        f"events; writing and reading {root} instead (set {GZ_IA_ROOT} to choose)"
    )


def _state_home() -> str:
    return os.environ.get("XDG_STATE_HOME") or _join(_home(), ".local/state")


def state_home() -> Path:
    """Return ``$XDG_STATE_HOME`` (``~/.local/state``): where gz-ia's state directories live."""
    from pathlib import Path

    return Path(_state_home())


def state_dir() -> Path:
    """Return the collector's state directory: ``$GZ_IA_STATE_DIR``, else ``$XDG_STATE_HOME/gz-ia``."""
    from pathlib import Path

    return Path(os.environ.get(GZ_IA_STATE_DIR) or _join(_state_home(), "gz-ia"))


def config_home() -> Path:
    """Return ``$XDG_CONFIG_HOME`` (``~/.config``)."""
    from pathlib import Path

    return Path(os.environ.get("XDG_CONFIG_HOME") or _join(_home(), ".config"))


def locate_spool() -> str:
    """:func:`default_spool_dir` as ``str``."""
    explicit = os.environ.get(GZ_IA_SPOOL_DIR)
    if explicit:
        return normal(explicit)
    return normal(_join(_state_home(), "gz-ia/spool"))


def default_spool_dir() -> Path:
    """Return ``$GZ_IA_SPOOL_DIR``, else ``$XDG_STATE_HOME/gz-ia/spool`` (``~/.local/state/gz-ia/spool``)."""
    from pathlib import Path

    return Path(locate_spool())


_ID_FIRST: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ID_REST: Final = _ID_FIRST | {"."}


def _is_session_id(value: str) -> bool:
    """The schema's session id pattern, checked without :mod:`re` or msgspec (tests hold the two equal)."""
    return 0 < len(value) <= MAX_SESSION_ID_LENGTH and value[0] in _ID_FIRST and all(char in _ID_REST for char in value)


_invalid_parent_reported = False


def parent_session() -> str | None:
    """Return ``$GZ_IA_PARENT_SESSION_ID`` when it is set and a valid session id.

    An invalid value is reported once per process (a ``gz_ia.client`` logging warning) and ignored:
    a parent's mistake must not make every event of this process's sessions fail validation.
    """
    value = os.environ.get(GZ_IA_PARENT_SESSION_ID)
    if not value:
        return None
    if _is_session_id(value):
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


def root_session() -> str | None:
    """Return ``$GZ_IA_ROOT_SESSION_ID`` when it is set and a valid session id (else None: an event
    without a root is still placed under its parent)."""
    value = os.environ.get(GZ_IA_ROOT_SESSION_ID)
    return value if value and _is_session_id(value) else None


def inherited_root(session_id: str, parent_session_id: str | None) -> str | None:
    """Return the ``root_session_id`` of ``session_id`` whose parent is ``parent_session_id``, as the
    environment tells it: ``$GZ_IA_ROOT_SESSION_ID``, when that parent is the one the environment
    names (``$GZ_IA_PARENT_SESSION_ID``) and the root is neither that parent nor the session itself.

    Anything else leaves the root unknown (None): an explicit other parent may belong to another tree.
    """
    if parent_session_id is None or parent_session_id != os.environ.get(GZ_IA_PARENT_SESSION_ID):
        return None
    root = root_session()
    return root if root is not None and root not in (parent_session_id, session_id) else None


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


def trusted_uids() -> frozenset[int]:
    """Return the uids of ``$GZ_IA_TRUSTED_UIDS`` (entries that are not numbers are ignored)."""
    entries = os.environ.get(GZ_IA_TRUSTED_UIDS, "").split(",")
    return frozenset(int(entry) for entry in (entry.strip() for entry in entries) if entry.isdigit())


def exit_timeout() -> float:
    """Return ``$GZ_IA_EXIT_TIMEOUT`` in seconds (2 when unset, empty or zero)."""
    return float(os.environ.get(GZ_IA_EXIT_TIMEOUT, "2") or 2)


DEFAULT_LINGER_MS: Final = 250


def linger() -> float:
    """Return ``$GZ_IA_LINGER_MS`` in seconds (0.25 when unset or not a number; 0 when negative)."""
    value = os.environ.get(GZ_IA_LINGER_MS, "")
    try:
        milliseconds = float(value) if value else DEFAULT_LINGER_MS
    except ValueError:
        milliseconds = DEFAULT_LINGER_MS
    return max(0.0, milliseconds) / 1000
