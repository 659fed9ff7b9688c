"""The web view in a real browser: headless Chromium (Debian's) driven by Playwright.

A real collector, a real agent process (``tests/fixtures/agents/live_agent.py``) and a few more
sessions; the page is opened at the address ``gz-ia ui --no-browser`` prints. The list fills, a
failure shows, a click opens a session and an action, an event the agent logs appears without a
reload, a hung action is flagged, and another uid's browser is refused. The screenshots in
docs/images/ are taken here (``GZ_IA_SCREENSHOTS=1`` writes them).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import REPO, CollectorProcess, send_events
from tests.fixtures.chromium import CHROMIUM, TIMEOUT_MS, _browser, needs_chromium
from tests.integration.live_agents import Agent

from gz_ia.client import build_event

STRANGER = 65534
__all__ = ["_browser"]  # the fixture, imported to be found here

pytestmark = needs_chromium


@pytest.fixture(name="agent")
def _agent(collector: CollectorProcess) -> Iterator[Agent]:
    others = [
        build_event(session_id=f"batch-{index:02d}", action="index", stage="READ", agent="gemini", role="indexer")
        for index in range(12)
    ]
    send_events(collector, others)
    started = Agent(collector, "ui-top")
    yield started
    started.close()


def _shoot(page: Any, name: str) -> None:
    if os.environ.get("GZ_IA_SCREENSHOTS"):
        page.screenshot(path=str(REPO / "docs" / "images" / name), full_page=False)


def test_the_page_lists_follows_and_drills_down(collector: CollectorProcess, agent: Agent, browser: Any) -> None:
    """List fills, failure shows, live event appears without reload, click opens an action, hung flagged."""
    from playwright.sync_api import expect

    address = collector.gz_ia("ui", "--no-browser", check=True).stdout.strip() + "&hung=2"
    page = browser.new_page(viewport={"width": 1400, "height": 800})
    page.set_default_timeout(TIMEOUT_MS)
    # What the browser complains of (a request answered 4xx/5xx, a CSP violation, a script error).
    complaints: list[str] = []
    page.on("console", lambda message: complaints.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: complaints.append(str(error)))
    page.goto(address)
    assert "key=" not in page.url  # traded for the cookie
    rows = page.locator("#sessions tbody tr")
    rows.first.wait_for()
    assert rows.count() == 14
    # Its open action may pass the page's hung threshold (2 s) before the list is drawn.
    assert page.locator('tr[data-session="ui-top"] .badge').inner_text() in ("running", "hung")
    assert page.locator('tr[data-session="ui-top-sub"] .badge').inner_text() == "failed"
    assert "planner" in page.locator('tr[data-session="ui-top"]').inner_text()
    assert "1,500" in page.locator('tr[data-session="ui-top"]').inner_text()  # tokens from attrs
    page.locator("#live.on").wait_for()
    _shoot(page, "web-sessions.png")

    # A new session appears in the list without a reload.
    send_events(collector, [build_event(session_id="late-arrival", action="x", stage="READ", agent="claude")])
    page.locator('tr[data-session="late-arrival"]').wait_for()

    # Search by FIELD=VALUE.
    page.fill("#query", "status=failed")
    page.press("#query", "Enter")
    expect(rows).to_have_count(1)  # not wait_for_function: the page's CSP refuses the eval it polls with
    assert page.locator("#sessions tbody tr").get_attribute("data-session") == "ui-top-sub"
    page.fill("#query", "")
    page.press("#query", "Enter")
    page.locator('tr[data-session="ui-top"]').click()

    # The session: its tree, its timeline, the open action running then hung.
    page.locator('#tree li[data-session="ui-top-sub"]').wait_for()
    deploy = page.locator('#timeline tr[data-action="deploy"]')
    deploy.wait_for()
    assert deploy.get_attribute("data-state") in ("running", "hung")
    page.locator('#timeline tr[data-action="deploy"][data-state="hung"]').wait_for()
    assert page.locator("#transcript a").get_attribute("title") == "/tmp/ui-top.transcript.jsonl"

    # A live event appears in the timeline without a reload.
    agent.do("step live-one")
    page.locator('#timeline tr[data-action="live-one"][data-state="ok"]').wait_for()
    agent.do("fail live-two")
    failed = page.locator('#timeline tr[data-action="live-two"]')
    failed.wait_for()
    page.locator('#timeline tr[data-action="live-two"][data-state="failed"]').wait_for()
    assert "live-two broke" in failed.inner_text()

    # One action's events and attrs on a click.
    page.locator('#timeline tr[data-action="explore"]').click()
    details = page.locator("#details-body")
    details.wait_for()
    assert '"input_tokens": 1200' in details.inner_text()
    assert page.locator("#details-title").inner_text().startswith("explore")
    _shoot(page, "web-session.png")

    # The subagent's failure, in its own timeline.
    page.locator('#tree li[data-session="ui-top-sub"]').click()
    page.locator('#timeline tr[data-action="run tests"][data-state="failed"]').wait_for()
    assert "3 tests failed" in page.locator('#timeline tr[data-action="run tests"]').inner_text()
    assert complaints == []
    page.close()


ROWS_NEAR_THE_VIEW = 60
"""More than the rows of an 800 px view and the few drawn above and below it; far fewer than held."""

IN_VIEW = """
(name) => {
  const row = document.querySelector(`#timeline tr[data-action="${name}"]`);
  if (!row) return false;
  const [r, b] = [row.getBoundingClientRect(), document.querySelector('#timeline-scroll').getBoundingClientRect()];
  return r.top >= b.top && r.bottom <= b.bottom;
}
"""


def _steps(session_id: str, numbers: range) -> list[Any]:
    return [
        build_event(session_id=session_id, action=f"step-{number:04d}", stage="READ", agent="claude")
        for number in numbers
    ]


def _finished_steps(session_id: str, numbers: range) -> list[Any]:
    return [
        build_event(session_id=session_id, action=f"step-{number:04d}", stage=stage, agent="claude")
        for number in numbers
        for stage in ("READ", "FINISH")
    ]


def _open_session(collector: CollectorProcess, browser: Any, session_id: str, newest_action: str) -> Any:
    """A page on the session's timeline, live, once the row of ``newest_action`` is drawn."""
    address = collector.gz_ia("ui", "--no-browser", check=True).stdout.strip()
    page = browser.new_page(viewport={"width": 1400, "height": 800})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{address}#/s/{session_id}")
    page.locator("#live.on").wait_for()
    page.locator(f'#timeline tr[data-action="{newest_action}"]').wait_for()
    return page


