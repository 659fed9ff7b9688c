"""``gz-ia ui``: open the web view the running collector serves on loopback."""

from __future__ import annotations

import click

from ._common import EXIT_UNAVAILABLE, root_of, socket_path_of

__all__ = ["ui_command"]


@click.command("ui")
@click.option("--no-browser", is_flag=True, help="Print the address instead of opening a browser.")
@click.option("--timeout", type=float, default=3.0, show_default=True)
@click.pass_context
def ui_command(ctx: click.Context, no_browser: bool, timeout: float) -> None:
    """Open the collector's web view of the session root in a browser (or print its address).

    The address holds a key drawn at each collector start, which only the collector's own user
    can ask for; the page trades it for a cookie. Exits 69 when no collector answers or it serves
    no HTTP side (http_address = "off").
    """
    from urllib.parse import urlencode

    from gz_ia.collector.service.status import StatusUnavailable, query

    path = socket_path_of(ctx)
    try:
        report = query(path, timeout=timeout, what="ui")
    except StatusUnavailable as exc:
        click.echo(f"gz-ia: no collector is reachable at {path}: {exc}", err=True)
        ctx.exit(EXIT_UNAVAILABLE)
    url = report.get("ui")
    if not isinstance(url, str):
        click.echo("gz-ia: the collector serves no HTTP side (see http_address in gz-ia status)", err=True)
        ctx.exit(EXIT_UNAVAILABLE)
    address = f"{url}&{urlencode({'root': str(root_of(ctx))})}"
    if no_browser:
        click.echo(address)
        return
    import webbrowser

    if not webbrowser.open(address):
        click.echo("gz-ia: no browser could be started; open this address:", err=True)
    click.echo(address)
