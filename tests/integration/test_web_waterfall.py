"""The web view's session page as a waterfall, in a real headless Chromium on a real collector.

A finished session is drawn in the order its cycles started (telemetry that arrives late goes where
it belongs), a subagent's cycles under the call that spawned it, model calls beside tool calls with
their tokens and cost, on a scale of the session's own span, with a title and unambiguous dates.
The page also waits for a root and a session that have no event yet, and survives a collector
restart (or says what to do when the key it held is gone).

The events are sent over the collector's socket with the times an agent's hooks and telemetry
would give them: a real agent cannot be made to send a batch late on cue, nor to have run
yesterday.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from tests.conftest import CollectorProcess, send_events
from tests.fixtures.chromium import _browser, needs_chromium, open_page

from gz_ia.client import build_event

__all__ = ["_browser"]  # the fixture, imported to be found here

STRANGER = 65534
SHOTS = Path("/tmp/gz-ia-page-shots")

pytestmark = needs_chromium


def _shoot(page: Any, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / name))


YESTERDAY = datetime.now(UTC).replace(microsecond=0) - timedelta(days=1)


def _at(seconds: float) -> datetime:
    return YESTERDAY + timedelta(seconds=seconds)


def _cycle(session: str, action: str, start: float, end: float, **fields: Any) -> list[Any]:
    finish = fields.pop("finish", None)
    opening = {key: value for key, value in fields.items() if key != "attrs"}
    return [
        build_event(session_id=session, action=action, stage="PENDING", agent="claude-code", timestamp=_at(start),
                    cycle=f"{action}-{start}", attrs=fields.get("attrs"), **opening),
        build_event(session_id=session, action=action, stage="FINISH", agent="claude-code", timestamp=_at(end),
                    cycle=f"{action}-{start}", duration_ms=int((end - start) * 1000), attrs=finish, **opening),
    ]  # fmt: skip


def _finished_tree(collector: CollectorProcess) -> None:
    """A session of yesterday, 20 s long: a Bash call, an Agent call whose subagent runs two calls,
    and a model call whose telemetry arrives last, timestamped before the Agent call."""
    top, child = "wf-top", "wf-top.sub1"
    usage = {"gen_ai.request.model": "claude-x", "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 234,
             "gz-ia.cost_usd": 0.0123}  # fmt: skip
    child_usage = {"gen_ai.request.model": "claude-x", "gen_ai.usage.input_tokens": 500, "gz-ia.cost_usd": 0.005}
    hooks = [
        *_cycle(top, "Bash", 0, 2, attrs={"command": "npm test"}),
        *_cycle(top, "Agent", 4, 16, attrs={"subagent_type": "explorer"}, finish={"child_session_id": child}),
        *_cycle(child, "Read", 5, 6, parent_session_id=top, attrs={"file_path": "src/app.py"}),
        *_cycle(child, "model claude-x", 7, 9, parent_session_id=top, finish=child_usage),
        *_cycle(top, "Edit", 17, 20, attrs={"file_path": "src/app.py"}),
    ]
    telemetry = _cycle(top, "model claude-x", 2.5, 3.5, finish=usage)  # a batch that comes late
    send_events(collector, hooks)
    send_events(collector, telemetry)


ROWS = """() => [...document.querySelectorAll('#timeline tbody tr[data-action]')].map((row) =>
  [row.dataset.action, row.dataset.session, row.dataset.depth, row.querySelector('td.tokens').textContent,
   row.querySelector('td.cost').textContent])"""
BAR_SHARE = """(name) => {
  const row = document.querySelector(`#timeline tr[data-action="${name}"][data-depth="0"]`);
  const bar = row.querySelector('.bar');
  const piece = bar.querySelector('span');
  return piece.getBoundingClientRect().width / bar.getBoundingClientRect().width;
}"""


def test_a_finished_session_is_a_waterfall_in_time_order_on_its_own_scale(
    collector: CollectorProcess, browser: Any
) -> None:
    """Rows by start time (a late batch in its place), the subagent's calls nested under the Agent call,
    tokens and cost per row, per session and rolled up, a title, ISO dates, bars scaled to the session."""
    from playwright.sync_api import expect

    _finished_tree(collector)
    address = collector.gz_ia("ui", "--no-browser", check=True).stdout.strip()
    page = open_page(browser, address)
    row = page.locator('#sessions tr[data-session="wf-top"]')
    row.wait_for()
    assert "Bash: npm test" in row.locator(".title").inner_text()  # the first action, not the UUID
    assert row.locator(".id").inner_text() == "wf-top"
    started = row.locator("td").nth(4).inner_text()
    assert started == YESTERDAY.astimezone().strftime("%Y-%m-%d %H:%M:%S"), started
    assert re.search(r"times in .*UTC[+\u2212]\d\d:\d\d", page.locator("#zone").inner_text())
    _shoot(page, "sessions.png")

    row.click()
    page.locator('#timeline tr[data-action="Edit"]').wait_for()
    expect(page.locator("#tree li")).to_have_count(2)
    rows = page.evaluate(ROWS)
    assert [(action, session, depth) for action, session, depth, _tokens, _cost in rows] == [
        ("Bash", "wf-top", "0"),
        ("model claude-x", "wf-top", "0"),  # arrived last, started before the Agent call
        ("Agent", "wf-top", "0"),
        ("Read", "wf-top.sub1", "1"),
        ("model claude-x", "wf-top.sub1", "1"),
        ("Edit", "wf-top", "0"),
    ]
    assert rows[1][3:] == ["1,234", "$0.0123"] and rows[4][3:] == ["500", "$0.0050"]
    assert rows[2][3:] == ["500", "$0.0050"]  # the Agent call: its subagent's, rolled up
    assert page.locator("#session-facts .duration").inner_text() == "20.0 s"
    assert page.locator("#session-title").inner_text() == "Bash: npm test"
    assert page.locator("#session-id").inner_text() == "wf-top"
    expect(page.locator('#session-facts [data-usage="session"]')).to_have_text("1,234 tokens · $0.0123")
    expect(page.locator('#session-facts [data-usage="tree"]')).to_have_text("with subagents 1,734 tokens · $0.0173")
    assert YESTERDAY.astimezone().strftime("started %Y-%m-%d %H:%M:%S") in page.locator("#session-facts").inner_text()
    # The Agent call ran 12 s of the session's 20: its bar is over half the width, not a tick.
    share = page.evaluate(BAR_SHARE, "Agent")
    assert 0.5 < share < 0.65, share
    page.locator('#timeline tr[data-action="model claude-x"][data-depth="0"]').click()
    facts = page.locator("#details-body .facts").inner_text()
    assert "model claude-x" in facts and "1,234 tokens · $0.0123" in facts, facts
    _shoot(page, "waterfall.png")

    # A late batch while the page is open: its row goes where it started, not at the end.
    send_events(collector, _cycle("wf-top", "Grep", 16.5, 16.8, attrs={"pattern": "TODO"}))
    page.locator('#timeline tr[data-action="Grep"]').wait_for()
    assert [row[0] for row in page.evaluate(ROWS)][-2:] == ["Grep", "Edit"]
    # A cycle opened now: the session runs again, and its scale runs to now (yesterday's bars shrink).
    send_events(collector, [build_event(session_id="wf-top", action="Write", stage="READ", agent="claude-code")])
    page.locator('#timeline tr[data-action="Write"]').wait_for()
    for _ in range(50):
        if page.evaluate(BAR_SHARE, "Agent") < 0.05:
            break
        page.wait_for_timeout(100)
    assert page.evaluate(BAR_SHARE, "Agent") < 0.05  # a day wide: the bar is its 2 px minimum
    page.close()


def test_a_page_waits_for_a_root_and_a_session_that_have_no_event_yet(
    collector: CollectorProcess, browser: Any, tmp_path: Path
) -> None:
    """Opened on a workspace whose .harness is not made yet, the list and a session's page wait for its
    first event and show it live; a root anywhere else is still refused."""
    from gz_ia.client import Client

    workspace = tmp_path / "fresh"
    workspace.mkdir()
    root = workspace / ".harness"
    address = collector.gz_ia("ui", "--no-browser", check=True).stdout.strip()
    base = address.split("&root=")[0]
    complaints: list[str] = []
    page = open_page(browser, f"{base}&root={quote(str(root))}")
    page.on("console", lambda message: complaints.append(message.text) if message.type == "error" else None)
    page.locator("#live.on").wait_for()
    other = open_page(browser, f"{base}&root={quote(str(root))}#/s/first-one", width=1400)
    other.locator("#live.on").wait_for()

    root.mkdir()  # as a client makes it before its first event
    client = Client(socket_path=collector.socket, root=root)
    try:
        client.send_future(build_event(session_id="first-one", action="hello", stage="READ", agent="codex")).result(10)
    finally:
        client.close()
    page.locator('#sessions tr[data-session="first-one"]').wait_for()
    other.locator('#timeline tr[data-action="hello"]').wait_for()
    assert page.locator("#live").inner_text() == "live"
    assert not page.locator("#list-error").is_visible()
    assert complaints == []

    theirs = tmp_path / "theirs"  # a directory of another uid: no root of ours is to come there
    (theirs / "made").mkdir(parents=True)
    (theirs / "made" / ".harness").mkdir()
    for path in (theirs, theirs / "made", theirs / "made" / ".harness"):
        os.chown(path, STRANGER, STRANGER)
    for refused in (tmp_path / "elsewhere", tmp_path, theirs / ".harness", theirs / "made" / ".harness"):
        request = urllib.request.Request(
            f"{collector.http_url}/live?root={quote(str(refused))}", headers=collector.http_headers()
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 404
        assert "is not a root this collector writes" in json.loads(caught.value.read())["error"]
    page.close()
    other.close()


def test_after_a_restart_the_page_reconnects_and_says_what_to_do_when_its_key_is_gone(
    collector: CollectorProcess, browser: Any
) -> None:
    """A restarted collector is reconnected to and what it writes shows; one started with a new key
    gets a page that says to run gz-ia ui, and a reload shows that page, not JSON."""
    send_events(collector, [build_event(session_id="rs-one", action="before", stage="READ", agent="claude")])
    address = collector.gz_ia("ui", "--no-browser", check=True).stdout.strip()
    page = open_page(browser, f"{address}#/s/rs-one")
    page.locator("#live.on").wait_for()
    page.locator('#timeline tr[data-action="before"]').wait_for()

    collector.restart()
    send_events(collector, [build_event(session_id="rs-one", action="after", stage="READ", agent="claude")])
    page.locator('#timeline tr[data-action="after"]').wait_for()
    page.locator("#live.on").wait_for()

    collector.stop()
    (collector.state_dir / "http.json").unlink()  # a new key is drawn at the start
    collector.start()
    page.locator("#notice").wait_for()
    assert "gz-ia ui" in page.locator("#notice").inner_text()
    assert "gz-ia ui" in page.locator("#live").inner_text()
    _shoot(page, "key-gone.png")
    page.reload()
    page.locator("h1").wait_for()
    assert "gz-ia ui" in page.locator("body").inner_text()
    assert '{"error"' not in page.content()
    _shoot(page, "key-gone-reloaded.png")
    page.close()
