"""``gz-ia mcp``: serve the gz-ia tools to an MCP client over stdio (needs the ``[mcp]`` extra)."""

from __future__ import annotations

import click

from ._common import EXIT_MISSING_EXTRA, root_of, socket_path_of, version

__all__ = ["mcp_command"]

MCP_EXTRA_HINT = "pip install 'gz-ia-collector[mcp]'"


@click.command("mcp")
@click.pass_context
def mcp_command(ctx: click.Context) -> None:
    """Run the gz-ia MCP server on stdin/stdout (register this command with your agent).

    Tools: log_event, read_session, get_event, events_since, failed_events, list_sessions,
    session_summary. Events go to the collector on --socket; sessions are read from --root (found
    like .git by default).
    """
    try:
        import mcp.server.mcpserver  # noqa: F401 - only to tell whether the extra is installed
    except ImportError as exc:
        click.echo(
            f"gz-ia: the MCP server needs the optional [mcp] extra ({exc}).\nInstall it with: {MCP_EXTRA_HINT}",
            err=True,
        )
        ctx.exit(EXIT_MISSING_EXTRA)
    from gz_ia.collector.mcp.server import serve

    serve(socket_path=socket_path_of(ctx), root=root_of(ctx), version=version())
