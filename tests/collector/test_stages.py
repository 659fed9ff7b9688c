"""The stage protocol, as a table and against a simple model under random event sequences."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gz_ia.client.protocol import RejectReason
from gz_ia.client.schema import Stage
from gz_ia.collector.stages import Rejection, apply

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
