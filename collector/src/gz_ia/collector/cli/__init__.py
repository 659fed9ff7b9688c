"""The command lines: ``gz-ia`` for people and scripts, ``gz-ia-collector`` for the daemon.

Exit codes of ``gz-ia``: 0 success (an empty result included), 1 the collector rejected the event or
the session is unknown, 2 usage error, 69 (``EX_UNAVAILABLE``) no collector reachable, 75
(``EX_TEMPFAIL``) ``session log``: no collector answered and the event is spooled.

Each command (or group) lives in its own module as a plain click command that the module exports;
the groups here name it as ``"module:attr"``, and :class:`._lazy.LazyGroup` imports the module and adds
the command only when it is run, completed or listed by ``--help``. No command module imports this
package back. The ``gz-ia`` entry point is :func:`gz_ia.collector.entry.main`, which runs
``session log`` and ``hook`` without importing this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from gz_ia.client import env

from ._common import version_option
from ._lazy import LazyGroup

__all__ = ["collector_main", "main"]


@click.group(
    cls=LazyGroup,
    lazy_commands={
        "disk-usage": "._gc:disk_usage_command",
        "export": "._export:export",
        "gc": "._gc:gc_command",
        "hook": "._integrations:hook",
        "install": "._integrations:install",
        "key": "._key:key_command",
        "logs": "._reading:all_logs",
        "mcp": "._mcp:mcp_command",
        "sessions": "._sessions:sessions_command",
        "status": "._status:status",
        "ui": "._ui:ui_command",
    },
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option("--socket", default=None, envvar=env.GZ_IA_SOCKET, help="Collector socket [env: GZ_IA_SOCKET].")
@click.option(
    "--root",
    default=None,
    envvar=env.GZ_IA_ROOT,
    help="Session root (.harness directory) [env: GZ_IA_ROOT; default: found like .git].",
)
@version_option("gz-ia")
def main(socket: str | None, root: str | None) -> None:
    """Log and read gz-ia agent sessions."""


@main.group(
    cls=LazyGroup,
    lazy_commands={
        "diff": "._answers:session_diff_command",
        "log": "._session:session_log",
        "logs": "._reading:session_logs",
        "tree": "._tree:session_tree_command",
        "view": "._view:session_view",
        "why": "._answers:session_why_command",
    },
)
def session() -> None:
    """Work with one session."""


if TYPE_CHECKING:
    from ._collector import collector_main


def __getattr__(name: str) -> Any:
    # The collector's own command line (``gz-ia-collector``) is loaded only when it is asked for:
    # a reading command does not pay for it.
    if name == "collector_main":
        from ._collector import collector_main

        return collector_main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
