"""The log commands: ``gz-ia session logs`` and ``gz-ia logs``: the stored history, then follow it.

``-f`` follows like ``tail -F``; the options and their meaning are in :mod:`._log_options`, the
history before the follow in :mod:`._history`, the gap notices in :mod:`._gaps`. Exit codes (the
table is in ``_common`` and docs/reading.md): 0 success (an empty result included), 1 no root,
unknown session, a root of a newer layout or no ``--grep`` match, 2 usage error, 3 shown with a gap
(said on stderr), 4 ``--until-finished`` saw FAILED, 124 ``--timeout``. Ctrl-C and a closed pipe
(``| head``) end quietly.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import click

from gz_ia.client.schema import Status

from ._common import EXIT_FAILED, EXIT_GAP, EXIT_NO_MATCH, EXIT_NOT_FOUND, EXIT_TIMEOUT, root_of, socket_path_of
from ._complete import complete_session_id
from ._history import all_ids, members_of, start_positions, stored_history
from ._hosts import exists, host_option, hosted
from ._log_options import (
    MACHINE_OUTPUTS,
    filters_of,
    follow_limits,
    line_count,
    log_options,
    output_format,
    renderer,
    selection_of,
    with_host,
)
from ._output import Output, not_found, quietly, use_colour
from ._pager import paged

__all__ = ["all_logs", "session_logs"]


@click.command("logs")
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
@host_option
@log_options
@click.pass_context
@quietly
def session_logs(
    ctx: click.Context, session_id: str, tree: bool, until_finished: bool, host: str | None, **options: Any
) -> None:
    """Print the events of SESSION_ID in stored (seq) order, across every retained segment.

    With --tree, its subagent sessions too, merged in time order. FIELD=VALUE arguments keep events
    whose FIELD (any stored field, or attrs.KEY) has that value: values of one field are ORed,
    different fields ANDed. On a fleet hub, SESSION_ID is a machine's own id (or the hub's
    HOST.SESSION_ID); --host picks the machine where several used it.
    """
    _run_logs(ctx, [hosted(ctx, session_id, host)], tree=tree, until_finished=until_finished, **options)


@click.command("logs")
@click.argument("matches", nargs=-1, metavar="[FIELD=VALUE]...")
@log_options
@click.pass_context
@quietly
def all_logs(ctx: click.Context, **options: Any) -> None:
    """Print the events of every session of the root, merged in time order.

    FIELD=VALUE arguments keep events whose FIELD (any stored field, or attrs.KEY) has that value:
    values of one field are ORed, different fields ANDed.
    """
    _run_logs(ctx, None, tree=False, until_finished=False, seq=None, **options)


def _run_logs(
    ctx: click.Context, session_ids: list[str] | None, *, tree: bool, until_finished: bool, **options: Any
) -> None:
    from gz_ia.collector import reading

    from ._finish import FinishWatch
    from ._gaps import GapReport

    follow: bool = options["follow"]
    output = output_format(options["output"], as_json=options["as_json"])
    if follow and options["reverse"]:
        raise click.UsageError("--reverse cannot be combined with --follow")
    timeout = follow_limits(options, single=session_ids is not None, until_finished=until_finished)
    if options["seq"] is not None and (follow or tree):
        raise click.UsageError("--seq names events of one session: not with --follow or --tree")
    count = line_count(options["lines"], follow=follow, since=options["since"])
    filters = filters_of(options, datetime.now(UTC))
    selection = selection_of(options)
    grep = selection.predicate()
    root = root_of(ctx)
    out = Output(flush_each=follow)
    colour = use_colour(options["color"], out.stream)
    multi = session_ids is None or tree
    # `cat` is the message only: the session column appears there only when asked for.
    show_session = options["prefix"] if options["prefix"] is not None else multi and output != "cat"
    quiet: bool = options["quiet"]
    machine = output in MACHINE_OUTPUTS
    render = renderer(output, colour=colour, show_session=show_session, utc=options["utc"])
    hub = output in ("json", "json-pretty") and reading.is_hub_root(root)
    if hub:
        render = with_host(render)
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
        and not hub
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
    live = None
    try:
        reading.require_root(root)
        if follow:
            from gz_ia.collector.live.follow import subscribe_or_none

            # Before the history is read: every event after it then comes from the stream or is in
            # the files already (the follower skips what it showed). No collector: the files only.
            only = session_ids if session_ids is not None and not tree else None  # a tree grows: all
            live = subscribe_or_none(root, socket_path_of(ctx), sessions=only)
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
        from gz_ia.collector.query import narrows, search, search_lines

        whole_root = session_ids is None and not follow and not options["after_cursor"] and not options["show_cursor"]
        searched = whole_root and narrows(filters, selection, root)
        if searched and output == "json" and not hub:
            # The stored lines as they are, in order: written as bytes, no entry made for one (a
            # hub's lines gain their host when printed, so they are not copied as stored).
            out.flush()
            binary = sys.stdout.buffer
            for chunk in search_lines(root, filters, selection, count=count, reverse=options["reverse"], on_gap=gaps):
                binary.write(chunk)
                shown += bool(chunk)
            binary.flush()
            history: Iterable[Any] = ()
        elif searched:
            # A question over the whole root: skip sessions by their checkpoints, search bytes first.
            history = search(root, filters, selection, count=count, reverse=options["reverse"], on_gap=gaps)
        else:
            members = members_of(root, session_ids, tree=tree)
            start = start_positions(members, options["after_cursor"])
            # --seq N..M names one session's events by number: read from the boundary before N
            # (found as event_at finds it) up to M, never the history before or after.
            seek = selection.seqs is not None and not options["after_cursor"]
            if seek:
                start[members[0]] = reading.cursor_before(root, members[0], selection.seqs[0])
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
            history = stored_history(
                root, members, start, anchors, filters, None if seek else count,
                grep=grep, reverse=options["reverse"] and not seek, on_gap=_in_range(gaps, selection.seqs),
                time_order=multi, last_seq=selection.seqs[1] if selection.seqs is not None else None,
            )  # fmt: skip
            if seek:
                history = _window(history, count, reverse=options["reverse"])
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
            for key in all_ids(root):
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
            if watch is None and (waiting_for is None or exists(root, waiting_for)):
                return False  # the session started: --timeout bounded only the wait for it
            timed_out = True
            return True

        def family_gap(gap: Any) -> None:
            if not tree or gap.session_id in family:  # a tree follows the whole root: say only its own gaps
                gaps(gap)

        follow_filters = None if watch else filters
        entries: Iterator[Any]
        if live is not None:
            from gz_ia.collector.live.follow import follow_live

            entries = follow_live(
                live, root, watched, cursor=follow_cursor, filters=follow_filters, stop=stop, on_gap=family_gap
            )
        else:
            entries = reading.follow(
                root, watched, cursor=follow_cursor, filters=follow_filters, stop=stop, on_gap=family_gap
            )
        for entry in entries:
            if tree:
                # A subagent joins through its parent, or through its root when the parent never logged.
                parent, top = entry.event.parent_session_id, entry.event.root_session_id
                if entry.session_id not in family and parent not in family and top not in family:
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
                if waiting_for and not exists(root, waiting_for)
                else ("the followed action did not finish")
            )
            click.echo(f"gz-ia: {what} within --timeout {options['timeout']}", err=True)
            ctx.exit(EXIT_TIMEOUT)
    except reading.SessionNotFound as exc:
        not_found(ctx, exc)
    except reading.InvalidCursor as exc:
        raise click.BadParameter(str(exc), param_hint="--after-cursor") from exc
    except reading.CursorExpired as exc:
        click.echo(f"gz-ia: {exc}; the history ends here", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    except reading.LayoutError as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    finally:
        if live is not None:
            live.close()


def _in_range(report: Callable[[Any], None], seqs: tuple[int, int] | None) -> Callable[[Any], None]:
    """``--seq N..M``: report only the gaps that may hide one of those events."""
    if seqs is None:
        return report

    def in_range(gap: Any) -> None:
        if gap.last is None or gap.last >= seqs[0]:
            report(gap)

    return in_range


def _window(history: Iterable[Any], count: int | None, *, reverse: bool) -> Iterator[Any]:
    """``--seq N..M`` read forward: its last ``count`` events (all: None), newest first with ``reverse``."""
    kept = collections.deque(history, maxlen=count)
    return reversed(kept) if reverse else iter(kept)


def _finish_code(watch: Any) -> int:
    return EXIT_FAILED if watch.status is Status.FAILED else 0


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
