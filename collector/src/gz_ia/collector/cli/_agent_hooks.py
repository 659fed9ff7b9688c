"""``gz-ia hook codex|gemini`` and ``gz-ia install codex|gemini``: Codex and Gemini CLI report to gz-ia.

As for Claude Code, the entry point (:mod:`gz_ia.collector.entry`) runs the hook commands without
loading click; these serve ``--help`` and unusual command lines.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._common import root_of, socket_path_of

if TYPE_CHECKING:
    from gz_ia.collector.integrations.hook_settings import HookSpec

__all__ = ["hook_codex", "hook_gemini", "install_codex", "install_gemini"]


def _run_hook(ctx: click.Context, agent: str) -> None:
    if agent == "codex":
        from gz_ia.collector.integrations.codex import run_hook
    else:
        from gz_ia.collector.integrations.gemini import run_hook
    root = ctx.find_root().params.get("root")
    ctx.exit(run_hook(sys.stdin.buffer.read(), socket_path=socket_path_of(ctx), root=root_of(ctx) if root else None))


@click.command("codex")
@click.pass_context
def hook_codex(ctx: click.Context) -> None:
    """Log one Codex hook payload (JSON on stdin) as stage events."""
    _run_hook(ctx, "codex")


@click.command("gemini")
@click.pass_context
def hook_gemini(ctx: click.Context) -> None:
    """Log one Gemini CLI hook payload (JSON on stdin) as stage events."""
    _run_hook(ctx, "gemini")


def _install_options(settings_help: str) -> list[click.Parameter]:
    return [
        click.Option(["--user", "scope"], flag_value="user", default=True, help=f"{settings_help} (the default)."),
        click.Option(
            ["--project", "scope"], flag_value="project", help="The project's file, in the current directory."
        ),
        click.Option(["--uninstall"], is_flag=True, help="Remove exactly the hook entries gz-ia added."),
        click.Option(["--command"], default=None, help="The hook command [default: this gz-ia, by absolute path]."),
        click.Option(
            ["--settings"], type=click.Path(dir_okay=False, path_type=Path), default=None, help="Another settings file."
        ),
    ]


def _install(spec: HookSpec, settings: Path, uninstall: bool, command: str | None, notice: str | None) -> None:
    from gz_ia.collector.integrations import hook_settings

    try:
        if uninstall:
            changed = hook_settings.uninstall(settings, spec)
            click.echo(f"removed gz-ia's hooks for {', '.join(changed)} from {settings}" if changed else
                       f"no gz-ia hooks in {settings}")  # fmt: skip
            return
        hook_command = command or hook_settings.hook_command(spec.hook_args)
        if not hook_command.rstrip().endswith(spec.hook_args):
            raise click.BadParameter(f"must end with {spec.hook_args!r}", param_hint="--command")
        changed = hook_settings.install(settings, spec, hook_command)
    except hook_settings.SettingsError as exc:
        raise click.ClickException(str(exc)) from exc
    if changed:
        click.echo(f"added gz-ia's hooks for {', '.join(changed)} to {settings}: {hook_command}")
    else:
        click.echo(f"gz-ia's hooks are already in {settings}")
    if notice:
        click.echo(notice)


def _install_codex(scope: str, uninstall: bool, command: str | None, settings: Path | None) -> None:
    """Add gz-ia's hooks to Codex's hooks.json, keeping every other hook; Codex then asks you to trust them."""
    from gz_ia.collector.integrations import codex_settings

    path = settings or codex_settings.default_path(scope)
    _install(codex_settings.SPEC, path, uninstall, command, None if uninstall else codex_settings.TRUST_NOTICE)


def _install_gemini(scope: str, uninstall: bool, command: str | None, settings: Path | None) -> None:
    """Add gz-ia's hooks to Gemini CLI's settings.json, keeping every other setting and hook."""
    from gz_ia.collector.integrations import gemini_settings

    _install(gemini_settings.SPEC, settings or gemini_settings.default_path(scope), uninstall, command, None)


install_codex = click.Command(
    "codex", callback=_install_codex, params=_install_options("~/.codex/hooks.json"), help=_install_codex.__doc__
)
install_gemini = click.Command(
    "gemini", callback=_install_gemini, params=_install_options("~/.gemini/settings.json"), help=_install_gemini.__doc__
)
