"""`gz-ia session view`: the HTML timeline of a known session tree, rendered in real headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from tests.conftest import send_events

from gz_ia.client import build_event
from gz_ia.collector.views.html import COLOURS

T0 = datetime(2026, 9, 24, 18, 15, 0, tzinfo=UTC)
WIDTH, HEIGHT = 1200, 800
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # we run as root (ENVIRONMENT.md §4)
    "--disable-gpu",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    f"--window-size={WIDTH},{HEIGHT}",
    "--no-first-run",
    "--disable-extensions",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--enable-logging=stderr",
    "--v=0",
]
# A probe appended to a copy of the page: after the page's own script ran, write every bar's box
# into the DOM, where --dump-dom can read it.
PROBE = """<script>
window.addEventListener("load", function () {
  var out = {};
  document.querySelectorAll(".bar").forEach(function (bar) {
    var r = bar.getBoundingClientRect();
    out[bar.getAttribute("data-action")] = [r.left, r.top, r.right, r.bottom];
  });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def known_session(collector: Any) -> None:
    """A planner with one OK and one FAILED action, and a subagent with one OK and one still-open action."""

    def event(session_id: str, action: str, stage: str, at: float, **fields: Any) -> Any:
        who: dict[str, Any] = (
            {"agent": "claude", "role": "planner"}
            if session_id == "tl-root"
            else {"agent": "agy", "role": "test-runner", "parent_session_id": "tl-root"}
        )
        return build_event(
            session_id=session_id, action=action, stage=stage, timestamp=T0 + timedelta(seconds=at), **who, **fields
        )

    failed: dict[str, Any] = {"status": "FAILED", "error": "3 tests failed: test_io <db>"}
    send_events(
        collector,
        [
            event("tl-root", "Plan the change", "READ", 0),
            event("tl-root", "Plan the change", "PENDING", 1),
            event("tl-sub", "Index deps", "READ", 1.5),
            event("tl-root", "Plan the change", "FINISH", 3, duration_ms=3000),
            event("tl-root", "Run tests", "PENDING", 4),
            event("tl-sub", "Index deps", "FINISH", 5, duration_ms=3500),
            event("tl-sub", "Open action", "READ", 6),
            event("tl-root", "Run tests", "FINISH", 8, duration_ms=4000, **failed),
        ],
    )


def chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run Debian's headless Chromium with a throwaway profile."""
    binary = shutil.which("chromium")
    assert binary, "chromium is not installed (scripts/test installs it)"
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def near(pixel: tuple[int, ...], colour: str, tolerance: int = 40) -> bool:
    """Whether an RGB pixel is within ``tolerance`` (per channel) of a ``#rrggbb`` colour."""
    target = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return all(abs(a - b) <= tolerance for a, b in zip(pixel[:3], target, strict=True))


def count(image: Image.Image, box: list[float], colour: str) -> int:
    """Pixels of ``colour`` inside ``box`` (left, top, right, bottom), widened by 2 px for outlines."""
    left, top, right, bottom = (round(v) for v in box)
    region = image.crop((max(0, left - 2), max(0, top - 2), min(WIDTH, right + 2), min(HEIGHT, bottom + 2)))
    data = region.tobytes()  # RGB triplets; getdata() is deprecated in recent Pillow
    return sum(1 for index in range(0, len(data), 3) if near(tuple(data[index : index + 3]), colour))


@pytest.fixture(name="page", scope="module")
def _page(make_module_collector: Any) -> Path:
    """The known session tree written by `gz-ia session view tl-root --tree -o ...` (once per module:
    the tests only read the page)."""
    collector = make_module_collector()
    known_session(collector)
    output: Path = collector.base / "timeline.html"
    result = collector.gz_ia("session", "view", "tl-root", "--tree", "-o", str(output))
    assert result.returncode == 0, result.stderr
    assert "2 sessions" in result.stdout
    return output


def test_page_is_self_contained_and_carries_the_details(page: Path) -> None:
    """The file loads nothing from the network and carries stages, durations, the tree and the escaped error."""
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<link" not in text
    assert "@import" not in text
    assert "tl-sub" in text
    assert "└─" in text
    failed_bar = re.search(r'<div class="bar failed" data-action="Run tests"[^>]* title="([^"]*)"', text)
    assert failed_bar, "the FAILED action has a bar with a title"
    tip = html.unescape(failed_bar.group(1))
    assert "error: 3 tests failed: test_io <db>" in tip
    assert "duration 4.0 s" in tip
    assert "PENDING  2026-09-24T18:15:04.000Z" in tip
    assert "<db>" not in text  # escaped, never raw markup
    assert 'data-action="Open action" data-status="OPEN"' in text


def test_renders_in_chromium_without_errors(page: Path, tmp_path: Path) -> None:
    """Headless Chromium runs the page's script to the end, with no console message and no error recorded."""
    result = chromium("--dump-dom", page.as_uri(), tmp=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'data-rendered="ok"' in result.stdout
    assert not re.search(r"<html[^>]*data-js-errors", result.stdout)
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line]
    assert console == []
    # The script moved titles into its own tooltip, so that the browser does not show two.
    assert 'data-tip="Run tests' in result.stdout


def test_a_script_error_would_be_caught(page: Path, tmp_path: Path) -> None:
    """The same check flags a page whose script throws: the error lands on <html> and on the console log."""
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text().replace("</body>", "<script>notAFunction();</script></body>"))
    result = chromium("--dump-dom", broken.as_uri(), tmp=tmp_path)
    assert re.search(r'<html[^>]*data-js-errors="[^"]*notAFunction', result.stdout)
    assert any("CONSOLE" in line and "notAFunction" in line for line in result.stderr.splitlines())


def test_screenshot_shows_the_expected_bars(page: Path, tmp_path: Path) -> None:
    """A 1200x800 screenshot has a red FAILED bar for "Run tests", green caps on the OK actions, bars in time order."""
    probe_page = tmp_path / "probe.html"
    probe_page.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    dumped = chromium("--dump-dom", probe_page.as_uri(), tmp=tmp_path)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dumped.stdout)
    assert found, dumped.stdout[-2000:]
    boxes: dict[str, list[float]] = json.loads(html.unescape(found.group(1)))
    assert set(boxes) == {"Plan the change", "Run tests", "Index deps", "Open action"}

    shot = tmp_path / "shot.png"
    result = chromium(f"--screenshot={shot}", page.as_uri(), tmp=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)

    failed, ok = COLOURS["FAILED"], COLOURS["OK"]
    assert count(image, boxes["Run tests"], failed) > 150  # outline plus the FAILED cap
    assert count(image, boxes["Run tests"], ok) == 0
    for action in ("Plan the change", "Index deps"):
        assert count(image, boxes[action], ok) >= 60, action  # the 8x12 OK cap
        assert count(image, boxes[action], failed) == 0, action
    assert count(image, boxes["Open action"], ok) == 0
    assert count(image, boxes["Open action"], failed) == 0
    assert count(image, boxes["Plan the change"], COLOURS["READ"]) > 200
    assert count(image, boxes["Plan the change"], COLOURS["PENDING"]) > 400
    # Time runs left to right: 0 s, 1.5 s, 4 s, 6 s; "Run tests" spans the second half.
    lefts = [boxes[name][0] for name in ("Plan the change", "Index deps", "Run tests", "Open action")]
    assert lefts == sorted(lefts)
    plan_left, run_left, run_right = boxes["Plan the change"][0], boxes["Run tests"][0], boxes["Run tests"][2]
    track = run_right - 8 - plan_left  # the bar ends 8 px past its time for the FINISH cap
    assert abs((run_left - plan_left) / track - 0.5) < 0.02
    # Rows go down in tree order: the subagent's rows come after its parent's.
    assert boxes["Run tests"][1] < boxes["Index deps"][1] < boxes["Open action"][1]


