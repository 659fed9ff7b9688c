"""A pager for long human output on a terminal, as journalctl and git use one.

The pager is ``$GZ_IA_PAGER``, else ``$PAGER``, else ``less``; an empty value or ``cat`` means none.
``less`` gets ``LESS=FRSXMK`` unless ``LESS`` is set (journalctl's choice: quit if one screen, keep
colours, chop long lines, keep the screen, and quit on Ctrl-C). It is never used when stdout is not a
terminal, for the JSON formats, or when following; ``--no-pager`` turns it off.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Final

from gz_ia.client import env

__all__ = ["paged"]

_LESS: Final = "FRSXMK"


def _command() -> str | None:
    for name in (env.GZ_IA_PAGER, "PAGER"):
        value = os.environ.get(name)
        if value is not None:
            value = value.strip()
            return None if value in ("", "cat") else value
    return "less"


@contextlib.contextmanager
def paged(wanted: bool) -> Iterator[None]:
    """Send what is written to stdout (``sys.stdout`` and file descriptor 1) through the pager.

    Args:
        wanted: the command allows a pager (a human format, not following, no ``--no-pager``);
            it is still used only when stdout is a terminal.
    """
    command = _command() if wanted else None
    if command is None or not _is_terminal():
        yield
        return
    import subprocess  # only a terminal reader pages: a script's reads never start a process

    environment = dict(os.environ)
    environment.setdefault("LESS", _LESS)
    sys.stdout.flush()
    try:
        pager = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=environment)  # noqa: S602 - the user's own pager command line
    except OSError:
        yield  # no such pager: print as if there were none
        return
    assert pager.stdin is not None
    saved = os.dup(1)
    os.dup2(pager.stdin.fileno(), 1)
    pager.stdin.close()
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        # Give the terminal back to the pager alone, then wait until the user quits it.
        os.dup2(saved, 1)
        os.close(saved)
        with contextlib.suppress(KeyboardInterrupt):
            pager.wait()


def _is_terminal() -> bool:
    try:
        return os.isatty(1) and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False
