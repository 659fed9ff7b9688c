"""``gz-ia session view``: write a session (and its subagents) as a self-contained HTML timeline."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import session
from ._common import EXIT_NOT_FOUND, root_of
from ._complete import complete_session_id


@session.command("view")
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
@click.pass_context
def session_view(ctx: click.Context, session_id: str, tree: bool, output: str | None, title: str | None) -> None:
    """Write SESSION_ID as a timeline: actions per agent, stages as segments, failures in red.

    The page is one file with its CSS and script inline: it opens offline, and can be attached to
    a bug report as it is.
    """
    from gz_ia.collector.reading import SessionNotFound
    from gz_ia.collector.timeline import load_tree
    from gz_ia.collector.timeline_html import render_html
    from gz_ia.collector.view import plural

    try:
        node = load_tree(root_of(ctx), session_id, tree=tree)
    except SessionNotFound as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    page = render_html(node, title=title)
    if output == "-":
        sys.stdout.write(page)
        return
    path = Path(output) if output else Path(f"{session_id}.timeline.html")
    path.write_text(page, encoding="utf-8")
    sessions = sum(1 for _ in node.walk())
    click.echo(f"wrote {path} ({plural(sessions, 'session')}, {plural(node.events, 'event')} in {session_id})")
