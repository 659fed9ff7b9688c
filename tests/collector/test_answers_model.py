"""The answers read off a folded session (views.answers), on events built in memory: the cases a
real run makes only by chance (a step replaced, a failure's own usage, ties)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from gz_ia.client import build_event
from gz_ia.client.schema import StoredEvent
from gz_ia.collector.cli._answers import parse_age
from gz_ia.collector.views.answers import diff_sessions, hung, open_cycles, why_of
from gz_ia.collector.views.timeline import build_session

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def run(session_id: str, steps: list[tuple[str, str, float, dict[str, Any]]]) -> Any:
    """Fold ``steps`` (action, stage, seconds after T0, more fields) as one session's stored events."""
    events = []
    for seq, (action, stage, at, fields) in enumerate(steps, start=1):
        event = build_event(
            session_id=session_id, action=action, stage=stage, agent="a", timestamp=T0 + timedelta(seconds=at), **fields
        )
        events.append(msgspec.convert({**msgspec.to_builtins(event), "seq": seq}, StoredEvent))
    return build_session(session_id, events)


def test_a_replaced_step_diverges_where_it_is_and_the_rest_aligns() -> None:
    a = run("a", [("call", "FINISH", 1, {"attrs": {"tool": t}}) for t in ("Read", "Bash", "Edit")])
    b = run("b", [("call", "FINISH", 1, {"attrs": {"tool": t}}) for t in ("Read", "Grep", "Edit")])
    answer = diff_sessions(a, b)
    assert [tag for tag, _, _ in answer.rows] == ["=", "~", "="]
    assert answer.first_divergence is not None
    index, left, right = answer.first_divergence
    assert (index, left and left.tool, right and right.tool) == (1, "Bash", "Grep")


def test_the_failures_own_usage_is_not_after_it_and_the_open_cycle_is_where_activity_stopped() -> None:
    node = run(
        "s",
        [
            ("x", "READ", 0, {}),
            ("x", "FINISH", 1, {"status": "FAILED", "error": "e", "attrs": {"input_tokens": 5}}),
            ("y", "PENDING", 2, {}),
            ("y", "FINISH", 3, {"attrs": {"gen_ai.usage.output_tokens": 4, "gz-ia.cost_usd": 0.1}}),
            ("z", "READ", 4, {}),
            ("w", "PENDING", 5, {}),
        ],
    )
    answer = why_of(node)
    assert answer is not None
    assert (answer.first_failure.action, answer.chain) == ("x", ("s",))
    assert (answer.after.actions, answer.after.tokens, answer.after.cost_usd, answer.after.duration_ms) == (
        3,
        4,
        0.1,
        4000,
    )
    # z is open too, but w began inside it: z holds the work on, w is where the session stopped.
    assert [(cycle.action, cycle.stage) for cycle in open_cycles(node)] == [("w", "PENDING")]


def test_a_cycle_waiting_on_a_subagent_that_still_logs_is_not_hung() -> None:
    node = run("parent", [("Agent", "PENDING", 0, {})])
    (waiting,) = open_cycles(node)
    now = T0 + timedelta(seconds=600)
    assert hung([waiting], now, 300) == [waiting]
    assert hung([waiting], now, 300, {"parent": T0 + timedelta(seconds=500)}) == []  # its subagent logged 100 s ago
    assert hung([waiting], now, 300, {"parent": T0 + timedelta(seconds=200)}) == [waiting]  # quiet for 400 s


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("5m", 300), ("1.5h", 5400), ("300", 300), ("250ms", 0.25)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


def test_a_bad_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_age("soon")


def tools(session_id: str, names: str) -> Any:
    """One FINISH-only cycle per letter of ``names``, each a tool of that name."""
    return run(session_id, [("call", "FINISH", index, {"attrs": {"tool": name}}) for index, name in enumerate(names)])


@pytest.mark.parametrize(
    ("left", "right", "tags", "index"),
    [
        ("abc", "abc", "===", None),
        ("ab", "abcd", "==++", 2),
        ("xabc", "abc", "-===", 0),
        ("abxyc", "abzc", "==~-=", 2),
    ],
)
def test_alignments(left: str, right: str, tags: str, index: int | None) -> None:
    answer = diff_sessions(tools("a", left), tools("b", right))
    assert "".join(tag for tag, _, _ in answer.rows) == tags
    assert (answer.first_divergence[0] if answer.first_divergence else None) == index


