"""Helpers shared by the ``gz-ia`` and ``gz-ia-collector`` commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import click

from gz_ia.client import env
from gz_ia.collector.oneshot import session_log

__all__ = [
    "EXIT_FAILED",
    "EXIT_GAP",
    "EXIT_MISSING_EXTRA",
    "EXIT_NOT_FOUND",
    "EXIT_NO_MATCH",
    "EXIT_TIMEOUT",
    "EXIT_UNAVAILABLE",
    "EXIT_UNHEALTHY",
    "root_of",
    "socket_path_of",
    "version",
    "version_option",
]

# The exit codes of the reading commands, documented once in docs/reading.md ("Exit codes"):
# 0 everything asked for was shown (an empty result included); 1 error (no root, no session, a root
# of a newer layout, no --grep match); 2 usage; 3 shown, but events in the range were missing;
# 4 --until-finished saw the followed action fail; 124 --timeout expired (as timeout(1) exits).
EXIT_NOT_FOUND: Final = 1
EXIT_GAP: Final = 3
"""What was shown is all that could be read, but events in the range are missing (deleted by retention
under a cursor, or an unreadable segment or line); stderr says which seqs and why."""
EXIT_FAILED: Final = 4
"""``-f --until-finished``: the followed action finished FAILED."""
EXIT_TIMEOUT: Final = 124
"""``--timeout`` expired before the session appeared or the followed action finished (as ``timeout(1)``)."""
EXIT_NO_MATCH: Final = 1
"""``gz-ia logs --grep`` matched nothing (journalctl -g does the same), so scripts can test for a hit."""
EXIT_UNHEALTHY: Final = 1
"""``gz-ia status``: the collector answered, unhealthy (a share of a sharded collector is down)."""
EXIT_MISSING_EXTRA: Final = 2
"""``gz-ia mcp`` and ``gz-ia export otel`` without their extra installed (a usage error, as click's)."""
EXIT_UNAVAILABLE: Final = session_log.EXIT_UNAVAILABLE
"""``EX_UNAVAILABLE`` from sysexits.h: no collector is reachable (the same code as ``session log``'s)."""


def version() -> str:
    """Return the installed collector's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version("gz-ia-collector")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


_F = TypeVar("_F", bound=Callable[..., Any])


def version_option(prog_name: str) -> Callable[[_F], _F]:
    """``--version``, printed as click's ``version_option`` prints it; the version is looked up only
    when asked for, since :mod:`importlib.metadata` would be most of a reading command's imports."""

    def show(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(f"{prog_name}, version {version()}", color=ctx.color)
            ctx.exit()

    return click.option(
        "--version",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=show,
        help="Show the version and exit.",
    )


def socket_path_of(ctx: click.Context) -> Path:
    """The socket named by ``gz-ia --socket`` / ``GZ_IA_SOCKET``, else the default one."""
    value = ctx.find_root().params.get("socket")
    return Path(value) if value else env.default_socket_path()


def root_of(ctx: click.Context) -> Path:
    """The root named by ``gz-ia --root`` / ``GZ_IA_ROOT``, else the one found like ``.git``."""
    value = ctx.find_root().params.get("root")
    if value:
        return Path(value).absolute()
    passed_over: list[str] = []
    root = env.find_root(passed_over=passed_over)
    if passed_over:
        click.echo(env.passed_over_warning(passed_over, str(root)), err=True)
    return root