def test_view_to_stdout_and_unknown_session(collector: Any) -> None:
    """`-o -` writes the page to standard output; an unknown session exits 1 with its name."""
    client = collector.client()
    client.log(session_id="solo", action="a", stage="READ", agent="claude")
    assert client.flush(10)
    client.close()
    shown = collector.gz_ia("session", "view", "solo", "-o", "-")
    assert shown.returncode == 0
    assert shown.stdout.startswith("<!DOCTYPE html>")
    missing = collector.gz_ia("session", "view", "nobody", "-o", "-")
    assert missing.returncode == 1
    assert "nobody" in missing.stderr


def steps(session_id: str, cycles: int, *, start: datetime = T0, failing_every: int = 0) -> list[Any]:
    """``cycles`` action cycles ``step-<n>`` (READ, PENDING, FINISH), one event a second; every
    ``failing_every``-th cycle FAILED."""
    events = []
    for number in range(cycles):
        failed = bool(failing_every) and number % failing_every == 0
        for offset, stage in enumerate(("READ", "PENDING", "FINISH")):
            fields: dict[str, Any] = {}
            if stage == "FINISH":
                fields = {"duration_ms": 2000}
                if failed:
                    fields.update(status="FAILED", error=f"step {number} broke")
            events.append(
                build_event(
                    session_id=session_id,
                    action=f"step-{number}",
                    stage=stage,
                    agent="claude",
                    timestamp=start + timedelta(seconds=3 * number + offset),
                    **fields,
                )
            )
    return events


