"""How the reading commands write and end: the output stream, colour, and a quiet end on Ctrl-C or ``| head``.

Shared by ``gz-ia logs``, ``gz-ia session logs``, ``gz-ia sessions`` and ``gz-ia session tree``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable
from typing import IO, Any

import click

from ._common import EXIT_NOT_FOUND

__all__ = ["Output", "not_found", "quietly", "summary_json", "use_colour"]


def use_colour(choice: str, stream: IO[str]) -> bool:
    """``--color``: an explicit choice wins, then ``NO_COLOR`` (no-color.org), then whether it is a TTY."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Output:
    """Writes lines to stdout; flushes each line when following (pipes and files see them at once).

    Otherwise a pipe or a file gets blocks of lines even when Python runs unbuffered
    (``PYTHONUNBUFFERED``, set in many container images), where each line would be a system call of
    its own: thousands of lines are one call per 8 KiB. A terminal still gets each line as it comes.
    """

    def __init__(self, *, flush_each: bool) -> None:
        stream = sys.stdout
        if not flush_each and isinstance(stream, io.TextIOWrapper) and stream.write_through and not stream.isatty():
            stream.reconfigure(write_through=False)
        self.stream: IO[str] = stream
        self.flush_each = flush_each

    def line(self, text: str) -> None:
        """Write one line."""
        self.stream.write(text + "\n")
        if self.flush_each:
            self.stream.flush()

    def flush(self) -> None:
        """Flush what was written."""
        self.stream.flush()


def quietly(function: Callable[..., None]) -> Callable[..., None]:
    """End on Ctrl-C or a closed pipe without a traceback."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            function(*args, **kwargs)
        except KeyboardInterrupt:
            with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                sys.stdout.flush()
            raise click.exceptions.Exit(0) from None
        except BrokenPipeError:
            # Python would complain again when it flushes stdout at exit: point it at /dev/null.
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(0) from None

    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


def not_found(ctx: click.Context, exc: Exception) -> None:
    """Say why nothing could be read and exit 1 (a missing root says how a root is chosen)."""
    from gz_ia.collector import reading

    message = str(exc)
    if isinstance(exc, reading.RootNotFound):
        message += " (choose one with --root or GZ_IA_ROOT; a collector creates it when a client first logs to it)"
    click.echo(f"gz-ia: {message}", err=True)
    ctx.exit(EXIT_NOT_FOUND)


def tokens_json(tokens: tuple[int, int, int, int]) -> dict[str, int]:
    """Tokens by kind as JSON: ``input``, ``output``, ``cache_read``, ``cache_creation`` and ``total``."""
    from gz_ia.client.usage import TOKEN_KINDS

    return {**dict(zip(TOKEN_KINDS, tokens, strict=True)), "total": sum(tokens)}


def summary_json(summary: Any, tree: tuple[tuple[int, int, int, int], float] | None = None) -> dict[str, Any]:
    """A session summary as JSON (``gz-ia sessions --json``, ``gz-ia session tree --json``): times in UTC.

    ``tree``: the session's usage with its subagents' (``tree_tokens``, ``tree_cost_usd``).
    """
    usage: dict[str, Any] = {
        "tokens": tokens_json(summary.tokens),
        "cost_usd": summary.cost_usd,
        "model": summary.model or None,
    }
    if tree is not None:
        usage["tree_tokens"] = tokens_json(tree[0])
        usage["tree_cost_usd"] = tree[1]
    return {
        "session_id": summary.session_id,
        "parent_session_id": summary.parent_session_id,
        "root_session_id": summary.root_session_id,
        "agent": summary.agent,
        "first_time": summary.first_time.isoformat().replace("+00:00", "Z") if summary.first_time else None,
        "last_time": summary.last_time.isoformat().replace("+00:00", "Z") if summary.last_time else None,
        "events": summary.events,
        "open_actions": summary.open_actions,
        "failures": summary.failures,
        "status": summary.status,
        "segments": summary.segments,
        "incomplete": summary.incomplete,
        "unreadable": list(summary.unreadable),
        "damage": list(summary.damage),
        **usage,
    }
