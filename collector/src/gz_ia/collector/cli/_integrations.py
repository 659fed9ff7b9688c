"""``gz-ia hook ...`` and ``gz-ia install ...``: agents that report without code changes.

``gz-ia hook claude-code`` normally never gets here: the entry point (:mod:`gz_ia.collector.entry`)
runs it without loading click. This command serves ``--help`` and unusual command lines.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ._common import root_of, socket_path_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._hook_transport import Mode

__all__ = ["hook", "install"]


@click.group("hook")
def hook() -> None:
    """Hook commands that agents run (they always exit 0 and print nothing)."""


@hook.command("claude-code")
@click.option(
    "--http",
    "http_url",
    default=None,
    metavar="URL",
    help="Post the payload to the collector's http hook at URL (where Claude Code posts none itself); "
    "when nothing answers there, log it as without this option.",
)
@click.pass_context
def hook_claude_code(ctx: click.Context, http_url: str | None) -> None:
    """Log one Claude Code hook payload (JSON on stdin) as stage events."""
    from gz_ia.collector.integrations.claude_code.command_hook import run_hook

    root = ctx.find_root().params.get("root")
    raw = sys.stdin.buffer.read()
    if http_url is not None:
        from gz_ia.collector.integrations.claude_code.http_forward import forward

        if forward(raw, http_url, root=str(root_of(ctx)) if root else None):
            ctx.exit(0)
    ctx.exit(run_hook(raw, socket_path=socket_path_of(ctx), root=root_of(ctx) if root else None))


@click.group("install")
def install() -> None:
    """Connect an agent to gz-ia."""


@install.command("claude-code")
@click.option("--user", "scope", flag_value="user", default=True, help="~/.claude/settings.json (the default).")
@click.option("--project", "scope", flag_value="project", help=".claude/settings.json in the current directory.")
@click.option("--uninstall", is_flag=True, help="Remove exactly the hook entries gz-ia added.")
@click.option("--command", "command", default=None, help="The hook command [default: this gz-ia, by absolute path].")
@click.option(
    "--hooks",
    "transport",
    type=click.Choice(["auto", "http", "inbox", "command"]),
    default="auto",
    show_default=True,
    help="http: Claude Code posts to the collector (no process per hook; lost while no collector listens); "
    "inbox: a shell script leaves each payload for the collector, which keeps it until one runs; "
    "command: gz-ia runs per hook (a Python start each) and spools what no collector answers; "
    "auto: http where the service manager holds the collector's HTTP port across restarts "
    "(gz-ia-collector install --user), else inbox.",
)
@click.option(
    "--settings",
    "settings",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Another settings file (e.g. .claude/settings.local.json).",
)
def install_claude_code(
    scope: str, uninstall: bool, command: str | None, transport: Mode, settings: Path | None
) -> None:
    """Add gz-ia's hooks to Claude Code's settings, keeping every other setting and hook."""
    from gz_ia.collector.integrations.claude_code import settings as cc

    from ._hook_transport import choose_transport

    explicit_settings = settings is not None
    if settings is None:
        settings = Path.home() / ".claude" / "settings.json" if scope == "user" else Path(".claude") / "settings.json"
    try:
        if uninstall:
            changed = cc.uninstall(settings)
            click.echo(f"removed gz-ia's hooks for {', '.join(changed)} from {settings}" if changed else
                       f"no gz-ia hooks in {settings}")  # fmt: skip
            return
        hook_command = command or cc.hook_command()
        if not hook_command.rstrip().endswith(cc.HOOK_ARGS):
            raise click.BadParameter(f"must end with {cc.HOOK_ARGS!r}", param_hint="--command")
        try:
            choice = choose_transport(transport)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--hooks") from exc
        key = ""
        if choice.http_url is not None:
            if scope == "project" and not explicit_settings:
                raise click.UsageError(
                    "http hooks carry your key, which does not belong in a project's settings that others "
                    "may read or commit: install them with --user (or --settings a file of your own)"
                )
            from gz_ia.client import env
            from gz_ia.collector.credentials import load_credentials

            key = load_credentials(env.state_dir()).key
        script = cc.inbox_script_path() if choice.inbox else None
        changed = cc.install(settings, hook_command, http_url=choice.http_url, key=key, inbox_script=script)
    except cc.SettingsError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"hooks: {choice.reason}")
    if changed:
        how = choice.http_url or (f"{script}, else {hook_command}" if script is not None else hook_command)
        click.echo(f"added gz-ia's hooks for {', '.join(changed)} to {settings}: {how}")
    else:
        click.echo(f"gz-ia's hooks are already in {settings}")


def _add_agents() -> None:
    # Codex and Gemini CLI: their commands live in their own module.
    from ._agent_hooks import hook_codex, hook_gemini, install_codex, install_gemini

    hook.add_command(hook_codex)
    hook.add_command(hook_gemini)
    install.add_command(install_codex)
    install.add_command(install_gemini)


_add_agents()
