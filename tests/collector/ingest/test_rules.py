"""The rules module is the one list of what an event is refused for: every refusal it builds is listed."""

from __future__ import annotations

import ast
import inspect

from gz_ia.client.protocol import RejectReason
from gz_ia.client.schema import Stage
from gz_ia.collector.ingest import rules, stages, staging, validation


def _reasons_named_in(module: object) -> set[RejectReason]:
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    return {
        RejectReason[node.attr]
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "RejectReason"
    }


def test_each_rule_is_listed_once() -> None:
    reasons = [rule.reason for rule in rules.RULES]
    assert len(reasons) == len(set(reasons))
    assert all(rule.requires and rule.checked_in for rule in rules.RULES)


def test_every_reason_the_rules_module_refuses_with_is_a_listed_rule() -> None:
    assert _reasons_named_in(rules) == {rule.reason for rule in rules.RULES}


def test_the_checks_build_their_refusals_in_the_rules_module() -> None:
    """Validation, staging and the stage protocol name no reason of their own (the sentences stay in one place)."""
    assert _reasons_named_in(stages) == set()
    assert _reasons_named_in(staging) == set()
    assert _reasons_named_in(validation) <= {RejectReason.INVALID_FIELD}  # msgspec's own sentence, as a fallback


def test_the_sentences_are_unchanged() -> None:
    assert rules.finish_without_start("action 'a'") == rules.Rejection(
        RejectReason.FINISH_WITHOUT_START,
        "FINISH for action 'a' which has no open cycle (start it with READ or PENDING)",
    )
    assert stages.apply(Stage.PENDING, Stage.READ, "a", "c") == rules.Rejection(
        RejectReason.BACKWARD_TRANSITION,
        "READ after PENDING for action 'a' cycle 'c': a cycle cannot go back; FINISH it first",
    )
