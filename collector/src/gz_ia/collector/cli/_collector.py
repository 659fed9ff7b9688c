"""``gz-ia-collector``: run the daemon (the default command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ._common import version, version_option
from ._lazy import LazyGroup

__all__ = ["collector_main"]


def _serve_options(function: Any) -> Any:
    options = [
        click.option(
            "--config",
            "config_path",
            type=click.Path(path_type=Path),
            default=None,
            help="TOML config file [default: $XDG_CONFIG_HOME/gz-ia/collector.toml; env: GZ_IA_CONFIG].",
        ),
        click.option("--socket", "socket", default=None, help="Socket path [env: GZ_IA_SOCKET]."),
        click.option(
            "--durability",
            type=click.Choice(["os", "fsync"]),
            default=None,
            help="Acknowledge after the write reaches the OS, or after a grouped fdatasync.",
        ),
        click.option("--metrics-address", default=None, help="host:port for /metrics, or 'off'."),
        click.option(
            "--http-address", default=None, help="Loopback host:port for hooks, OTLP and the live view, or 'off'."
        ),
        click.option("--max-open-files", type=int, default=None, help="Session files kept open at once."),
        click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None),
        click.option(
            "--hung-after",
            default=None,
            metavar="DURATION",
            help="How long an action cycle is open before gzia_hung_actions counts it (90s, 5m) [alerts.hung_after].",
        ),
        click.option(
            "--fleet-url",
            default=None,
            metavar="URL",
            help="Ship this machine's sessions to NATS JetStream: nats://host:port, comma-separated [fleet.url].",
        ),
        click.option(
            "--fleet-host", default=None, metavar="NAME", help="This machine's name in the fleet [fleet.host]."
        ),
        click.option(
            "--fleet-hub",
            is_flag=True,
            default=None,
            help="Also consume the fleet stream and write every machine's sessions here [fleet.hub].",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@click.group(
    cls=LazyGroup,
    lazy_commands={"install": "._install:install_command"},
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@_serve_options
@version_option("gz-ia-collector")
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
    from gz_ia.collector.config import ConfigError, load_config
    from gz_ia.collector.daemon import run

    from ._answers import parse_age

    flags = dict(flags)
    config_path = flags.pop("config_path", None)
    hung_after = flags.pop("hung_after", None)
    fleet = {
        key: value
        for key, value in (
            ("url", flags.pop("fleet_url", None)),
            ("host", flags.pop("fleet_host", None)),
            ("hub", flags.pop("fleet_hub", None)),
        )
        if value is not None
    }
    if fleet:
        flags["fleet"] = fleet
    if hung_after is not None:
        try:
            flags["alerts"] = {"hung_after": parse_age(hung_after)}
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--hung-after") from exc
    try:
        config = load_config(config_path, flags=flags)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    return run(config, version=version(), load_config=lambda: load_config(config_path, flags=flags))
