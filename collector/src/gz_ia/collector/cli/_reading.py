"""Reading commands: ``gz-ia session logs``, ``gz-ia logs``, ``gz-ia sessions``, ``gz-ia session tree``.

Conventions follow journalctl, kubectl and docker logs (ECOSYSTEM.md §2): ``-f`` follows like
``tail -F``, ``-n`` limits to the last N events (10 with ``-f`` and no ``--since``), ``-o`` picks the
format (``--json`` is ``-o json``: exactly the stored line), ``-g`` keeps events whose action or error
matches a regex, times are local unless ``--utc``, field filters OR within a flag and AND across
flags. Exit codes (the table is in ``_common`` and docs/reading.md): 0 success (an empty result
included), 1 no root, unknown session, a root of a newer layout or no ``--grep`` match, 2 usage
error, 3 shown with a gap (said on stderr), 4 ``--until-finished`` saw FAILED, 124 ``--timeout``.
Ctrl-C and a closed pipe (``| head``) end quietly.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import click

from gz_ia.client.schema import Stage, Status, StoredEvent

from . import main, session
from ._common import EXIT_FAILED, EXIT_GAP, EXIT_NO_MATCH, EXIT_NOT_FOUND, EXIT_TIMEOUT, root_of
from ._complete import complete_session_id
from ._pager import paged

if TYPE_CHECKING:
    from gz_ia.collector.view import EventStyle

_TIMES: Final = "now, today, yesterday, -1h, -15min, '2026-12-01 10:00', an epoch or RFC 3339"
_STAGES: Final = [stage.value for stage in Stage]
_STATUSES: Final = [status.value for status in Status]
_OUTPUTS: Final = ["short", "short-iso", "json", "json-pretty", "cat"]
_MACHINE_OUTPUTS: Final = frozenset({"json", "json-pretty"})
"""Formats for programs: no banner on stdout or stderr, the cursor on stderr."""
_STYLES: Final[dict[str, EventStyle]] = {"short": "short", "short-iso": "short-iso", "cat": "cat"}
"""The human formats, rendered by :func:`gz_ia.collector.view.format_event`."""


# --- parsing -----------------------------------------------------------------------------------------


def parse_time(value: str, *, now: datetime, utc: bool = False) -> datetime:
    """Return the instant of a time expression (:func:`gz_ia.collector.query.parse_time`); times without
    an offset are local, or UTC with ``utc``."""
    from gz_ia.collector.query import parse_time as parse_expression

    return parse_expression(value, now=now, tz=UTC if utc else None)


def use_colour(choice: str, stream: IO[str]) -> bool:
    """``--color``: an explicit choice wins, then ``NO_COLOR`` (no-color.org), then whether it is a TTY."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Output:
    """Writes lines to stdout; flushes each line when following (pipes and files see them at once)."""

    def __init__(self, *, flush_each: bool) -> None:
        self.stream: IO[str] = sys.stdout
        self.flush_each = flush_each

    def line(self, text: str) -> None:
        self.stream.write(text + "\n")
        if self.flush_each:
            self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()


