"""Tokens, cost and model: reported with ``act.usage(...)`` through a real collector, stored as usage
attrs, totalled per session (through rotations and a restart), rolled up over subagents, shown by
``gz-ia sessions``, ``session tree`` and ``session logs``, and counted in the metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.conftest import wait_for

from gz_ia import client as gz
from gz_ia.client.usage import CACHE_READ_TOKENS, COST_USD, INPUT_TOKENS, MODEL, OUTPUT_TOKENS, usage_attrs

ROTATING = {"GZ_IA_ROTATION_MAX_BYTES": "4096", "GZ_IA_ROTATION_COMPRESS": "true"}


def _calls(collector: Any) -> None:
    """main: 20 model calls (rotating its file), its subagent sub: one call that failed (still counted)."""
    client = collector.client()
    try:
        with gz.session("main", agent="claude", client=client) as main:
            for _ in range(20):
                with main.action("model call") as act:
                    act.usage(input_tokens=100, output_tokens=10, cache_read_tokens=1000, cost_usd=0.01, model="m-1")
            with main.subagent("explorer", session_id="sub") as sub, pytest.raises(RuntimeError):  # noqa: PT012
                with sub.action("model call") as act:
                    act.usage(input_tokens=7, output_tokens=3, model="m-small")
                    act.usage(output_tokens=2, cost_usd=0.5)
                    raise RuntimeError("the model said no")
        assert client.flush(10.0)
    finally:
        client.close()


def _sessions_json(collector: Any) -> dict[str, dict[str, Any]]:
    result = collector.gz_ia("sessions", "--json", check=True)
    return {row["session_id"]: row for row in map(json.loads, result.stdout.splitlines())}


def test_usage_is_totalled_per_session_and_rolled_up_over_subagents(make_collector: Any) -> None:
    """sessions --json gives each session's own tokens, cost and model and its tree's totals; the
    table's TOKENS and COST include the subagents; tree draws both; the totals survive a restart."""
    collector = make_collector(env=ROTATING)
    _calls(collector)
    for attempt in ("running", "restarted"):
        rows = _sessions_json(collector)
        main, sub = rows["main"], rows["sub"]
        assert main["tokens"] == {
            "input": 2000,
            "output": 200,
            "cache_read": 20000,
            "cache_creation": 0,
            "total": 22200,
        }
        assert main["cost_usd"] == pytest.approx(0.2)
        assert main["model"] == "m-1"
        assert main["segments"] > 1, attempt  # the totals are not one segment's
        assert sub["tokens"]["output"] == 5
        assert sub["model"] == "m-small"
        assert sub["cost_usd"] == pytest.approx(0.5)
        assert main["tree_tokens"]["total"] == 22200 + 12
        assert main["tree_cost_usd"] == pytest.approx(0.7)
        assert sub["tree_tokens"]["total"] == 12
        table = collector.gz_ia("sessions", "--no-pager", check=True).stdout.splitlines()
        row = next(line.split() for line in table if line.endswith(" main"))
        assert row[-5:] == ["22.2k", "$0.7000", "claude", "-", "main"]
        collector.restart()
    tree = json.loads(collector.gz_ia("session", "tree", "main", "--json", check=True).stdout)
    assert tree["tree_tokens"]["total"] == 22212
    assert tree["children"][0]["tokens"]["total"] == 12
    drawn = collector.gz_ia("session", "tree", "main", "--color", "never", check=True).stdout
    assert "22.2k tokens $0.2000; with subagents 22.2k tokens $0.7000" in drawn
    page = collector.gz_ia("session", "view", "main", "--tree", "-o", "-", check=True).stdout
    assert '<b class="tokens">22.2k</b> tokens · <b class="cost">$0.7000</b>' in page  # the tree's, at the top
    assert "12 tokens, $0.5000, m-small" in page  # the subagent's own, on its row


def test_usage_is_stored_as_attrs_and_counted_in_the_metrics(collector: Any, schema_validator: Any) -> None:
    """Each usage record is a FINISH whose attrs hold the GenAI keys (valid against the published
    schema); gzia_tokens_total and gzia_cost_usd_total count them by kind and agent."""
    _calls(collector)
    lines = [line for line in collector.session_lines("sub") if line["stage"] == "FINISH"]
    assert len(lines) == 1
    schema_validator.validate(lines[0])
    attrs = lines[0]["attrs"]
    assert attrs[INPUT_TOKENS] == 7
    assert attrs[OUTPUT_TOKENS] == 5  # two calls of act.usage add up
    assert attrs[MODEL] == "m-small"
    assert attrs[COST_USD] == 0.5
    assert lines[0]["status"] == "FAILED"
    logs = collector.gz_ia("session", "logs", "sub", check=True).stdout
    assert "[m-small: 7 in, 5 out, $0.5000]" in logs
    wait_for(lambda: "gzia_tokens_total{" in collector.metrics())
    assert collector.metric('gzia_tokens_total{agent="claude",kind="input"}') == 2000
    assert collector.metric('gzia_tokens_total{agent="claude",kind="cache_read"}') == 20000
    assert collector.metric('gzia_tokens_total{agent="explorer",kind="output"}') == 5
    assert collector.metric('gzia_cost_usd_total{agent="explorer"}') == pytest.approx(0.5)


def test_usage_attrs_refuse_negative_and_non_integer_counts() -> None:
    """usage_attrs (and so act.usage) refuses what cannot be a count or a cost."""
    with pytest.raises(ValueError, match="input_tokens"):
        usage_attrs(input_tokens=-1)
    with pytest.raises(TypeError, match="output_tokens"):
        usage_attrs(output_tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cost_usd"):
        usage_attrs(cost_usd=float("nan"))
    assert usage_attrs(cache_read_tokens=0, model="") == {CACHE_READ_TOKENS: 0}
