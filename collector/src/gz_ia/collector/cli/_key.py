"""``gz-ia key``: print the key the collector's HTTP side asks of every writing request.

Exporters and agents outside gz-ia's own programs take it as a header: ``OTEL_EXPORTER_OTLP_HEADERS=
x-gz-ia-key=$(gz-ia key)``, Codex's ``headers``, Claude Code's http hooks (which ``gz-ia install``
writes). It is drawn once per user and kept, readable by that user alone, in
``$GZ_IA_STATE_DIR/http.json`` (the collector reads the same file).
"""

from __future__ import annotations

import click

__all__ = ["key_command"]


@click.command("key")
def key_command() -> None:
    """Print your key for the collector's HTTP side (header X-Gz-Ia-Key), drawing it if none exists yet."""
    from gz_ia.client import env
    from gz_ia.collector.credentials import CredentialsUnusable, load_credentials

    try:
        click.echo(load_credentials(env.state_dir()).key)
    except CredentialsUnusable as exc:
        raise click.ClickException(str(exc)) from exc
