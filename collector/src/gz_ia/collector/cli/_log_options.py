"""The options of ``gz-ia logs`` and ``gz-ia session logs``, and what they mean: filters, counts, formats.

Conventions follow journalctl, kubectl and docker logs: ``-n`` limits to the last N events (10 with
``-f`` and no ``--since``), ``-o`` picks the format (``--json`` is ``-o json``: exactly the stored
line), ``-g`` keeps events whose text matches a regex, times are local unless ``--utc``, field
filters OR within a flag and AND across flags.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import click

from gz_ia.client.schema import Stage, Status

if TYPE_CHECKING:
    from gz_ia.collector.views.terminal import EventStyle

__all__ = [
    "MACHINE_OUTPUTS",
    "filters_of",
    "follow_limits",
    "line_count",
    "log_options",
    "output_format",
    "parse_time",
    "renderer",
    "selection_of",
    "time_window",
    "window_options",
]

_TIMES: Final = "now, today, yesterday, -1h, -15min, '2026-12-01 10:00', an epoch or RFC 3339"
_STAGES: Final = [stage.value for stage in Stage]
_STATUSES: Final = [status.value for status in Status]
_OUTPUTS: Final = ["short", "short-iso", "json", "json-pretty", "cat"]
MACHINE_OUTPUTS: Final = frozenset({"json", "json-pretty"})
"""Formats for programs: no banner on stdout or stderr, the cursor on stderr."""
_STYLES: Final[dict[str, EventStyle]] = {"short": "short", "short-iso": "short-iso", "cat": "cat"}
"""The human formats, rendered by :func:`gz_ia.collector.views.terminal.format_event`."""


def parse_time(value: str, *, now: datetime, utc: bool = False) -> datetime:
    """Return the instant of a time expression (:func:`gz_ia.collector.query.parse_time`); times without
    an offset are local, or UTC with ``utc``."""
    from gz_ia.collector.query import parse_time as parse_expression

    return parse_expression(value, now=now, tz=UTC if utc else None)


def _window(lines_help: str) -> list[Any]:
    """``-n``, ``--since`` and ``--until``: which events a command reads, the same for every command."""
    return [
        click.option("-n", "--lines", default=None, metavar="N|all", help=lines_help),
        click.option("-S", "--since", default=None, help=f"Only events at or after T ({_TIMES})."),
        click.option("-U", "--until", default=None, help=f"Only events before T ({_TIMES})."),
    ]


def window_options(lines_help: str) -> Callable[[Any], Any]:
    """Add ``-n``, ``--since`` and ``--until`` alone, as the log commands take them (``gz-ia session view``)."""

    def decorate(function: Any) -> Any:
        for option in reversed(_window(lines_help)):
            function = option(function)
        return function

    return decorate


def log_options(function: Any) -> Any:
    """Add the options both log commands take."""
    options = [
        click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they land (like tail -F)."),
        *_window("Show the last N events [default: all; 10 with --follow and no --since]."),
        click.option("-r", "--reverse", is_flag=True, help="Newest first (not with --follow)."),
        click.option(
            "-o",
            "--output",
            type=click.Choice(_OUTPUTS),
            default=None,
            help="short: a timeline line; short-iso: the same with an RFC 3339 time; json: the stored line "
            "exactly; json-pretty: the stored record indented; cat: stage, status, action and error only "
            "[default: short].",
        ),
        click.option(
            "--json", "as_json", is_flag=True, help="Same as -o json: each stored JSON line exactly (for jq)."
        ),
        click.option(
            "-g",
            "--grep",
            default=None,
            metavar="REGEX",
            help="Only events with a text field (action, error, agent, role, session ids, attrs) matching the "
            "Python regex, ignoring case if it is all lower case; exit 1 if none does (not with -f).",
        ),
        click.option(
            "--case-sensitive",
            type=click.Choice(["yes", "no"]),
            is_flag=False,
            flag_value="yes",
            default=None,
            help="Force --grep to match case (yes, the default of the bare flag) or to ignore it (no).",
        ),
        click.option("--utc", is_flag=True, help="Show times in UTC (Z) instead of local time with its offset."),
        click.option("--agent", multiple=True, help="Only this agent (repeat: any of them)."),
        click.option("--role", multiple=True, help="Only this role (repeat: any of them)."),
        click.option(
            "--stage", multiple=True, type=click.Choice(_STAGES, case_sensitive=False), help="Only this stage."
        ),
        click.option(
            "--status", multiple=True, type=click.Choice(_STATUSES, case_sensitive=False), help="Only this status."
        ),
        click.option("--action", multiple=True, help="Only this action (repeat: any of them)."),
        click.option("--failed", is_flag=True, help="Only FAILED events (same as --status FAILED)."),
        click.option("--after-cursor", default=None, metavar="CURSOR", help="Start right after this cursor."),
        click.option("--show-cursor", is_flag=True, help="Print the cursor to resume from after the output."),
        click.option(
            "--color",
            "--colour",
            "color",
            type=click.Choice(["auto", "always", "never"]),
            default="auto",
            show_default=True,
            help="Colour the timeline (auto: on a terminal, unless NO_COLOR is set).",
        ),
        click.option("--prefix/--no-prefix", default=None, help="Show the session id on each line."),
        click.option(
            "--pager/--no-pager",
            default=True,
            help="Page long human output on a terminal ($GZ_IA_PAGER, $PAGER, less) [default: page; never with "
            "--json or -f].",
        ),
        click.option(
            "-q", "--quiet", is_flag=True, help="No '-- No entries --' banner (warnings of gaps are still printed)."
        ),
        click.option(
            "--timeout",
            default=None,
            metavar="DURATION",
            help="With -f: give up after DURATION (30s, 10m) if the session has not started, or with "
            "--until-finished if its cycle has not finished; exit 124.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def filters_of(options: dict[str, Any], now: datetime) -> Any:
    """The reader's :class:`~gz_ia.collector.reading.Filters` of the field flags, ``--since`` and ``--until``."""
    from gz_ia.collector.reading import Filters

    since, until = time_window(options["since"], options["until"], now, utc=options["utc"])
    statuses = {Status(value.upper()) for value in options["status"]}
    if options["failed"]:
        statuses.add(Status.FAILED)
    return Filters(
        agents=frozenset(options["agent"]),
        roles=frozenset(options["role"]),
        stages=frozenset(Stage(value.upper()) for value in options["stage"]),
        statuses=frozenset(statuses),
        actions=frozenset(options["action"]),
        since=since,
        until=until,
    )


