"""The web view of a real Claude Code session: hooks and telemetry on, a subagent, in headless Chromium.

The real Claude Code runs against the fake Anthropic API with gz-ia's hooks installed and its
OpenTelemetry pointed at the collector, as docs/user-guide.md sets them up; its subagent runs Bash.
The page draws that session as a waterfall: a title, the subagent's call nested under the Agent
call that spawned it, the model requests as rows with their tokens, every row in the order its
cycle started.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.fixtures.chromium import chromium, needs_chromium, open_page
from tests.fixtures.claude_run import ClaudeCode
from tests.fixtures.model_apis.anthropic import FakeAnthropic, ToolUse, Turn

pytestmark = [
    pytest.mark.agents,
    needs_chromium,
]


@pytest.fixture(name="api")
def _api() -> Iterator[FakeAnthropic]:
    api = FakeAnthropic()
    yield api
    api.close()


def _telemetry(collector: Any) -> dict[str, str]:
    """Claude Code's documented switches, pointed at the collector's ``endpoints.otlp``."""
    endpoint = json.loads(collector.gz_ia("status", "--json", check=True).stdout)["endpoints"]["otlp"]
    return {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "OTEL_LOGS_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-gz-ia-key={collector.key}",
        "OTEL_LOGS_EXPORT_INTERVAL": "500",
    }


ROWS = """() => [...document.querySelectorAll('#timeline tbody tr[data-action]')].map((row) =>
  ({action: row.dataset.action, session: row.dataset.session, depth: Number(row.dataset.depth),
    tokens: row.querySelector('td.tokens').textContent, start: row.children[2].textContent,
    rolled: row.querySelector('td.tokens').classList.contains('rolled')}))"""


def test_a_claude_code_session_with_a_subagent_reads_as_a_waterfall(
    collector: Any, api: FakeAnthropic, short_tmp: Path
) -> None:
    """The subagent's Bash call is drawn under the Agent call, model requests are rows with tokens,
    rows go by start time, and the session has a title, not its UUID."""
    claude = ClaudeCode(short_tmp / "home", collector.workspace, api, collector.env)
    claude.install_hooks()
    task = {"description": "Run a check", "prompt": "SUB-PAGE-MARKER: run echo", "subagent_type": "general-purpose"}
    api.script("RUN-SUB-PAGE", Turn(tools=(ToolUse("Agent", task, "toolu_agent"),)), Turn(text="parent done"))
    api.script(
        "SUB-PAGE-MARKER",
        Turn(tools=(ToolUse("Bash", {"command": "echo from-subagent"}, "toolu_subcall"),)),
        Turn(text="Subagent done."),
    )
    result = claude.run("RUN-SUB-PAGE: use a subagent", env=_telemetry(collector))
    assert result.returncode == 0, result.stderr
    session = result.session_id
    wait_for(
        lambda: 'gzia_otlp_records_total{outcome="joined",signal="logs"} 2.0' in collector.metrics(),
        message="both tool results joined to the hooks' cycles",
    )
    wait_for(
        lambda: (
            sum(line["action"].startswith("model ") for lines in collector.all_sessions().values() for line in lines)
            >= 8
        ),
        message="the four API requests' usage records",
    )
    address = collector.gz_ia("ui", "--no-browser", check=True).stdout.strip()
    with chromium() as browser:
        page = open_page(browser, f"{address}#/s/{session}")
        page.locator('#timeline tr[data-action="Bash"]').wait_for()
        page.locator('#timeline tr[data-action="Agent"]').wait_for()
        rows = page.evaluate(ROWS)
        # The collector's one model of the same tree, fetched with the page's own cookie.
        model = page.request.get(f"{address.split('?')[0]}api/cycles?session={session}").json()
        page.screenshot(path="/tmp/gz-ia-page-claude.png")
        title = page.locator("#session-title").inner_text()
    actions = [row["action"] for row in rows]
    agent = actions.index("Agent")
    below = rows[agent + 1 :]
    nested = [row for row in below if row["depth"] == 1]
    assert nested and all(row["session"].startswith(f"{session}.") for row in nested), rows
    assert "Bash" in [row["action"] for row in nested], rows  # the subagent's call, under the Agent call
    assert rows[agent + 1]["depth"] == 1, rows  # right below it
    models = [row for row in rows if row["action"].startswith("model ")]
    assert models and all(row["tokens"] for row in models), rows
    top = [row["start"] for row in rows if row["depth"] == 0]
    assert top == sorted(top), rows  # by start time (one day: the clock sorts as text)
    assert title and title != session
    # The rows' own tokens (the page's fold of the events) add up to the session's (the collector's).
    listed = {
        row["session_id"]: row
        for row in map(json.loads, collector.gz_ia("sessions", "--json", check=True).stdout.splitlines())
    }
    own = sum(
        int(row["tokens"].replace(",", ""))
        for row in rows
        if row["session"] == session and row["tokens"] and not row["rolled"]
    )
    assert own == listed[session]["tokens"]["total"], (rows, listed[session])
    # The page's fold of the events is the collector's: row for cycle, the same session, action and
    # tokens (what the browser still folds is held to the Python fold on this real run).
    drawn = sorted(
        (row["session"], row["action"], 0 if row["rolled"] else int(row["tokens"].replace(",", "") or 0))
        for row in rows
    )
    folded = sorted(
        (node["session_id"], cycle["action"], cycle["tokens"]["total"])
        for node in model["nodes"]
        for cycle in node["cycles"]
    )
    assert drawn == folded, (drawn, folded)
    # In the same order: each session's rows as the model orders its cycles (by start, the duration
    # a FINISH reports moving a start earlier).
    for node in model["nodes"]:
        shown = [row["action"] for row in rows if row["session"] == node["session_id"]]
        assert shown == [cycle["action"] for cycle in node["cycles"]], (node["session_id"], shown)