def test_the_list_flags_hung_sessions_and_a_tree_shows_its_first_failure(
    collector: CollectorProcess, browser: Any
) -> None:
    """A session whose cycle is open past the page's threshold is `hung` in the list; a tree whose
    subagent failed shows that failure and what came after at the top of its view."""
    from gz_ia.client import session

    client = collector.client()
    with session("pg-root", agent="claude", client=client) as root:
        child = root.subagent(session_id="pg-child")
        with child.action("run tests") as act:
            act.fail("3 tests failed")
        with root.action("retry") as act:
            act.usage(input_tokens=1200, output_tokens=34, cost_usd=0.5)
    with session("pg-stuck", agent="codex", client=client) as stuck:
        stuck.log("wait for build", "PENDING")
    assert client.flush(10)
    client.close()
    address = collector.gz_ia("ui", "--no-browser", check=True).stdout.strip() + "&hung=1"
    page = browser.new_page(viewport={"width": 1400, "height": 800})
    page.set_default_timeout(TIMEOUT_MS)
    complaints: list[str] = []
    page.on("pageerror", lambda error: complaints.append(str(error)))
    page.wait_for_timeout(1100)  # the open cycle passes the 1 s threshold
    page.goto(address)
    stuck_row = page.locator('tr[data-session="pg-stuck"]')
    stuck_row.wait_for()
    assert stuck_row.locator(".badge").inner_text() == "hung"
    assert "wait for build PENDING" in (stuck_row.locator("td").first.get_attribute("title") or "")
    assert page.locator('tr[data-session="pg-root"] .badge').inner_text() == "ok"
    assert "1,234" in page.locator('tr[data-session="pg-root"]').inner_text()  # usage in the reserved keys
    assert "1 hung" in page.locator("#page-info").inner_text()
    page.locator('tr[data-session="pg-root"]').click()
    why = page.locator("#why")
    why.wait_for()
    text = why.inner_text()
    assert "First failure: run tests in pg-child" in text and "3 tests failed" in text
    assert "After it: 1 actions" in text and "1,234 tokens" in text and "$0.5000" in text
    assert "pg-root \u203a pg-child" in text  # the chain, joined by a single angle quote
    assert not complaints


