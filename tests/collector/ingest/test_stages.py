"""The stage protocol, as a table and against a simple model under random event sequences."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gz_ia.client.protocol import RejectReason
from gz_ia.client.schema import Stage
from gz_ia.collector.ingest.rules import Rejection
from gz_ia.collector.ingest.stages import CycleBudget, CycleKey, apply
from gz_ia.collector.service.duties import Role

R, P, F = Stage.READ, Stage.PENDING, Stage.FINISH


@pytest.mark.parametrize(
    ("open_stage", "stage", "expected"),
    [
        (None, R, R),
        (None, P, P),
        (None, F, RejectReason.FINISH_WITHOUT_START),
        (R, R, R),
        (R, P, P),
        (R, F, None),
        (P, P, P),
        (P, F, None),
        (P, R, RejectReason.BACKWARD_TRANSITION),
    ],
)
def test_transition_table(open_stage: Stage | None, stage: Stage, expected: object) -> None:
    """Every (open stage, incoming stage) pair gives the SPEC's answer."""
    result = apply(open_stage, stage, "act")
    if isinstance(expected, RejectReason):
        assert isinstance(result, Rejection)
        assert result.reason is expected
        assert "act" in result.detail
    else:
        assert result == expected


class StageProtocolModel(RuleBasedStateMachine):
    """Random sequences over a few actions: apply() agrees with a plain dict model of open cycles."""

    def __init__(self) -> None:
        super().__init__()
        self.state: dict[str, Stage] = {}
        self.model: dict[str, str] = {}

    @rule(action=st.sampled_from(["a", "b", "c"]), stage=st.sampled_from(list(Stage)))
    def send(self, action: str, stage: Stage) -> None:
        before = self.model.get(action)
        if stage is F:
            allowed = before is not None
        elif stage is R:
            allowed = before != "PENDING"
        else:
            allowed = True
        result = apply(self.state.get(action), stage, action)
        assert (not isinstance(result, Rejection)) is allowed
        if not allowed:
            return
        if stage is F:
            self.model.pop(action)
            assert result is None
            self.state.pop(action)
        else:
            self.model[action] = stage.value
            assert result is stage
            self.state[action] = stage

    @invariant()
    def open_cycles_match(self) -> None:
        assert {k: v.value for k, v in self.state.items()} == self.model


TestStageProtocolModel = StageProtocolModel.TestCase


def test_a_cycle_id_is_named_in_the_refusal() -> None:
    """A refused event that names its cycle is told which one had no open cycle."""
    refusal = apply(None, F, "Run tests", "3f9a01bc2d")
    assert isinstance(refusal, Rejection)
    assert "'Run tests' cycle '3f9a01bc2d'" in refusal.detail


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_bounds_each_session_and_all_of_them() -> None:
    """A session's own bound comes first; past the total, nothing opens until a FINISH makes room."""
    sessions: list[dict[CycleKey, Stage]] = [{}, {}]
    budget = CycleBudget(per_session=2, total=3, recount=lambda: sum(map(len, sessions)), clock=_Clock())
    assert budget.open(sessions[0], "a", R, "s0") is None
    assert budget.open(sessions[0], ("a", "c1"), R, "s0") is None
    refused = budget.open(sessions[0], "b", R, "s0")
    assert isinstance(refused, Rejection) and refused.reason is RejectReason.TOO_MANY_OPEN_ACTIONS
    assert budget.open(sessions[1], "a", P, "s1") is None
    refused = budget.open(sessions[1], "b", R, "s1")
    assert isinstance(refused, Rejection) and refused.reason is RejectReason.TOO_MANY_OPEN_ACTIONS_TOTAL
    assert sessions == [{"a": R, ("a", "c1"): R}, {"a": P}]
    del sessions[0]["a"]  # its FINISH
    budget.count -= 1
    assert budget.open(sessions[1], "b", R, "s1") is None


def test_sessions_let_go_of_are_recounted_when_the_total_is_reached() -> None:
    """The count never learns of sessions the writer released; at the bound it is taken again from
    memory, at most once a second, so that a flood past the bound costs no recount per event."""
    in_memory: list[dict[CycleKey, Stage]] = [{}]
    recounts = 0

    def recount() -> int:
        nonlocal recounts
        recounts += 1
        return sum(map(len, in_memory))

    clock = _Clock()
    budget = CycleBudget(per_session=10, total=2, recount=recount, clock=clock)
    released: dict[CycleKey, Stage] = {}
    assert budget.open(released, "a", R, "gone") is None
    assert budget.open(released, "b", R, "gone") is None  # then the writer lets the session go
    assert budget.open(in_memory[0], "a", R, "s") is None  # recounted: nothing was in memory
    assert recounts == 1
    assert budget.open(in_memory[0], "b", R, "s") is None
    assert isinstance(budget.open(in_memory[0], "c", R, "s"), Rejection)  # within the second: no recount
    assert recounts == 1
    clock.now += 1.0
    assert isinstance(budget.open(in_memory[0], "c", R, "s"), Rejection)  # recounted: really full
    assert recounts == 2


def test_a_loaded_session_counts_and_shares_divide_the_total() -> None:
    """Cycles rebuilt from a session's files hold memory like new ones; each share bounds its part."""
    loaded: dict[CycleKey, Stage] = {"a": R, ("b", "x"): P, "c": R}
    budget = CycleBudget(per_session=10, total=3, recount=lambda: len(loaded), clock=_Clock())
    budget.adopt(loaded)
    assert isinstance(budget.open({}, "d", R, "s"), Rejection)
    assert (
        Role(open_actions_divisor=3).open_actions_total(1_000_000),
        Role(open_actions_divisor=2).open_actions_total(1),
    ) == (333_333, 1)
