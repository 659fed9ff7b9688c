"""``gz-ia ui``: open the web view the running collector serves on loopback."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Final

import click

from gz_ia.client import env

from ._common import EXIT_UNAVAILABLE, root_of, socket_path_of

__all__ = ["ui_command"]


@click.command("ui")
@click.option("--no-browser", is_flag=True, help="Print the address instead of opening a browser.")
@click.option("--timeout", type=float, default=3.0, show_default=True)
@click.pass_context
def ui_command(ctx: click.Context, no_browser: bool, timeout: float) -> None:
    """Open the collector's web view of the session root in a browser (or print its address).

    The address holds your key, which the page trades for a cookie. The browser is given a file
    that only you may read and that leads it there, never the address itself: a command line is
    visible to every user of the machine. Exits 69 when no collector answers or it serves no HTTP
    side (http_address = "off").
    """
    from urllib.parse import urlencode

    from gz_ia.collector.oneshot.session_log import START_ONE
    from gz_ia.collector.service.status import StatusUnavailable, query

    path = socket_path_of(ctx)
    try:
        report = query(path, timeout=timeout, what="ui")
    except StatusUnavailable as exc:
        click.echo(f"gz-ia: no collector is reachable at {path}: {exc}\n{START_ONE}", err=True)
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

    page = _redirect_file(address)
    if not webbrowser.open(page.as_uri()):
        click.echo(f"gz-ia: no browser could be started; open {page} (it leads to the page with your key)", err=True)
        return
    click.echo(f"opened the web view ({url.split('?', 1)[0]}) through {page}")


_REDIRECT: Final = """<!doctype html>
<meta charset="utf-8">
<meta http-equiv="refresh" content="0;url={address}">
<title>gz-ia</title>
<p><a href="{address}">Open the gz-ia web view</a></p>
"""


def _redirect_file(address: str) -> Path:
    """A page that leads to ``address``, in a file only this user may read (as Jupyter's
    ``use_redirect_file``): the browser's command line names the file, not the key."""
    directory = env.state_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / "ui.html"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(_REDIRECT.format(address=html.escape(address, quote=True)))
    return path
