"""``gz-ia session view``: write a session (and its subagents) as a self-contained HTML timeline.

The events are those ``gz-ia session logs`` would print with the same ``-n``, ``--since`` and
``--until`` (and ``--tree``), read as a stream: the page draws at most ``--max-cycles`` action
cycles, the newest, and sums up the others, so that neither the page nor the memory of the
command grows with the session.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import click

from ._common import EXIT_GAP, EXIT_NOT_FOUND, root_of
from ._complete import complete_session_id
from ._log_options import line_count, time_window, window_options

__all__ = ["session_view"]

MAX_CYCLES: Final = 2_000
"""Action cycles a page draws by default; the older ones are summed up per action."""


def _max_cycles(value: str) -> int | None:
    if value == "all":
        return None
    try:
        count = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number or 'all'", param_hint="--max-cycles") from None
    if count < 1:
        raise click.BadParameter("must be >= 1", param_hint="--max-cycles")
    return count


@click.command("view")
@click.argument("session_id", shell_complete=complete_session_id)
@click.option("--tree", is_flag=True, help="Include every subagent session below SESSION_ID.")
@click.option(
    "-o",
    "--output",
    default=None,
    metavar="FILE",
    help="HTML file to write; '-' for standard output [default: SESSION_ID.timeline.html].",
)
@click.option("--title", default=None, help="Page title [default: gz-ia session SESSION_ID].")
@window_options("Only the last N events, as gz-ia session logs -n takes them [default: all].")
@click.option(
    "--max-cycles",
    default=str(MAX_CYCLES),
    metavar="N|all",
    show_default=True,
    help="Draw at most the newest N action cycles; the older ones are summed up per action on the page.",
)
@click.pass_context
def session_view(
    ctx: click.Context,
    session_id: str,
    tree: bool,
    output: str | None,
    title: str | None,
    lines: str | None,
    since: str | None,
    until: str | None,
    max_cycles: str,
) -> None:
    """Write SESSION_ID as a timeline: actions per agent, stages as segments, failures in red.

    The page is one file with its CSS and script inline: it opens offline, and can be attached to
    a bug report as it is. -n, --since and --until choose the events as for gz-ia session logs.
    """
    from gz_ia.collector import reading
    from gz_ia.collector.views.html import Window, render_html
    from gz_ia.collector.views.terminal import plural
    from gz_ia.collector.views.timeline import TimelineBuilder

    from ._gaps import GapReport
    from ._history import stored_history

    bound = _max_cycles(max_cycles)
    count = line_count(lines, follow=False, since=since)
    first, last = time_window(since, until, datetime.now(UTC))
    filters = reading.Filters(since=first, until=last)
    root = root_of(ctx)
    gaps = GapReport()
    try:
        top = _skeleton(root, session_id, tree=tree)
        members = [current.session_id for _, current in top.walk()]
        anchors: dict[str, str] = {}
        for member in members:
            try:
                anchors[member] = reading.end_cursor(root, member)
            except reading.SessionNotFound:
                if not tree:
                    raise
        builder = TimelineBuilder(top, max_cycles=bound)
        history = stored_history(
            root, members, dict.fromkeys(members), anchors, filters, count,
            grep=None, reverse=False, on_gap=gaps, time_order=tree,
        )  # fmt: skip
        for entry in history:
            builder.add(entry.event)
    except reading.SessionNotFound as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    node = builder.finish()
    window = Window(since=since, until=until, lines=count, max_cycles=bound, left_out=builder.left_out)
    page = render_html(node, title=title, window=window)
    if output == "-":
        sys.stdout.write(page)
    else:
        path = Path(output) if output else Path(f"{session_id}.timeline.html")
        # The page holds what the session's files hold, which only their owner may read: so does it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT: make it private too
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(page)
        sessions = sum(1 for _ in node.walk())
        drawn = "" if not builder.left_out.cycles else f", {plural(builder.left_out.cycles, 'older cycle')} summed up"
        click.echo(
            f"wrote {path} ({plural(sessions, 'session')}, {plural(node.events, 'event')} in {session_id}{drawn})"
        )
    if gaps:
        ctx.exit(EXIT_GAP)


def _skeleton(root: Path, session_id: str, *, tree: bool) -> Any:
    """The session's node, with ``tree`` its subagents' below it (the reader's tree), no events yet."""
    from gz_ia.collector import reading
    from gz_ia.collector.views.timeline import SessionNode

    if not tree:
        reading.end_cursor(root, session_id)  # SessionNotFound before anything is written
        return SessionNode(session_id)

    def build(item: Any) -> SessionNode:  # as deep as the reader's tree: at most MAX_TREE_DEPTH
        return SessionNode(item.session_id, children=[build(child) for child in item.children])

    return build(reading.session_tree(root, session_id))
