"""``gz-ia session why`` and ``gz-ia session diff``: the first failure of a tree and what came after
it; where two runs part ways (the answers are :mod:`gz_ia.collector.views.answers`')."""

from __future__ import annotations

import json
import re
from typing import Final

import click

from ._common import EXIT_NOT_FOUND, root_of
from ._complete import complete_session_id
from ._hosts import host_option, hosted
from ._output import Output, not_found, quietly

__all__ = ["parse_age", "session_diff_command", "session_why_command"]

_AGE: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_age(text: str) -> float:
    """Seconds of a duration such as ``90s``, ``5m``, ``1.5h`` or ``300`` (seconds).

    Raises:
        ValueError: not a duration.
    """
    found = _AGE.match(text)
    if found is None:
        raise ValueError(f"{text!r} is not a duration such as 90s, 5m or 2h")
    return float(found.group(1)) * _UNIT_SECONDS[found.group(2) or "s"]


@click.command("why")
@click.argument("session_id", shell_complete=complete_session_id)
@click.option("--json", "as_json", is_flag=True, help="first_failure, chain and after as one JSON object.")
@host_option
@click.pass_context
@quietly
def session_why_command(ctx: click.Context, session_id: str, as_json: bool, host: str | None) -> None:
    """Say where SESSION_ID's tree first failed (subagents included) and what it did after that.

    Exits 0 with the failure, 1 with a sentence when nothing in the tree failed. On a fleet hub,
    SESSION_ID is a machine's own id (or the hub's HOST.SESSION_ID); --host picks the machine where
    several used it.
    """
    from gz_ia.collector import reading
    from gz_ia.collector.views.answers import why

    session_id = hosted(ctx, session_id, host)
    try:
        answer = why(root_of(ctx), session_id)
    except reading.SessionNotFound as exc:
        not_found(ctx, exc)
    except reading.LayoutError as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    if answer is None:
        click.echo(f"gz-ia: no cycle of session {session_id} or its subagents failed", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    out = Output(flush_each=False)
    if as_json:
        out.line(json.dumps(answer.as_json()))
    else:
        failure, after = answer.first_failure, answer.after
        stamp = answer.as_json()["first_failure"]["timestamp"]
        out.line(f"first failure: {failure.action} in {failure.session_id} at {stamp}")
        out.line(f"error: {failure.error or '(none given)'}")
        out.line(f"chain: {' > '.join(answer.chain)}")
        out.line(
            f"after it: {after.actions} actions over {after.duration_ms / 1000:.1f}s, "
            f"{after.tokens} tokens, ${after.cost_usd:.4f}"
        )
    out.flush()


@click.command("diff")
@click.argument("a", shell_complete=complete_session_id)
@click.argument("b", shell_complete=complete_session_id)
@click.option("--json", "as_json", is_flag=True, help="first_divergence, totals and the aligned cycles as one object.")
@click.pass_context
@quietly
def session_diff_command(ctx: click.Context, a: str, b: str, as_json: bool) -> None:
    """Align the cycles of sessions A and B (by action, and by tool where attrs name one) and say where
    they first differ.

    Each line is one aligned pair: '=' the same step in both, '~' a different step, '-' only in A,
    '+' only in B. The totals of each follow. On a fleet hub, A and B may be a machine's own ids
    (or the hub's HOST.SESSION_ID, to compare two machines' runs of one id).
    """
    from gz_ia.collector import reading
    from gz_ia.collector.views.answers import diff_sessions
    from gz_ia.collector.views.timeline import load_tree

    root = root_of(ctx)
    a, b = (hosted(ctx, name, None, choose="its HOST.SESSION_ID") for name in (a, b))
    try:
        answer = diff_sessions(load_tree(root, a, tree=False), load_tree(root, b, tree=False))
    except reading.SessionNotFound as exc:
        not_found(ctx, exc)
    except reading.LayoutError as exc:
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    data = answer.as_json()
    out = Output(flush_each=False)
    if as_json:
        out.line(json.dumps(data))
        out.flush()
        return

    def step(cycle: dict[str, object] | None) -> str:
        if cycle is None:
            return "-"
        tool = f" [{cycle['tool']}]" if cycle["tool"] and cycle["tool"] != cycle["action"] else ""
        return f"{cycle['action']}{tool} {cycle['status'] or 'open'}"

    for row in data["cycles"]:
        out.line(f"{row['tag']} {step(row['a']):<40} {step(row['b'])}")
    divergence = data["first_divergence"]
    if divergence is None:
        out.line("no divergence: the same steps in the same order")
    else:
        out.line(f"first divergence at step {divergence['index']}: {step(divergence['a'])} | {step(divergence['b'])}")
    for side in ("a", "b"):
        totals = data["totals"][side]
        out.line(
            f"{side}: {data[side]} {totals['actions']} actions, {totals['failed']} failed, "
            f"{totals['duration_ms'] / 1000:.1f}s, {totals['tokens']} tokens, ${totals['cost_usd']:.4f}"
        )
    out.flush()
