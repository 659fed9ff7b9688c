"""The command lines: ``gz-ia`` for people and scripts, ``gz-ia-collector`` for the daemon.

Exit codes of ``gz-ia``: 0 success (an empty result included), 1 the collector rejected the event or
the session is unknown, 2 usage error, 69 (``EX_UNAVAILABLE``) no collector reachable.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Final

import click

from gz_ia.client import env
from gz_ia.client.errors import CollectorUnavailable, EventRejected
from gz_ia.client.schema import Stage, Status

__all__ = ["collector_main", "main"]

EXIT_REJECTED: Final = 1
EXIT_UNAVAILABLE: Final = 69


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gz-ia-collector")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


# --- gz-ia-collector ---------------------------------------------------------------------------------


def _serve_options(function: Any) -> Any:
    options = [
        click.option(
            "--config",
            "config_path",
            type=click.Path(path_type=Path),
            default=None,
            help="TOML config file [default: $XDG_CONFIG_HOME/gz-ia/collector.toml].",
        ),
        click.option("--socket", "socket", default=None, help="Socket path [env: GZ_IA_SOCKET]."),
        click.option(
            "--durability",
            type=click.Choice(["os", "fsync"]),
            default=None,
            help="Acknowledge after the write reaches the OS, or after a grouped fdatasync.",
        ),
        click.option("--metrics-address", default=None, help="host:port for /metrics, or 'off'."),
        click.option("--max-open-files", type=int, default=None, help="Session files kept open at once."),
        click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@_serve_options
@click.version_option(_version(), prog_name="gz-ia-collector")
@click.pass_context
def collector_main(ctx: click.Context, /, **flags: Any) -> None:
    """Run the gz-ia collector (the default command) or manage its installation."""
    if ctx.invoked_subcommand is None:
        ctx.exit(_serve(flags))
    ctx.obj = flags


@collector_main.command("serve")
@_serve_options
@click.pass_context
def serve_command(ctx: click.Context, /, **flags: Any) -> None:
    """Run the collector in the foreground until SIGTERM or Ctrl-C."""
    merged = {**(ctx.obj or {}), **{key: value for key, value in flags.items() if value is not None}}
    ctx.exit(_serve(merged))


def _serve(flags: dict[str, Any]) -> int:
    from .config import ConfigError, load_config

    config_path = flags.pop("config_path", None)
    try:
        config = load_config(config_path, flags=flags)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    from .daemon import run

    return run(config, version=_version())


# --- gz-ia -------------------------------------------------------------------------------------------


def _socket_path(ctx: click.Context) -> Path:
    value = ctx.find_root().params.get("socket")
    return Path(value) if value else env.default_socket_path()


def _root(ctx: click.Context) -> Path:
    value = ctx.find_root().params.get("root")
    return Path(value).absolute() if value else env.find_root()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--socket", default=None, envvar=env.GZ_IA_SOCKET, help="Collector socket [env: GZ_IA_SOCKET].")
@click.option(
    "--root",
    default=None,
    envvar=env.GZ_IA_ROOT,
    help="Session root (.harness directory) [env: GZ_IA_ROOT; default: found like .git].",
)
@click.version_option(_version(), prog_name="gz-ia")
def main(socket: str | None, root: str | None) -> None:
    """Log and read gz-ia agent sessions."""


@main.group()
def session() -> None:
    """Work with one session."""


def _parse_attrs(values: tuple[str, ...]) -> dict[str, bool | int | float | str] | None:
    attrs: dict[str, bool | int | float | str] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--attr")
        attrs[key] = _scalar(raw)
    return attrs or None


def _scalar(raw: str) -> bool | int | float | str:
    if raw in ("true", "false"):
        return raw == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            continue
    return raw


@session.command("log")
@click.argument("session_id")
@click.option("--action", required=True, help="Short description of the task.")
@click.option("--stage", required=True, type=click.Choice([s.value for s in Stage], case_sensitive=False))
@click.option(
    "--status", default="OK", show_default=True, type=click.Choice([s.value for s in Status], case_sensitive=False)
)
@click.option("--agent", required=True, envvar="GZ_IA_AGENT", help="Agent name [env: GZ_IA_AGENT].")
@click.option("--role", default=None, envvar="GZ_IA_ROLE", help="Functional role [env: GZ_IA_ROLE].")
@click.option(
    "--parent",
    "parent",
    default=None,
    help="Parent session id [default: $GZ_IA_PARENT_SESSION_ID unless it is this session].",
)
@click.option("--duration", "duration_ms", type=click.IntRange(min=0), default=None, help="Duration in ms.")
@click.option("--error", default=None, help="Error message (required with --status FAILED).")
@click.option("--attr", "attrs", multiple=True, metavar="KEY=VALUE", help="A measurement; repeatable.")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Seconds to wait for the verdict.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.pass_context
def session_log(
    ctx: click.Context,
    session_id: str,
    action: str,
    stage: str,
    status: str,
    agent: str,
    role: str | None,
    parent: str | None,
    duration_ms: int | None,
    error: str | None,
    attrs: tuple[str, ...],
    timeout: float,
    quiet: bool,
) -> None:
    """Send one event to SESSION_ID and wait for the collector's verdict."""
    from gz_ia.client import Client, build_event

    if parent is None:
        inherited = os.environ.get(env.GZ_IA_PARENT_SESSION_ID)
        parent = inherited if inherited and inherited != session_id else None
    try:
        event = build_event(
            session_id=session_id,
            action=action,
            stage=stage.upper(),
            status=status.upper(),
            agent=agent,
            role=role,
            parent_session_id=parent,
            duration_ms=duration_ms,
            error=error,
            attrs=_parse_attrs(attrs),
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    client = Client(socket_path=_socket_path(ctx), root=_root(ctx), connect_timeout=min(timeout, 2.0))
    try:
        verdict = client.send(event, timeout=timeout)
    except EventRejected as exc:
        click.echo(f"gz-ia: rejected ({exc.reason}): {exc.detail}", err=True)
        ctx.exit(EXIT_REJECTED)
    except CollectorUnavailable as exc:
        click.echo(
            f"gz-ia: no collector is reachable at {client.socket_path} ({exc}).\n"
            "Start one with `gz-ia-collector` or `systemctl --user start gz-ia-collector.socket`.",
            err=True,
        )
        ctx.exit(EXIT_UNAVAILABLE)
    finally:
        client.close(timeout=0)
    if not quiet:
        click.echo(f"accepted: {session_id} seq {verdict.seq}")


@session.command("logs")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print the stored JSON lines, one per event.")
@click.pass_context
def session_logs(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """Print the events of SESSION_ID in write order."""
    from .storage.reader import SessionNotFound, read_session_lines
    from .view import format_event

    try:
        for line, event in read_session_lines(_root(ctx), session_id):
            click.echo(line if as_json else format_event(event))
    except SessionNotFound as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_REJECTED)


@main.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--timeout", type=float, default=3.0, show_default=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool, timeout: float) -> None:
    """Ask the running collector for its health, uptime, roots and counters."""
    from .status import StatusUnavailable, query_status

    path = _socket_path(ctx)
    try:
        report = query_status(path, timeout=timeout)
    except StatusUnavailable as exc:
        click.echo(f"gz-ia: no collector is reachable at {path}: {exc}", err=True)
        ctx.exit(EXIT_UNAVAILABLE)
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    counters: dict[str, Any] = report.get("counters", {})  # type: ignore[assignment]
    click.echo(
        f"gz-ia collector {report.get('version')}: healthy, pid {report.get('pid')}, "
        f"up {report.get('uptime_seconds', 0)} s, durability {report.get('durability')}"
    )
    click.echo(f"connections: {report.get('connections')}")
    for root in report.get("roots", []):  # type: ignore[attr-defined]
        click.echo(
            f"root {root['path']}: {root['sessions_loaded']} sessions loaded, {root['open_sessions']} with open actions"
        )
    click.echo(
        "events: " + ", ".join(f"{key} {value}" for key, value in counters.items() if not isinstance(value, dict))
    )


def run_main() -> None:  # pragma: no cover - console script shim
    """Entry point for ``python -m gz_ia.collector``."""
    logging.basicConfig()
    sys.exit(main())
