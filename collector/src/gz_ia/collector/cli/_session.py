"""``gz-ia session log``: send one event (reading commands live in :mod:`._reading`)."""

from __future__ import annotations

import click

from gz_ia.client import env
from gz_ia.client.schema import Stage, Status
from gz_ia.collector.oneshot.typed_event import attr_scalar

from ._common import root_of, socket_path_of

__all__ = ["session_log"]


def _parse_attrs(values: tuple[str, ...]) -> dict[str, bool | int | float | str] | None:
    attrs: dict[str, bool | int | float | str] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--attr")
        attrs[key] = attr_scalar(raw)
    return attrs or None


@click.command("log")
@click.argument("session_id")
@click.option("--action", required=True, help="Short description of the task.")
@click.option("--stage", required=True, type=click.Choice([s.value for s in Stage], case_sensitive=False))
@click.option(
    "--status", default="OK", show_default=True, type=click.Choice([s.value for s in Status], case_sensitive=False)
)
@click.option("--agent", required=True, envvar=env.GZ_IA_AGENT, help="Agent name [env: GZ_IA_AGENT].")
@click.option("--role", default=None, envvar=env.GZ_IA_ROLE, help="Functional role [env: GZ_IA_ROLE].")
@click.option(
    "--parent",
    "parent",
    default=None,
    help="Parent session id [default: $GZ_IA_PARENT_SESSION_ID unless it is this session].",
)
@click.option(
    "--root-session",
    "root_session",
    default=None,
    help="Root of the session's tree, when not the parent [default: $GZ_IA_ROOT_SESSION_ID, for the parent "
    "the environment names].",
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
    root_session: str | None,
    duration_ms: int | None,
    error: str | None,
    attrs: tuple[str, ...],
    timeout: float,
    quiet: bool,
) -> None:
    """Send one event to SESSION_ID and wait for the collector's verdict.

    Exits 0 when it is written, 1 when it is rejected, 75 when no collector answered and it is
    spooled (written when a collector starts), 69 when it could be neither delivered nor spooled.
    With GZ_IA_DISABLED=1 it sends nothing, prints nothing and exits 0.
    """
    from gz_ia.collector.oneshot.session_log import log_event
    from gz_ia.collector.oneshot.typed_event import typed_event

    try:
        event = typed_event(
            session_id=session_id,
            action=action,
            stage=stage,
            status=status,
            agent=agent,
            role=role,
            parent_session_id=parent,
            duration_ms=duration_ms,
            error=error,
            attrs=_parse_attrs(attrs),
            root_session_id=root_session,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    ctx.exit(log_event(event, socket_path=socket_path_of(ctx), root=root_of(ctx), timeout=timeout, quiet=quiet))