def _quietly(function: Callable[..., None]) -> Callable[..., None]:
    """End on Ctrl-C or a closed pipe without a traceback."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            function(*args, **kwargs)
        except KeyboardInterrupt:
            with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                sys.stdout.flush()
            raise click.exceptions.Exit(0) from None
        except BrokenPipeError:
            # Python would complain again when it flushes stdout at exit: point it at /dev/null.
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(0) from None

    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


# --- the log commands ----------------------------------------------------------------------------------


def _log_options(function: Any) -> Any:
    options = [
        click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they land (like tail -F)."),
        click.option(
            "-n",
            "--lines",
            default=None,
            metavar="N|all",
            help="Show the last N events [default: all; 10 with --follow and no --since].",
        ),
        click.option("-S", "--since", default=None, help=f"Only events at or after T ({_TIMES})."),
        click.option("-U", "--until", default=None, help=f"Only events before T ({_TIMES})."),
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


@session.command("logs")
@click.argument("session_id", shell_complete=complete_session_id)
@click.argument("matches", nargs=-1, metavar="[FIELD=VALUE]...")
@click.option("--tree", is_flag=True, help="Also show subagent sessions (through parent_session_id).")
@click.option(
    "--until-finished",
    is_flag=True,
    help="With -f: stop when the session's first action cycle (or the one --action's) finishes; "
    "exit 0 if it finished OK, 4 if FAILED.",
)
@click.option(
    "--seq", default=None, metavar="N|N..M", help="Only the event with this seq (or this range); exit 1 if missing."
)
@_log_options
@click.pass_context
@_quietly
def session_logs(ctx: click.Context, session_id: str, tree: bool, until_finished: bool, **options: Any) -> None:
    """Print the events of SESSION_ID in stored (seq) order, across every retained segment.

    With --tree, its subagent sessions too, merged in time order. FIELD=VALUE arguments keep events
    whose FIELD (any stored field, or attrs.KEY) has that value: values of one field are ORed,
    different fields ANDed.
    """
    _run_logs(ctx, [session_id], tree=tree, until_finished=until_finished, **options)


@main.command("logs")
@click.argument("matches", nargs=-1, metavar="[FIELD=VALUE]...")
@_log_options
@click.pass_context
@_quietly
def all_logs(ctx: click.Context, **options: Any) -> None:
    """Print the events of every session of the root, merged in time order.

    FIELD=VALUE arguments keep events whose FIELD (any stored field, or attrs.KEY) has that value:
    values of one field are ORed, different fields ANDed.
    """
    _run_logs(ctx, None, tree=False, until_finished=False, seq=None, **options)


def _filters(options: dict[str, Any], now: datetime) -> Any:
    from gz_ia.collector.reading import Filters

    try:
        since = parse_time(options["since"], now=now, utc=options["utc"]) if options["since"] else None
        until = parse_time(options["until"], now=now, utc=options["utc"]) if options["until"] else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since/--until") from exc
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


def _line_count(value: str | None, *, follow: bool, since: str | None) -> int | None:
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


def _output_format(choice: str | None, *, as_json: bool) -> str:
    """The ``-o`` format; ``--json`` is its alias, so a different ``-o`` with it is a contradiction."""
    if as_json and choice not in (None, "json"):
        raise click.UsageError(f"--json means -o json; it cannot be combined with -o {choice}")
    return "json" if as_json else choice or "short"


def _selection(options: dict[str, Any]) -> Any:
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


def _renderer(output: str, *, colour: bool, show_session: bool, utc: bool) -> Callable[[Any], str]:
    """How one entry is printed in the ``-o`` format."""
    from gz_ia.collector.view import format_event

    if output == "json":
        return lambda entry: str(entry.line)
    if output == "json-pretty":
        return lambda entry: json.dumps(json.loads(entry.line), indent=2, ensure_ascii=False)
    style = _STYLES[output]
    return lambda entry: format_event(entry.event, colour=colour, show_session=show_session, style=style, utc=utc)


def _follow_limits(options: dict[str, Any], *, single: bool, until_finished: bool) -> float | None:
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


def _not_found(ctx: click.Context, exc: Exception) -> None:
    """Say why nothing could be read and exit 1 (a missing root says how a root is chosen)."""
    from gz_ia.collector import reading

    message = str(exc)
    if isinstance(exc, reading.RootNotFound):
        message += " (choose one with --root or GZ_IA_ROOT; a collector creates it when it starts)"
    click.echo(f"gz-ia: {message}", err=True)
    ctx.exit(EXIT_NOT_FOUND)


def _run_logs(
    ctx: click.Context, session_ids: list[str] | None, *, tree: bool, until_finished: bool, **options: Any
) -> None:
    from gz_ia.collector import reading

    from ._finish import FinishWatch
    from ._gaps import GapReport

    follow: bool = options["follow"]
    output = _output_format(options["output"], as_json=options["as_json"])
    if follow and options["reverse"]:
        raise click.UsageError("--reverse cannot be combined with --follow")
    timeout = _follow_limits(options, single=session_ids is not None, until_finished=until_finished)
    if options["seq"] is not None and (follow or tree):
        raise click.UsageError("--seq names events of one session: not with --follow or --tree")
    count = _line_count(options["lines"], follow=follow, since=options["since"])
    filters = _filters(options, datetime.now(UTC))
    selection = _selection(options)
    grep = selection.predicate()
    root = root_of(ctx)
    out = _Output(flush_each=follow)
    colour = use_colour(options["color"], out.stream)
    multi = session_ids is None or tree
    # `cat` is the message only: the session column appears there only when asked for.
    show_session = options["prefix"] if options["prefix"] is not None else multi and output != "cat"
    quiet: bool = options["quiet"]
    machine = output in _MACHINE_OUTPUTS
    render = _renderer(output, colour=colour, show_session=show_session, utc=options["utc"])
    # A follower's --json stream carries its gap notices in line with the events; stderr always does.
    gaps = GapReport(stdout_line=out.line if follow and machine else None)
    ctx.with_resource(paged(options["pager"] and not machine and not follow))

    seqs_shown: set[int] = set()

    def show(entry: Any) -> None:
        if selection.seqs is not None:
            seqs_shown.add(entry.event.seq)
        out.line(render(entry))

    plain_copy = (
        output == "json"
        and grep is None
        and session_ids is not None
        and len(session_ids) == 1
        and not tree
        and not follow
        and count is None
        and not options["reverse"]
        and not options["after_cursor"]
        and not options["show_cursor"]
        and filters.empty
    )
    try:
        reading.require_root(root)
        if options["after_cursor"]:
            reading.check_cursor(root, options["after_cursor"])
        if plain_copy:
            # Exactly the stored lines, nothing to select: copy bytes, decode nothing.
            binary = sys.stdout.buffer
            for chunk in reading.copy_lines(root, session_ids[0], on_gap=gaps):  # type: ignore[index]
                binary.write(chunk)
            binary.flush()
            if gaps:
                ctx.exit(EXIT_GAP)
            return
        shown = 0
        watch: FinishWatch | None = None
        members: list[str] = []
        anchors: dict[str, str] = {}
        if session_ids is None and not follow and not options["after_cursor"] and not options["show_cursor"]:
            # A question over the whole root: skip sessions by their checkpoints, search bytes first.
            from gz_ia.collector.query import search

            history = search(root, filters, selection, count=count, reverse=options["reverse"], on_gap=gaps)
        else:
            members = _members(root, session_ids, tree=tree)
            start = _start_positions(members, options["after_cursor"])
            for session_id in members:
                try:
                    anchors[session_id] = reading.end_cursor(root, session_id)
                except reading.SessionNotFound:
                    # Followed sessions are waited for; a tree may start at a session known only as a parent.
                    if not follow and not (tree and len(members) > 1):
                        raise
            if until_finished:
                watch = FinishWatch(members[0], options["action"][0] if options["action"] else None)
            if watch is not None and members[0] in anchors:
                # The followed cycle may have begun, or ended, before the part of the history shown.
                for entry in reading.iter_events(
                    root, members[0], until_seq=reading.cursor_seq(anchors[members[0]], members[0])
                ):
                    if watch.feed(entry.event):
                        break
            history = _history(
                root, members, start, anchors, filters, count,
                grep=grep, reverse=options["reverse"], on_gap=gaps, time_order=multi,
            )  # fmt: skip
        for entry in history:
            show(entry)
            shown += 1
        out.flush()
        if not shown and not quiet and not machine and not follow:
            click.echo("-- No entries --", err=True)
        resume = reading.combine_cursors(anchors.values()) if multi else anchors.get(members[0]) if members else None
        if not follow:
            if options["show_cursor"] and resume is not None:
                text = f"-- cursor: {resume}"
                click.echo(text, err=machine)
            if gaps:
                ctx.exit(EXIT_GAP)
            if selection.seqs is not None and session_ids is not None:
                _check_seqs(ctx, session_ids[0], selection.seqs, seqs_shown, anchors.get(session_ids[0]))
            if options["grep"] is not None and not shown:
                ctx.exit(EXIT_NO_MATCH)
            return
        if watch is not None and watch.status is not None:
            ctx.exit(_finish_code(watch))
        waiting_for = session_ids[0] if session_ids is not None and session_ids[0] not in anchors else None
        if waiting_for is not None and not quiet:
            click.echo(f"-- waiting for session {waiting_for} to start --", err=True)
        watched = None if session_ids is None or tree else members
        # A cursor that does not name a session reads it from its first event: one that starts
        # between the history and the follow loses nothing.
        follow_cursor = resume if resume is not None else reading.combine_cursors(anchors.values())
        if multi and session_ids is not None:
            # A tree grows: follow the whole root from its current end and keep the family's events.
            everyone: list[str] = []
            for key in _all_ids(root):
                with contextlib.suppress(reading.SessionNotFound):
                    everyone.append(reading.end_cursor(root, key))
            follow_cursor = reading.combine_cursors([*everyone, *anchors.values()])
        family = set(members)
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = False

        def stop() -> bool:
            nonlocal timed_out
            if deadline is None or time.monotonic() < deadline:
                return False
            if watch is None and (waiting_for is None or _exists(root, waiting_for)):
                return False  # the session started: --timeout bounded only the wait for it
            timed_out = True
            return True

        def family_gap(gap: Any) -> None:
            if not tree or gap.session_id in family:  # a tree follows the whole root: say only its own gaps
                gaps(gap)

        for entry in reading.follow(
            root, watched, cursor=follow_cursor, filters=None if watch else filters, stop=stop, on_gap=family_gap
        ):
            if tree:
                parent = entry.event.parent_session_id
                if entry.session_id not in family and (parent is None or parent not in family):
                    continue
                family.add(entry.session_id)
            finished = watch is not None and watch.feed(entry.event)
            if (watch is None or filters.match(entry.event)) and (grep is None or grep(entry.event)):
                show(entry)
            if finished and watch is not None:
                out.flush()
                ctx.exit(_finish_code(watch))
        if timed_out:
            what = (
                f"session {waiting_for} did not start"
                if waiting_for and not _exists(root, waiting_for)
                else ("the followed action did not finish")
            )
            click.echo(f"gz-ia: {what} within --timeout {options['timeout']}", err=True)
            ctx.exit(EXIT_TIMEOUT)
    except reading.SessionNotFound as exc:
        _not_found(ctx, exc)
    except reading.InvalidCursor as exc:
        raise click.BadParameter(str(exc), param_hint="--after-cursor") from exc
    except reading.CursorExpired as exc:
        click.echo(f"gz-ia: {exc}; the history ends here", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    except reading.LayoutError as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)


def _finish_code(watch: Any) -> int:
    return EXIT_FAILED if watch.status is Status.FAILED else 0


def _exists(root: Path, session_id: str) -> bool:
    from gz_ia.collector import reading

    try:
        reading.end_cursor(root, session_id)
    except reading.SessionNotFound:
        return False
    return True


def _check_seqs(
    ctx: click.Context, session_id: str, seqs: tuple[int, int], shown: set[int], anchor: str | None
) -> None:
    """``--seq``: say which of the asked seqs were not printed, and exit 1 if any."""
    from gz_ia.collector import reading

    missing = [seq for seq in range(seqs[0], seqs[1] + 1) if seq not in shown]
    if not missing:
        return
    newest = reading.cursor_seq(anchor, session_id) if anchor is not None else 0
    asked = f"seq {seqs[0]}" if seqs[0] == seqs[1] else f"seq {seqs[0]}..{seqs[1]}"
    lost = [seq for seq in missing if seq <= newest]
    parts = []
    if lost:
        parts.append(f"{_ranges(lost)} not retained or not matching the filters")
    if len(lost) < len(missing):
        parts.append(f"{_ranges([seq for seq in missing if seq > newest])} not written yet (newest: seq {newest})")
    click.echo(f"gz-ia: session {session_id!r} has no event for {asked}: {'; '.join(parts)}", err=True)
    ctx.exit(EXIT_NOT_FOUND)


def _ranges(seqs: list[int]) -> str:
    """``[3, 4, 5, 9]`` as ``seq 3..5, 9``."""
    runs: list[list[int]] = []
    for seq in seqs:
        if runs and seq == runs[-1][1] + 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return "seq " + ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)


def _all_ids(root: Path) -> list[str]:
    from gz_ia.collector import reading

    return [summary.session_id for summary in reading.list_sessions(root)]


def _members(root: Path, session_ids: list[str] | None, *, tree: bool) -> list[str]:
    from gz_ia.collector import reading

    if session_ids is None:
        return _all_ids(root)
    if not tree:
        return session_ids
    try:
        node = reading.session_tree(root, session_ids[0])
    except reading.SessionNotFound:
        return session_ids  # not written yet: follow it, and its subagents as they appear
    return [item.session_id for _depth, item in node.walk()]


def _start_positions(members: list[str], cursor: str | None) -> dict[str, str | None]:
    """Per session, the cursor to start after (None: from its first event)."""
    from gz_ia.collector import reading

    if cursor is None:
        return dict.fromkeys(members)
    known = set(reading.cursor_sessions(cursor))
    if len(members) == 1 and members[0] not in known:
        raise reading.InvalidCursor(f"the cursor does not belong to session {members[0]!r}")
    return {session_id: cursor if session_id in known else None for session_id in members}


_MAX_RUNS: Final = 64
"""Past this many time runs in one session, it is sorted in memory instead of merged run by run."""


def _time_key(entry: Any) -> Any:
    return entry.event.timestamp


def _history(
    root: Path,
    members: list[str],
    start: dict[str, str | None],
    anchors: dict[str, str],
    filters: Any,
    count: int | None,
    *,
    grep: Callable[[StoredEvent], bool] | None,
    reverse: bool,
    on_gap: Callable[[Any], None],
    time_order: bool,
) -> Iterator[Any]:
    """Yield what is stored up to the anchors, oldest first (newest first with ``reverse``).

    One session comes in stored (``seq``) order; several (``time_order``) strictly by timestamp,
    even where a session's clock went backwards: each session is read as its runs of rising time
    (see :func:`reading.time_runs`), merged. ``grep`` selects before ``count`` does: ``-n 5 -g X`` is
    the last five events matching X; ``-n`` takes each session's newest events by ``seq``.
    """
    from gz_ia.collector import reading

    limits = {key: reading.cursor_seq(value, key) for key, value in anchors.items()}

    def kept(entries: Iterable[Any]) -> Iterator[Any]:
        return iter(entries) if grep is None else (entry for entry in entries if grep(entry.event))

    def forward(session_id: str, after: str | None, until: int, page_size: int = 1000) -> Iterator[Any]:
        return kept(
            reading.iter_events(
                root, session_id, cursor=after, filters=filters, on_gap=on_gap, until_seq=until, page_size=page_size
            )
        )

    def newest(session_id: str) -> list[Any]:
        """``-n`` without a cursor: the last ``count`` events, read backwards from the anchor, no further."""
        if not count:
            return []
        # Without --grep the first page is the answer; with it, larger pages save round trips.
        events = reading.iter_events(
            root, session_id, cursor=anchors[session_id], reverse=True, filters=filters,
            page_size=count if grep is None else max(count, 1000), on_gap=on_gap,
        )  # fmt: skip
        return list(reversed(list(itertools.islice(kept(events), count))))

    def streams(session_id: str) -> list[Iterator[Any]]:
        """The session as iterators that each rise in time (one, unless its clock went back)."""
        after, until = start.get(session_id), limits[session_id]
        if not time_order:
            return [forward(session_id, after, until)]
        runs = reading.time_runs(root, session_id, cursor=after, until_seq=until)
        if len(runs) > _MAX_RUNS:
            return [iter(sorted(forward(session_id, after, until), key=_time_key))]
        bounds = [until if last is None else last for _cursor, last in runs]
        size = max(50, 1000 // len(runs))
        return [forward(session_id, cursor, last, size) for (cursor, _last), last in zip(runs, bounds, strict=True)]

    present = [key for key in members if key in anchors]
    if count is not None and any(start.get(key) is None for key in present):
        selected = [entry for key in present for entry in newest(key) if start.get(key) is None]
        selected += [entry for key in present if start.get(key) is not None for run in streams(key) for entry in run]
        if time_order:
            selected.sort(key=_time_key)
        selected = selected[-count:] if count else []
    else:
        merged: Iterator[Any] = heapq.merge(*(run for key in present for run in streams(key)), key=_time_key)
        if count is not None:
            selected = list(itertools.islice(merged, count))
        elif not reverse:
            yield from merged
            return
        else:
            selected = list(merged)
    yield from (reversed(selected) if reverse else selected)


# --- sessions and trees -----------------------------------------------------------------------------------


def _summary_json(summary: Any) -> dict[str, Any]:
    return {
        "session_id": summary.session_id,
        "parent_session_id": summary.parent_session_id,
        "agent": summary.agent,
        "first_time": summary.first_time.isoformat().replace("+00:00", "Z") if summary.first_time else None,
        "last_time": summary.last_time.isoformat().replace("+00:00", "Z") if summary.last_time else None,
        "events": summary.events,
        "open_actions": summary.open_actions,
        "failures": summary.failures,
        "segments": summary.segments,
        "incomplete": summary.incomplete,
    }


@session.command("tree")
@click.argument("session_id", shell_complete=complete_session_id)
@click.option("--json", "as_json", is_flag=True, help="The tree as nested JSON.")
@click.option("--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True)
@click.pass_context
@_quietly
def session_tree_command(ctx: click.Context, session_id: str, as_json: bool, color: str) -> None:
    """Draw SESSION_ID and its subagent sessions with each node's status and duration."""
    from gz_ia.collector import reading
    from gz_ia.collector.view import format_tree

    try:
        node = reading.session_tree(root_of(ctx), session_id)
    except reading.SessionNotFound as exc:
        _not_found(ctx, exc)
    except reading.LayoutError as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    out = _Output(flush_each=False)
    if as_json:

        def encode(item: Any) -> dict[str, Any]:
            return {
                **_summary_json(item.summary),
                "status": item.status,
                "duration_seconds": item.duration_seconds,
                "children": [encode(child) for child in item.children],
                "hidden": item.hidden,
            }

        out.line(json.dumps(encode(node)))
    else:
        for line in format_tree(node, colour=use_colour(color, out.stream)):
            out.line(line)
    out.flush()