def test_the_timeline_draws_only_the_rows_near_its_view(collector: CollectorProcess, browser: Any) -> None:
    """A long timeline follows its tail with a bounded number of rows, and load older keeps all it loaded."""
    from playwright.sync_api import expect

    send_events(collector, _steps("long", range(1_500)))
    page = _open_session(collector, browser, "long", "step-1499")
    rows = page.locator("#timeline tbody tr[data-action]")
    assert page.evaluate(IN_VIEW, "step-1499")  # the newest window opens at its tail
    assert page.locator("#window-info").inner_text().startswith("500 events shown")
    assert 20 <= rows.count() <= ROWS_NEAR_THE_VIEW

    # Live events: the view follows the tail, the rows drawn stay few.
    send_events(collector, _steps("long", range(1_500, 1_600)))
    page.locator('#timeline tr[data-action="step-1599"]').wait_for()
    expect(page.locator('#timeline tr[data-action="step-1599"]')).to_be_in_viewport()
    assert rows.count() <= ROWS_NEAR_THE_VIEW

    # Older events, twice: past the 1,000 rows the page once held, nothing loaded is dropped.
    page.click("#older")
    expect(page.locator("#window-info")).to_have_text(re.compile(r"^1100 events"))
    page.click("#older")
    expect(page.locator("#window-info")).to_have_text(re.compile(r"^1600 events"))
    expect(page.locator('#timeline tr[data-action="step-0000"]')).to_be_in_viewport()  # at the top
    assert rows.count() <= ROWS_NEAR_THE_VIEW

    # Scrolled into the middle: those rows are drawn, and a live event does not move the view.
    page.evaluate("document.querySelector('#timeline-scroll').scrollTop = 800 * 28")
    expect(page.locator('#timeline tr[data-action="step-0805"]')).to_be_in_viewport()
    send_events(collector, _steps("long", range(1_600, 1_610)))
    expect(page.locator("#window-info")).to_have_text(re.compile(r"^1610 events"))
    assert page.evaluate(IN_VIEW, "step-0805")
    assert page.locator('#timeline tr[data-action="step-1609"]').count() == 0  # far below the view
    assert rows.count() <= ROWS_NEAR_THE_VIEW

    # Back at the end, it follows the tail again.
    page.evaluate("document.querySelector('#timeline-scroll').scrollTop = 1e9")
    send_events(collector, _steps("long", range(1_610, 1_620)))
    expect(page.locator('#timeline tr[data-action="step-1619"]')).to_be_in_viewport()
    page.close()


def test_past_the_spans_held_the_oldest_go_and_the_view_stays_put(collector: CollectorProcess, browser: Any) -> None:
    """Past 20,000 spans held the oldest are dropped; a view scrolled above the tail keeps showing its rows."""
    from playwright.sync_api import expect

    send_events(collector, _finished_steps("longer", range(500)))  # the window: the newest 250 of them
    page = _open_session(collector, browser, "longer", "step-0499")
    page.evaluate("document.querySelector('#timeline-scroll').scrollTop = 200 * 28")  # step-0450 on top
    expect(page.locator('#timeline tr[data-action="step-0450"]')).to_be_in_viewport()
    # Live, 500 actions at a time, each batch seen before the next: a subscriber far behind is told it
    # lagged and reloads its window.
    held = 250  # the window's
    for start in range(500, 20_350, 500):
        end = min(start + 500, 20_350)
        send_events(collector, _finished_steps("longer", range(start, end)))
        held = min(20_000, held + end - start)
        expect(page.locator("#window-info")).to_have_text(re.compile(rf"^{2 * held} events"), timeout=TIMEOUT_MS)
    assert held == 20_000  # 100 spans dropped
    # The count is capped from the 250th span of the last batch on: wait for its last span too.
    page.wait_for_function("view.order.length && view.order[view.order.length - 1].action === 'step-20349'")
    assert page.evaluate("view.order[0].action") == "step-0350"
    assert page.evaluate(IN_VIEW, "step-0450")
    assert page.locator("#timeline tbody tr[data-action]").count() <= ROWS_NEAR_THE_VIEW
    page.close()


def test_a_page_running_no_frames_still_folds_what_it_is_sent(collector: CollectorProcess, browser: Any) -> None:
    """As in a hidden tab, no animation frame runs: live events are folded anyway, not queued without end."""
    send_events(collector, _steps("quiet", range(10)))
    page = _open_session(collector, browser, "quiet", "step-0009")
    page.evaluate("window.requestAnimationFrame = () => 0")  # the frames a hidden tab does not run
    send_events(collector, _steps("quiet", range(10, 2_510)))
    # Polled from here: the page's CSP keeps Playwright from polling a JavaScript predicate in it.
    for _ in range(TIMEOUT_MS // 100):
        if page.evaluate("view.order.length + view.pending.length") >= 2_510:
            break
        page.wait_for_timeout(100)
    assert page.evaluate("view.order.length") >= 2_010  # the window's 10, then 2,000 folded at once
    assert page.evaluate("view.pending.length") < 2_000
    page.close()


def test_another_uids_browser_is_refused(collector: CollectorProcess) -> None:
    """Chromium run as another uid, given the very address with its key, gets the floor's 403."""
    address = collector.gz_ia("ui", "--no-browser", check=True).stdout.strip()
    home = Path(tempfile.mkdtemp(dir="/tmp", prefix="gz-ia-stranger-"))  # a home the stranger can reach
    home.chmod(0o755)
    os.chown(home, STRANGER, STRANGER)
    try:
        result = _as_stranger(home, address)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert "only its own user's processes" in result.stdout, result.stdout[-2000:]
    assert "<table" not in result.stdout  # not the page
    assert f"refusing a connection from uid {STRANGER}" in collector.log()


def _as_stranger(home: Path, address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={STRANGER}", f"--regid={STRANGER}", "--clear-groups", CHROMIUM, "--headless",
         "--no-sandbox", f"--user-data-dir={home / 'profile'}", "--dump-dom", address],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
