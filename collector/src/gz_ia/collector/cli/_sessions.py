"""``gz-ia sessions``: list the sessions of a root, filtered and ordered by last activity."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._common import EXIT_GAP, EXIT_NOT_FOUND, root_of
from ._log_options import parse_time
from ._output import Output, not_found, quietly, summary_json, use_colour
from ._pager import paged

if TYPE_CHECKING:
    from gz_ia.collector.reading import SessionSummary
    from gz_ia.collector.views.answers import OpenCycle

__all__ = ["sessions_command"]


@click.command("sessions")
@click.option("--agent", multiple=True, help="Only sessions of this agent (repeat: any of them).")
@click.option("--role", multiple=True, help="Only sessions whose first event has this role (repeat: any of them).")
@click.option("-S", "--since", default=None, help="Only sessions active at or after T (as in gz-ia logs).")
@click.option("-U", "--until", default=None, help="Only sessions active before T (as in gz-ia logs).")
@click.option("--failed", is_flag=True, help="Only sessions with a FAILED event.")
@click.option("--open", "open_", is_flag=True, help="Only sessions with open actions (running).")
@click.option(
    "--hung",
    is_flag=True,
    help="Only sessions with an action cycle open (READ or PENDING without FINISH) longer than --after, where "
    "the session's activity stopped.",
)
@click.option(
    "--after",
    "hung_after",
    default="5m",
    show_default=True,
    metavar="DURATION",
    help="With --hung: how long a cycle is open before it counts (90s, 5m, 2h).",
)
@click.option(
    "-n", "--lines", "limit", type=click.IntRange(min=0), default=None, help="Only the N most recently active."
)
@click.option("-r", "--reverse", is_flag=True, help="Most recently active first.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session, every field (times in UTC).")
@click.option("--utc", is_flag=True, help="Show times in UTC (Z) instead of local time with its offset.")
@click.option("--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@click.option("--pager/--no-pager", default=True, help="Page long output on a terminal [default: page].")
@click.option("-q", "--quiet", is_flag=True, help="No '-- No sessions --' banner.")
@click.option(
    "--verify",
    is_flag=True,
    help="Read every retained segment, so that any unreadable one marks its session incomplete.",
)
@click.pass_context
@quietly
def sessions_command(
    ctx: click.Context,
    agent: tuple[str, ...],
    role: tuple[str, ...],
    since: str | None,
    until: str | None,
    failed: bool,
    open_: bool,
    hung: bool,
    hung_after: str,
    limit: int | None,
    reverse: bool,
    as_json: bool,
    utc: bool,
    color: str,
    pager: bool,
    quiet: bool,
    verify: bool,
) -> None:
    """List the sessions of the root, the most recently active last (first with -r).

    Columns: last and first event time, events, open actions, failures, tokens and cost (the
    session's with its subagents'), agent, parent, and the session id last, whole, so that it can be
    copied even when it is 128 characters long (a long agent or parent is shortened in the middle;
    --json keeps every field whole). Times are local with their offset, as in gz-ia logs, unless
    --utc. A session some of whose stored events cannot be read is named on stderr and the command
    exits 3.
    """
    from gz_ia.collector import reading
    from gz_ia.collector.query import SessionQuery, select_sessions
    from gz_ia.collector.views.terminal import format_sessions

    from ._answers import parse_age

    now = datetime.now(UTC)
    try:
        after = parse_age(hung_after)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--after") from exc
    try:
        query = SessionQuery(
            agents=frozenset(agent),
            roles=frozenset(role),
            since=parse_time(since, now=now, utc=utc) if since else None,
            until=parse_time(until, now=now, utc=utc) if until else None,
            failed=failed,
            open=open_ or hung,
            limit=None if hung else limit,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since/--until") from exc
    root = root_of(ctx)

    def role_of(session_id: str) -> str | None:
        try:
            entries = reading.read_page(root, session_id, limit=1).entries
        except reading.SessionNotFound:
            return None
        return entries[0].event.role if entries else None

    try:
        reading.require_root(root)
        every = reading.list_sessions(root, verify=verify)
        rolled = reading.tree_usage(every)
        summaries = select_sessions(every, query, role_of)
        stuck = _hung(root, summaries, every, now, after) if hung else {}
    except reading.RootNotFound as exc:
        not_found(ctx, exc)
    except reading.LayoutError as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    if hung:
        summaries = [summary for summary in summaries if summary.session_id in stuck]
        if limit is not None:
            summaries = summaries[-limit:] if limit else []
    if reverse:
        summaries.reverse()
    out = Output(flush_each=False)
    hub = reading.is_hub_root(root)
    if as_json:
        for summary in summaries:
            fields = summary_json(summary, rolled.get(summary.session_id))
            if hub:
                fields["host"] = reading.host_of(summary.session_id)
            if hung:
                fields["hung"] = [cycle.as_json(now) for cycle in stuck[summary.session_id]]
            out.line(json.dumps(fields))
    elif hung and summaries:
        for summary in summaries:
            for cycle in stuck[summary.session_id]:
                out.line(
                    f"{_age(cycle.open_for_s(now)):>8}  {cycle.stage:<7}  {cycle.action}  "
                    f"{summary.agent}  {summary.session_id}"
                )
    elif summaries:
        colour = use_colour(color, out.stream)
        with paged(pager):
            for line in format_sessions(summaries, colour=colour, utc=utc, usage=rolled):
                out.line(line)
            out.flush()
    elif not quiet:
        click.echo("-- No sessions --", err=True)
    out.flush()
    damaged = [summary for summary in summaries if summary.incomplete]
    for summary in damaged:
        session_id = summary.session_id
        what = (
            f"cannot read {', '.join(summary.unreadable)}"
            if summary.unreadable
            else "some stored events cannot be read"
        )
        if summary.damage and not summary.unreadable:
            for finding in summary.damage:
                click.echo(f"gz-ia: warning: session {session_id}: {finding}", err=True)
            continue
        click.echo(
            f"gz-ia: warning: session {session_id}: {what} (gz-ia session logs {session_id} says which events)",
            err=True,
        )
        for finding in summary.damage:
            click.echo(f"gz-ia: warning: session {session_id}: {finding}", err=True)
    if damaged:
        ctx.exit(EXIT_GAP)


def _hung(
    root: Path, summaries: list[SessionSummary], every: list[SessionSummary], now: datetime, after: float
) -> dict[str, list[OpenCycle]]:
    """The hung cycles of ``summaries`` (of the root's ``every``), by session (only those with any)."""
    from gz_ia.collector.views.answers import OpenCycleIndex, hung, last_below

    found = {}
    busy = last_below(every)
    for session_id, cycles in OpenCycleIndex().cycles(root, summaries).items():
        stuck = hung(cycles, now, after, busy)
        if stuck:
            found[session_id] = stuck
    return found


def _age(seconds: float) -> str:
    """``4s``, ``12m3s``, ``5h2m``: how long a cycle has been open, short."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60}s"
    return f"{whole // 3600}h{whole % 3600 // 60}m"