def time_window(
    since: str | None, until: str | None, now: datetime, *, utc: bool = False
) -> tuple[datetime | None, datetime | None]:
    """The instants of ``--since`` and ``--until`` (None where not given)."""
    try:
        return (
            parse_time(since, now=now, utc=utc) if since else None,
            parse_time(until, now=now, utc=utc) if until else None,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since/--until") from exc


def line_count(value: str | None, *, follow: bool, since: str | None) -> int | None:
    """``-n``: how many of the newest events to show (None: all)."""
    if value is None:
        return 10 if follow and since is None else None
    if value == "all":
        return None
    try:
        count = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number or 'all'", param_hint="-n/--lines") from None
    if count < 0:
        raise click.BadParameter("must be >= 0", param_hint="-n/--lines")
    return count


def output_format(choice: str | None, *, as_json: bool) -> str:
    """The ``-o`` format; ``--json`` is its alias, so a different ``-o`` with it is a contradiction."""
    if as_json and choice not in (None, "json"):
        raise click.UsageError(f"--json means -o json; it cannot be combined with -o {choice}")
    return "json" if as_json else choice or "short"


def selection_of(options: dict[str, Any]) -> Any:
    """``FIELD=VALUE`` arguments, ``--grep`` and ``--seq``, as one :class:`gz_ia.collector.query.Selection`."""
    from gz_ia.collector.query import Selection, compile_grep, parse_matches, parse_seq_range

    try:
        matches = parse_matches(options["matches"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="FIELD=VALUE") from exc
    grep = None
    if options["grep"] is not None:
        forced = {"yes": True, "no": False}.get(options["case_sensitive"] or "")
        try:
            grep = compile_grep(options["grep"], case_sensitive=forced)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="-g/--grep") from exc
    seqs = None
    if options["seq"] is not None:
        try:
            seqs = parse_seq_range(options["seq"])
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--seq") from exc
    return Selection(matches=matches, grep=grep, seqs=seqs)


def renderer(output: str, *, colour: bool, show_session: bool, utc: bool) -> Callable[[Any], str]:
    """How one entry is printed in the ``-o`` format."""
    from gz_ia.collector.views.terminal import format_event

    if output == "json":
        return lambda entry: str(entry.line)
    if output == "json-pretty":
        import json  # only this format re-encodes a line

        return lambda entry: json.dumps(json.loads(entry.line), indent=2, ensure_ascii=False)
    style = _STYLES[output]
    return lambda entry: format_event(entry.event, colour=colour, show_session=show_session, style=style, utc=utc)


def with_host(render: Callable[[Any], str]) -> Callable[[Any], str]:
    """On a fleet hub, a JSON line with its machine first (``"host"``, from the session id)."""
    import json

    from gz_ia.collector.reading import host_of

    def hosted(entry: Any) -> str:
        text = render(entry)
        host = host_of(entry.event.session_id)
        return text if host is None else "{" + f'"host":{json.dumps(host)},' + text.lstrip()[1:]

    return hosted


def follow_limits(options: dict[str, Any], *, single: bool, until_finished: bool) -> float | None:
    """Check ``--until-finished`` and ``--timeout``; return the timeout in seconds (None: none)."""
    follow: bool = options["follow"]
    if until_finished and not follow:
        raise click.UsageError("--until-finished needs -f/--follow")
    if until_finished and not single:
        raise click.UsageError("--until-finished follows one session: gz-ia session logs ID -f --until-finished")
    if until_finished and len(options["action"]) > 1:
        raise click.UsageError("--until-finished waits for one action: give --action at most once")
    if options["timeout"] is None:
        return None
    if not follow:
        raise click.UsageError("--timeout needs -f/--follow")
    from gz_ia.collector.query import parse_span

    try:
        return parse_span(options["timeout"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--timeout") from exc