def drawn_actions(page: str) -> list[str]:
    """The actions that have a bar on the page, top to bottom."""
    return re.findall(r'<div class="bar[^"]*" data-action="([^"]*)"', page)


def test_view_takes_the_window_of_session_logs(collector: Any) -> None:
    """--since/--until and -n choose the same events as for `gz-ia session logs`, and the page says so."""
    send_events(collector, steps("win", 4))  # events at 0 s .. 11 s
    since, until = (T0 + timedelta(seconds=3)).isoformat(), (T0 + timedelta(seconds=9)).isoformat()
    logged = collector.gz_ia("session", "logs", "win", "--since", since, "--until", until, "--json")
    assert [json.loads(line)["seq"] for line in logged.stdout.splitlines()] == [4, 5, 6, 7, 8, 9]
    shown = collector.gz_ia("session", "view", "win", "--since", since, "--until", until, "-o", "-")
    assert shown.returncode == 0, shown.stderr
    assert drawn_actions(shown.stdout) == ["step-1", "step-2"]
    assert "<b>6</b> events" in shown.stdout
    assert f"since <b>{html.escape(since)}</b>" in shown.stdout
    last = collector.gz_ia("session", "view", "win", "-n", "4", "-o", "-")
    assert last.returncode == 0, last.stderr
    # Events 9..12: the FINISH of step-2, then the whole of step-3.
    assert drawn_actions(last.stdout) == ["step-2", "step-3"]
    assert "the last <b>4</b> events" in last.stdout
    assert "not drawn" not in last.stdout
    refused = collector.gz_ia("session", "view", "win", "--since", "someday", "-o", "-")
    assert refused.returncode == 2
    assert "--since" in refused.stderr


def test_a_session_far_past_the_bound_gives_a_page_of_the_bound(collector: Any) -> None:
    """Past --max-cycles (2,000 by default) the newest cycles are drawn and the others summed up, with
    their count on the page; the page is no bigger for a session five times the bound than at it."""
    send_events(collector, steps("edge", 2_000), per_batch=5_000)
    send_events(collector, steps("huge", 10_000, failing_every=1_000), per_batch=5_000)
    edge_path, huge_path = collector.base / "edge.html", collector.base / "huge.html"
    edge = collector.gz_ia("session", "view", "edge", "-o", str(edge_path), timeout=120)
    huge = collector.gz_ia("session", "view", "huge", "-o", str(huge_path), timeout=120)
    assert edge.returncode == 0, edge.stderr
    assert huge.returncode == 0, huge.stderr
    assert "8000 older cycles summed up" in huge.stdout
    edge_page, huge_page = edge_path.read_text(), huge_path.read_text()
    assert "not drawn" not in edge_page
    assert len(drawn_actions(edge_page)) == 2_000
    bars = drawn_actions(huge_page)
    assert bars == [f"step-{number}" for number in range(8_000, 10_000)]  # the newest, in order
    assert 'data-left-out-cycles="8000" data-left-out-events="24000"' in huge_page
    assert "8000 older cycles (24000 events, 8 failed) are not drawn" in huge_page
    # Summed up per action, and the FAILED ones left out listed with their error.
    assert "8000 cycles not drawn (24000 events), by action" in huge_page
    assert "… the other actions" in huge_page  # one row: the names are unique
    assert "FAILED cycles not drawn (8)" in huge_page
    assert "step 7000 broke" in huge_page
    assert "<b>10000</b> actions" in huge_page
    assert '<b class="bad">10</b> failed' in huge_page
    # What a page weighs is set by the bound, not by the session: the summary adds a few kilobytes.
    assert huge_path.stat().st_size < edge_path.stat().st_size + 64_000
    assert huge_path.stat().st_size < 4_000_000
    everything = collector.gz_ia("session", "view", "huge", "--max-cycles", "all", "-o", "-", timeout=120)
    assert len(drawn_actions(everything.stdout)) == 10_000