def test_past_the_bound_the_middle_is_paired_by_position(monkeypatch: pytest.MonkeyPatch) -> None:
    """The common start and end stay aligned; the middle, too long to search, goes position by position."""
    from gz_ia.collector.views import answers

    monkeypatch.setattr(answers, "MAX_ALIGNED", 2)
    answer = diff_sessions(tools("a", "sxyzwe"), tools("b", "sxqzwvve"))
    assert "".join(tag for tag, _, _ in answer.rows) == "==~==++="
    assert answer.first_divergence is not None and answer.first_divergence[0] == 2


def _tallied(session_id: str, node: Any, steps: list[tuple[str, str, float, dict[str, Any]]]) -> Any:
    """Where the session waits read off its tally (what its checkpoint carries), folded from the
    same events as ``run`` stores them, and through a checkpoint written and read back."""
    from gz_ia.collector.reading.sessions import SessionSummary, waiting_of
    from gz_ia.collector.storage.checkpoints import Checkpoint, encode_checkpoint
    from gz_ia.collector.storage.replay import SessionFold, Trace

    fold = SessionFold()
    for seq, (action, stage, at, fields) in enumerate(steps, start=1):
        event = build_event(
            session_id=session_id, action=action, stage=stage, agent="a", timestamp=T0 + timedelta(seconds=at), **fields
        )
        fold.apply(msgspec.json.decode(msgspec.json.encode({**msgspec.to_builtins(event), "seq": seq}), type=Trace))
    written = encode_checkpoint(fold.tally_checkpoint(segment=1, offset=0, segment_seq=0, started=0.0))
    stored = msgspec.json.decode(written, type=Checkpoint)
    again = SessionFold(stored)
    summaries = []
    for tally in (fold, again):
        summaries.append(
            SessionSummary(
                session_id,
                None,
                node.agent,
                None,
                None,
                tally.seq,
                len(tally.open_actions),
                0,
                1,
                waiting=waiting_of(tally),
            )
        )
    return summaries


@pytest.mark.parametrize(
    "steps",
    [
        [("x", "READ", 0, {}), ("x", "FINISH", 1, {}), ("z", "READ", 4, {}), ("w", "PENDING", 5, {})],
        [("turn", "READ", 0, {}), ("t", "READ", 1, {"cycle": "a"}), ("t", "READ", 1, {"cycle": "b"})],
        [
            ("turn", "READ", 0, {}),
            ("t", "READ", 1, {}),
            ("t", "PENDING", 2, {}),
            ("u", "READ", 3, {}),
            ("u", "FINISH", 4, {}),
        ],
        [("a", "READ", 0, {}), ("a", "FINISH", 1, {})],
    ],
)
def test_where_a_session_waits_is_the_same_from_its_tally_as_from_its_fold(
    steps: list[tuple[str, str, float, dict[str, Any]]],
) -> None:
    """``sessions --hung`` reads checkpoints, not files: the tally's open cycles, their start and the
    newest cycle's start give the fold's answer (a container cycle left out, cycles named apart)."""
    from gz_ia.collector.views.answers import waiting_cycles

    node = run("s", steps)
    for summary in _tallied("s", node, steps):
        assert waiting_cycles(summary) == tuple(open_cycles(node))


def test_a_checkpoint_of_an_earlier_gz_ia_with_open_cycles_says_it_does_not_know() -> None:
    """Without the start times an earlier gz-ia did not record, the session's file is read instead."""
    from gz_ia.client.schema import Stage
    from gz_ia.collector.reading.sessions import waiting_of
    from gz_ia.collector.storage.checkpoints import Checkpoint
    from gz_ia.collector.storage.replay import SessionFold

    earlier = SessionFold(Checkpoint(seq=3, open_actions={"x": Stage.READ}))
    assert waiting_of(earlier) is None
    assert waiting_of(SessionFold(Checkpoint(seq=3))) == ()
