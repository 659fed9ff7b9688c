"""``gz-ia session tree``: draw a session and its subagent sessions with each node's status and duration."""

from __future__ import annotations

import json
from typing import Any

import click

from ._common import EXIT_NOT_FOUND, root_of
from ._complete import complete_session_id
from ._output import Output, not_found, quietly, summary_json, use_colour

__all__ = ["session_tree_command"]


@click.command("tree")
@click.argument("session_id", shell_complete=complete_session_id)
@click.option("--json", "as_json", is_flag=True, help="The tree as nested JSON.")
@click.option("--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@click.pass_context
@quietly
def session_tree_command(ctx: click.Context, session_id: str, as_json: bool, color: str) -> None:
    """Draw SESSION_ID and its subagent sessions with each node's status and duration."""
    from gz_ia.collector import reading
    from gz_ia.collector.views.terminal import format_tree

    try:
        node = reading.session_tree(root_of(ctx), session_id)
    except reading.SessionNotFound as exc:
        not_found(ctx, exc)
    except reading.LayoutError as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    out = Output(flush_each=False)
    if as_json:

        def encode(item: Any) -> dict[str, Any]:
            return {
                **summary_json(item.summary, (item.tree_tokens, item.tree_cost_usd)),
                "status": item.status,
                "duration_seconds": item.duration_seconds,
                "children": [encode(child) for child in item.children],
                "hidden": item.hidden,
            }

        out.line(json.dumps(encode(node)))
    else:
        for line in format_tree(node, colour=use_colour(color, out.stream)):
            out.line(line)
    out.flush()
