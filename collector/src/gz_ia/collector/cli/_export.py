"""``gz-ia export otel``: ship stored events to an OpenTelemetry backend (needs the ``[otel]`` extra).

The exporter runs as its own process, next to the collector and never inside it: ingestion does not
wait for, or even know about, the OTLP backend. Run it in the foreground, under systemd (see
docs/user-guide.md), or with ``--once`` from cron.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import click

from ._common import EXIT_MISSING_EXTRA, root_of, version

__all__ = ["export"]


@click.group("export")
def export() -> None:
    """Export stored events to other systems."""


@export.command("otel")
@click.option(
    "--root",
    "roots",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Session root to export; repeatable [default: gz-ia --root, found like .git].",
)
@click.option(
    "--endpoint",
    default=None,
    help="OTLP/HTTP base URL, e.g. http://host:4318 (/v1/traces and /v1/logs are added) "
    "[default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / _LOGS_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT, "
    "else http://localhost:4318].",
)
@click.option(
    "--signals",
    default="traces,logs",
    show_default=True,
    help="What to send, comma-separated: traces (a span per action cycle and per session), logs (a record per event).",
)
@click.option(
    "--session-idle",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds a session must be quiet before its span is sent (sent again, same ids, if it grows).",
)
@click.option(
    "--stale-after",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Seconds after which a quiet session whose cycles never finished is sent as it is.",
)
@click.option(
    "--project",
    default=None,
    help="The backend's project for these spans (resource attribute openinference.project.name; Phoenix).",
)
@click.option(
    "--resend",
    is_flag=True,
    help="Send every span again (same ids: no duplicates) and exit; for a backend that lost what it acknowledged.",
)
@click.option(
    "--since",
    default=None,
    metavar="WHEN",
    help="With --resend: only sessions with events at or after WHEN (-1h, today, '2026-12-01 10:00', RFC 3339).",
)
@click.option(
    "--timeout-max",
    type=click.FloatRange(min=0.01),
    default=120.0,
    show_default=True,
    help="After a request the backend did not answer in time, the timeout doubles up to this many seconds.",
)
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where export positions are kept [default: $XDG_STATE_HOME/gz-ia/otel].",
)
@click.option("--poll-interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True, help="Seconds.")
@click.option("--batch-size", type=click.IntRange(min=1, max=10_000), default=512, show_default=True)
@click.option(
    "--retry-max",
    type=click.FloatRange(min=0.01),
    default=30.0,
    show_default=True,
    help="Longest pause between retries while the backend is failing, in seconds.",
)
@click.option(
    "--metrics-address",
    default="127.0.0.1:9478",
    show_default=True,
    help="host:port for the exporter's /metrics (gzia_otel_*), or 'off'.",
)
@click.option("--once", is_flag=True, help="Export what is there now and exit (1 if the backend refused some).")
@click.pass_context
def export_otel(
    ctx: click.Context,
    roots: tuple[Path, ...],
    endpoint: str | None,
    signals: str,
    session_idle: float,
    stale_after: float,
    project: str | None,
    resend: bool,
    since: str | None,
    timeout_max: float,
    state_dir: Path | None,
    poll_interval: float,
    batch_size: int,
    retry_max: float,
    metrics_address: str,
    once: bool,
) -> None:
    """Send stored events to an OTLP/HTTP backend: spans (cycles, sessions) and log records.

    Positions advance only when the backend answers 2xx; a backend outage just makes the exporter
    wait and retry, each signal on its own (a backend without /v1/logs never holds back a span). A
    session's span is sent once the session is final. Spans carry ids derived from the session and
    the cycle, so a re-send (--resend) is the same span. Standard OTEL_EXPORTER_OTLP_* variables
    (headers, compression, timeout) apply.
    """
    import logging

    from prometheus_client import CollectorRegistry, start_http_server

    from gz_ia.collector.otel.export import (
        OTEL_EXTRA_HINT,
        SIGNALS,
        ExportSettings,
        MissingExtraError,
        OtelExporter,
        default_state_dir,
        make_sender,
    )

    chosen = tuple(dict.fromkeys(part.strip() for part in signals.split(",") if part.strip()))
    if not chosen or not set(chosen) <= set(SIGNALS):
        raise click.BadParameter(f"{signals!r}: choose from {', '.join(SIGNALS)}", param_hint="--signals")
    since_seconds: float | None = None
    if since is not None:
        if not resend:
            raise click.UsageError("--since goes with --resend")
        from datetime import UTC, datetime

        from ._log_options import parse_time

        try:
            since_seconds = parse_time(since, now=datetime.now(UTC)).timestamp()
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--since") from exc
    if resend:
        # Log records have no id a backend merges on: sending them again would duplicate them.
        chosen = ("traces",)
    logging.basicConfig(format="gz-ia export otel: %(levelname)s %(message)s", level=logging.INFO)
    try:
        sender = make_sender(
            version=version(), endpoint=endpoint, signals=chosen, timeout_max=timeout_max, project=project
        )
    except MissingExtraError as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        click.echo(f"Install the extra with: {OTEL_EXTRA_HINT}", err=True)
        ctx.exit(EXIT_MISSING_EXTRA)
    settings = ExportSettings(
        roots=[root.absolute() for root in roots] or [root_of(ctx)],
        state_dir=state_dir or default_state_dir(),
        poll_interval=poll_interval,
        batch_size=batch_size,
        retry_max=retry_max,
        signals=chosen,
        session_idle=session_idle,
        stale_after=stale_after,
    )
    registry = CollectorRegistry()
    exporter = OtelExporter(settings, sender, registry=registry)
    if resend:
        try:
            sent, healthy = exporter.resend(since_seconds)
        finally:
            exporter.close()
        click.echo(f"gz-ia: {sent} spans sent again" + ("" if healthy else "; the backend refused the rest"), err=True)
        ctx.exit(0 if healthy else 1)
    http = None
    if metrics_address not in ("", "off") and not once:
        host, _, port = metrics_address.rpartition(":")
        if not host or not port.isdigit():
            raise click.BadParameter(f"{metrics_address!r} is not host:port", param_hint="--metrics-address")
        try:
            http, _thread = start_http_server(int(port), addr=host.strip("[]"), registry=registry)
        except OSError as exc:
            click.echo(f"gz-ia: cannot serve metrics on {metrics_address}: {exc} (use --metrics-address off)", err=True)
            ctx.exit(1)
    stop = threading.Event()

    def on_signal(*_args: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    roots_text = ", ".join(str(root) for root in settings.roots)
    logging.getLogger("gz_ia.otel").info("exporting %s; positions in %s; ready", roots_text, settings.state_dir)
    try:
        code = exporter.run(stop, once=once)
    finally:
        exporter.close()
        if http is not None:
            http.shutdown()
            http.server_close()
    ctx.exit(code)
