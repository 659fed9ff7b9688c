"""The command lines: ``gz-ia`` for people and scripts, ``gz-ia-collector`` for the daemon.

Exit codes of ``gz-ia``: 0 success (an empty result included), 1 the collector rejected the event or
the session is unknown, 2 usage error, 69 (``EX_UNAVAILABLE``) no collector reachable, 75
(``EX_TEMPFAIL``) ``session log``: no collector answered and the event is spooled.

Each command group lives in its own module and registers itself on import below. The ``gz-ia``
entry point is :func:`gz_ia.collector.entry.main`, which runs ``session log`` and ``hook`` without
importing this package.
"""

from __future__ import annotations

import click

from gz_ia.client import env

from ._common import version

__all__ = ["collector_main", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--socket", default=None, envvar=env.GZ_IA_SOCKET, help="Collector socket [env: GZ_IA_SOCKET].")
@click.option(
    "--root",
    default=None,
    envvar=env.GZ_IA_ROOT,
    help="Session root (.harness directory) [env: GZ_IA_ROOT; default: found like .git].",
)
@click.version_option(version(), prog_name="gz-ia")
def main(socket: str | None, root: str | None) -> None:
    """Log and read gz-ia agent sessions."""


@main.group()
def session() -> None:
    """Work with one session."""


from . import (  # noqa: E402, F401  - commands register themselves on the groups
    _export,
    _gc,
    _install,
    _integrations,
    _mcp,
    _reading,
    _session,
    _sessions,
    _status,
    _tree,
    _view,
)
from ._collector import collector_main  # noqa: E402
