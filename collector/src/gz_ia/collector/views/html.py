"""The HTML timeline of a session tree (``gz-ia session view``): one self-contained page.

The page carries its CSS and script inline, so it opens offline and can be attached to a bug report
as it is. It draws the model of :mod:`gz_ia.collector.views.timeline`: a row per session and per action,
each action a bar with a segment per stage, failures in red.

What the events read hold beyond the cycles drawn (see :class:`Window`) is said at the top of the
page, with its count, and summed up per action below the drawing.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from gz_ia.client.schema import Status

from .terminal import format_cost, format_duration, format_tokens, plural
from .timeline import ActionSpan, ActionTotals, LeftOut, SessionNode

__all__ = ["COLOURS", "Window", "render_html"]

_ACTIONS_LISTED: Final = 50
"""Rows of the table of cycles left out (the actions with the most cycles)."""
_ERROR_SHOWN: Final = 2_000
"""Characters of an error shown in a tooltip; the stored event has all of it."""


@dataclass(slots=True)
class Window:
    """Which events the page shows: the window asked for, and what the drawing left out of it."""

    since: str | None = None
    until: str | None = None
    lines: int | None = None
    max_cycles: int | None = None
    left_out: LeftOut = field(default_factory=LeftOut)


COLOURS: Final = {
    "READ": "#4c8bf5",
    "PENDING": "#f2a93b",
    "OK": "#1e9e4a",
    "FAILED": "#e0201b",
    "OPEN": "#9aa3ad",
}
"""Bar colours; the tests look for the OK and FAILED ones in screenshots."""


_CSS: Final = (
    ":root { --label: 340px; --grid: #e6e9ed; --ink: #1f2430; --muted: #667085; "
    + " ".join(f"--{name.lower()}: {colour};" for name, colour in COLOURS.items())
    + " }"
    + """
* { box-sizing: border-box; }
body { margin: 0; font: 13px/1.35 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
       color: var(--ink); background: #fff; }
header { padding: 14px 18px 10px; border-bottom: 1px solid var(--grid); background: #f8f9fb; }
h1 { font-size: 17px; margin: 0 0 4px; font-weight: 600; }
.meta { color: var(--muted); }
.meta b { color: var(--ink); font-weight: 600; }
.meta .bad { color: var(--failed); }
.legend { margin-top: 8px; display: flex; gap: 14px; flex-wrap: wrap; color: var(--muted); }
.legend i { display: inline-block; width: 18px; height: 10px; border-radius: 2px; margin-right: 5px;
            vertical-align: -1px; }
main { padding: 4px 18px 24px; }
.axis, .row { display: grid; grid-template-columns: var(--label) 1fr; align-items: center; }
.axis { position: sticky; top: 0; background: #fff; z-index: 2; height: 26px; border-bottom: 1px solid var(--grid); }
.axis .track { height: 26px; }
.tick { position: absolute; top: 0; bottom: 0; border-left: 1px solid var(--grid); color: var(--muted);
        font-size: 11px; padding: 6px 0 0 3px; white-space: nowrap; }
.track { position: relative; height: 22px; margin-right: 56px; }
.row { min-height: 24px; border-bottom: 1px solid #f1f3f5; }
.row:hover { background: #f6f8fb; }
.row.session { background: #f3f5f8; border-top: 1px solid var(--grid); cursor: pointer; min-height: 28px; }
.label { padding: 3px 10px 3px 0; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.session .label { font-weight: 600; }
.session .label .who { color: var(--muted); font-weight: 400; }
.label .dur { color: var(--muted); font-variant-numeric: tabular-nums; margin-left: 6px; }
.label .err { color: var(--failed); margin-left: 6px; font-weight: 600; }
.tree { color: #b0b7c3; }
.bar { position: absolute; top: 5px; height: 12px; display: flex; border-radius: 3px; overflow: hidden;
       min-width: 6px; box-shadow: 0 0 0 1px rgba(0,0,0,.06); }
.bar.failed { box-shadow: 0 0 0 2px var(--failed); }
.seg { height: 100%; min-width: 2px; }
.seg.read { background: var(--read); }
.seg.pending { background: var(--pending); }
.seg.ok { background: var(--ok); flex: 0 0 8px; }
.seg.failed { background: var(--failed); flex: 0 0 8px; }
.seg.open { background: repeating-linear-gradient(45deg, var(--open) 0 4px, #c9ced6 4px 8px); }
.span { position: absolute; top: 10px; height: 4px; background: #c3cad5; border-radius: 2px; min-width: 2px; }
.row.failed-row .label { color: var(--failed); }
.window { margin-top: 6px; color: var(--ink); }
.window b { font-weight: 600; }
section.left-out { padding: 0 18px 18px; }
section.left-out h2 { font-size: 14px; margin: 14px 0 6px; }
section.left-out table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
section.left-out td, section.left-out th { padding: 2px 10px 2px 0; text-align: left; white-space: nowrap; }
section.left-out td.n, section.left-out th.n { text-align: right; }
section.left-out .bad { color: var(--failed); }
.hidden { display: none; }
#tip { position: fixed; pointer-events: none; background: #1f2430; color: #fff; padding: 6px 9px;
       border-radius: 4px; font-size: 12px; white-space: pre; max-width: 520px; z-index: 10; display: none;
       box-shadow: 0 4px 12px rgba(0,0,0,.25); }
footer { color: var(--muted); padding: 0 18px 18px; font-size: 11px; }
"""
)

# First script of the page: any later script error is recorded on <html>, where a test (or a person
# with the inspector) can see it.
_ERROR_RECORDER: Final = """
window.gzIaErrors = [];
window.addEventListener("error", function (e) {
  window.gzIaErrors.push(String(e.message || e));
  document.documentElement.setAttribute("data-js-errors", window.gzIaErrors.join(" | "));
});
"""

_JS: Final = """
(function () {
  var tip = document.getElementById("tip");
  // The title attributes carry the same text for readers without scripts; with this tooltip on,
  // drop them so that the browser does not show a second, native one.
  document.querySelectorAll("[title][data-tip]").forEach(function (el) { el.removeAttribute("title"); });
  document.querySelectorAll("[data-tip]").forEach(function (el) {
    el.addEventListener("mousemove", function (e) {
      tip.textContent = el.getAttribute("data-tip");
      tip.style.display = "block";
      var x = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
      var below = e.clientY + 16 + tip.offsetHeight <= window.innerHeight;
      var y = below ? e.clientY + 16 : e.clientY - tip.offsetHeight - 10;
      tip.style.left = x + "px"; tip.style.top = y + "px";
    });
    el.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  });
  document.querySelectorAll(".row.session").forEach(function (row) {
    row.addEventListener("click", function () {
      var id = row.getAttribute("data-session");
      var collapsed = row.classList.toggle("collapsed");
      document.querySelectorAll('[data-under~="' + id + '"]').forEach(function (el) {
        el.classList.toggle("hidden", collapsed);
      });
    });
  });
  document.documentElement.setAttribute("data-rendered", "ok");
})();
"""


def _ts(value: datetime | None) -> str:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z") if value else "-"


def _tip(session: SessionNode, span: ActionSpan) -> str:
    lines = [span.action, f"session {session.session_id} · {session.agent}" + (f"/{span.role}" if span.role else "")]
    if span.read_at:
        lines.append(f"READ     {_ts(span.read_at)}")
    if span.pending_at:
        lines.append(f"PENDING  {_ts(span.pending_at)}")
    if span.finished_at:
        lines.append(f"FINISH   {_ts(span.finished_at)}  {span.status.value if span.status else ''}")
    else:
        lines.append("still open (no FINISH yet)")
    lines.append(f"duration {format_duration(span.elapsed_ms)}")
    if span.error:
        error = span.error if len(span.error) <= _ERROR_SHOWN else span.error[:_ERROR_SHOWN] + "…"
        lines.append(f"error: {error}")
    return "\n".join(lines)


def _ticks(span_ms: float) -> list[float]:
    if span_ms <= 0:
        return [0.0]
    steps = [
        1,
        2,
        5,
        10,
        20,
        50,
        100,
        200,
        500,
        1000,
        2000,
        5000,
        10_000,
        15_000,
        30_000,
        60_000,
        120_000,
        300_000,
        600_000,
        900_000,
        1_800_000,
        3_600_000,
        7_200_000,
        21_600_000,
        43_200_000,
        86_400_000,
    ]
    step = next((candidate for candidate in steps if span_ms / candidate <= 10), span_ms / 10)
    count = int(span_ms // step) + 1
    return [index * step for index in range(count)]


def _tick_label(ms: float) -> str:
    return "0" if ms == 0 else "+" + format_duration(int(ms))


def render_html(node: SessionNode, *, title: str | None = None, window: Window | None = None) -> str:
    """Return one self-contained HTML page showing the session tree as a timeline."""
    window = window or Window()
    left = window.left_out
    everything = [current for _, current in node.walk()]
    stamps = [span.start for current in everything for span in current.actions]
    stamps += [span.end for current in everything for span in current.actions]
    # Past the cycles drawn, the axis spans those: the older events are summed up, not drawn.
    stamps += [current.last for current in everything if current.last is not None]
    if not left.cycles:
        stamps += [current.first for current in everything if current.first is not None]
    start = min(stamps) if stamps else None
    end = max(stamps) if stamps else None
    total_ms = max(1.0, (end - start).total_seconds() * 1000) if start and end else 1.0

    def pct(value: datetime) -> float:
        assert start is not None
        return max(0.0, min(100.0, (value - start).total_seconds() * 1000 / total_ms * 100))

    events = sum(current.events for current in everything)
    cycles = sum(current.cycles for current in everything)
    ok = sum(current.finished_ok for current in everything)
    failed_total = sum(current.failed for current in everything)
    still_open = cycles - ok - failed_total
    out: list[str] = []
    add = out.append
    heading = title or f"gz-ia session {node.session_id}"
    add('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
    add('<meta name="viewport" content="width=device-width, initial-scale=1">')
    add(f"<title>{html.escape(heading)}</title><script>{_ERROR_RECORDER}</script>")
    add(f"<style>{_CSS}</style></head><body>")
    add(f'<header><h1>{html.escape(heading)}</h1><div class="meta">')
    add(
        f"<b>{len(everything)}</b> session{'s' if len(everything) != 1 else ''} · <b>{events}</b> events · "
        f"<b>{cycles}</b> actions · <b>{ok}</b> OK · "
        f'<b class="{"bad" if failed_total else ""}">{failed_total}</b> failed · '
        f"<b>{still_open}</b> open"
    )
    tree_tokens = sum(sum(current.tokens) for current in everything)
    tree_cost = sum(current.cost_usd for current in everything)
    if tree_tokens or tree_cost:
        add(
            f' · <b class="tokens">{html.escape(format_tokens(tree_tokens))}</b> tokens · '
            f'<b class="cost">{html.escape(format_cost(tree_cost))}</b>'
        )
    if start and end:
        add(f" · {html.escape(_ts(start))} → {html.escape(_ts(end))} ({format_duration(int(total_ms))})")
    add("</div>")
    add(_window_line(window, cycles))
    add('<div class="legend">')
    for name, colour in (("READ", "READ"), ("PENDING", "PENDING"), ("FINISH OK", "OK"), ("FINISH FAILED", "FAILED")):
        add(f'<span><i style="background:{COLOURS[colour]}"></i>{name}</span>')
    add(
        f'<span><i style="background:repeating-linear-gradient(45deg,{COLOURS["OPEN"]} 0 4px,#c9ced6 4px 8px)">'
        "</i>open</span>"
    )
    add("<span>hover a bar for details · click a session to fold it</span></div></header><main>")
    add('<div class="axis"><div class="label"></div><div class="track">')
    for tick in _ticks(total_ms):
        add(f'<div class="tick" style="left:{tick / total_ms * 100:.3f}%">{html.escape(_tick_label(tick))}</div>')
    add("</div></div>")
    ancestors: dict[str, list[str]] = {node.session_id: []}
    for depth, current in node.walk():
        under = ancestors.get(current.session_id, [])
        for child in current.children:
            ancestors[child.session_id] = [*under, current.session_id]
        under_attr = " ".join(under)
        indent = "&nbsp;&nbsp;&nbsp;" * max(0, depth - 1) + ("└─ " if depth else "")
        who = html.escape(current.agent + (f"/{current.role}" if current.role else ""))
        failed = current.failed
        drawn_note = f" ({len(current.actions)} drawn)" if len(current.actions) != current.cycles else ""
        session_tip = (
            f"session {current.session_id}\nagent {current.agent}"
            + (f"/{current.role}" if current.role else "")
            + (f"\nparent {current.parent_session_id}" if current.parent_session_id else "")
            + f"\n{plural(current.events, 'event')}, {plural(current.cycles, 'action')}{drawn_note}, {failed} failed"
            + f"\n{_ts(current.first)} → {_ts(current.last)}"
            + (
                f"\n{format_tokens(sum(current.tokens))} tokens, {format_cost(current.cost_usd)}"
                + (f", {current.model}" if current.model else "")
                if sum(current.tokens) or current.cost_usd
                else ""
            )
        )
        add(
            f'<div class="row session" data-session="{html.escape(current.session_id)}" '
            f'data-under="{html.escape(under_attr)}" data-tip="{html.escape(session_tip)}">'
            f'<div class="label"><span class="tree">{indent}</span>{html.escape(current.session_id)} '
            f'<span class="who">{who} · {current.events} ev'
            + (f' · <span class="err">{failed} failed</span>' if failed else "")
            + '</span></div><div class="track">'
        )
        if current.first and current.last and start:
            add(
                f'<div class="span" style="left:{pct(current.first):.3f}%;'
                f'width:{pct(current.last) - pct(current.first):.3f}%"></div>'
            )
        add("</div></div>")
        action_indent = "&nbsp;&nbsp;&nbsp;" * depth + "&nbsp;&nbsp;"
        for span in current.actions:
            row_class = "row action failed-row" if span.status is Status.FAILED else "row action"
            tip = html.escape(_tip(current, span))
            label = f'<span class="tree">{action_indent}</span>{html.escape(span.action)}'
            if not span.is_open:
                label += f'<span class="dur">{format_duration(span.elapsed_ms)}</span>'
            if span.status is Status.FAILED:
                label += f'<span class="err">✕ {html.escape((span.error or "")[:80])}</span>'
            elif span.is_open:
                label += '<span class="dur">open</span>'
            add(
                f'<div class="{row_class}" data-under="{html.escape(" ".join([*under, current.session_id]))}">'
                f'<div class="label" data-tip="{tip}">{label}</div><div class="track">'
            )
            add(_bar(span, pct, tip, until=end))
            add("</div></div>")
    add("</main>")
    if left.cycles:
        add(_left_out_section(left))
    add("<footer>Generated by gz-ia " + html.escape(_ts(end)) + " · self-contained, no network needed</footer>")
    add(f'<div id="tip"></div><script>{_JS}</script></body></html>\n')
    return "".join(out)


def _window_line(window: Window, cycles: int) -> str:
    """The line under the counts: the window asked for, and how many cycles are drawn of how many."""
    left = window.left_out
    parts = []
    if window.since:
        parts.append(f"since <b>{html.escape(window.since)}</b>")
    if window.until:
        parts.append(f"until <b>{html.escape(window.until)}</b>")
    if window.lines is not None:
        parts.append(f"the last <b>{window.lines}</b> events")
    text = "Events: " + ", ".join(parts) + "." if parts else ""
    if left.cycles:
        text += (
            f" Drawn: the newest <b>{cycles - left.cycles}</b> of <b>{cycles}</b> action cycles. "
            f'<b class="left-out" data-left-out-cycles="{left.cycles}" data-left-out-events="{left.events}">'
            f"{plural(left.cycles, 'older cycle')} ({plural(left.events, 'event')}"
            + (f", {left.failed} failed" if left.failed else "")
            + ") are not drawn</b>: summed up per action below; --since, --until, -n or --max-cycles "
            "choose what is drawn."
        )
    return f'<div class="window">{text.strip()}</div>' if text else ""


def _left_out_section(left: LeftOut) -> str:
    """The cycles not drawn, summed up per action (most cycles first), and the newest FAILED ones."""
    out = [
        f'<section class="left-out"><h2>{plural(left.cycles, "cycle")} not drawn ({plural(left.events, "event")}), '
        "by action</h2>",
        '<table><tr><th>action</th><th class="n">cycles</th><th class="n">OK</th><th class="n">FAILED</th>'
        '<th class="n">open</th><th class="n">time in finished</th><th>from</th><th>to</th></tr>',
    ]
    ranked = sorted(left.actions.items(), key=lambda item: item[1].cycles, reverse=True)
    rows: list[tuple[str, ActionTotals]] = ranked[:_ACTIONS_LISTED]
    rest = ActionTotals()
    for _name, totals in [*ranked[_ACTIONS_LISTED:], ("", left.other)]:
        rest.cycles += totals.cycles
        rest.ok += totals.ok
        rest.failed += totals.failed
        rest.finished_ms += totals.finished_ms
        for stamp in (totals.first, totals.last):
            if stamp is not None:
                rest.first = stamp if rest.first is None else min(rest.first, stamp)
                rest.last = stamp if rest.last is None else max(rest.last, stamp)
    names = len(ranked) - len(rows)
    if rest.cycles:
        rows.append((f"… {names} more actions" if names and not left.other.cycles else "… the other actions", rest))
    for name, totals in rows:
        failed = f'<td class="n bad">{totals.failed}</td>' if totals.failed else '<td class="n">0</td>'
        out.append(
            f'<tr><td>{html.escape(name[:120])}</td><td class="n">{totals.cycles}</td><td class="n">{totals.ok}</td>'
            f'{failed}<td class="n">{totals.still_open}</td><td class="n">{format_duration(totals.finished_ms)}</td>'
            f"<td>{html.escape(_ts(totals.first))}</td><td>{html.escape(_ts(totals.last))}</td></tr>"
        )
    out.append("</table>")
    if left.failures:
        shown = len(left.failures)
        out.append(
            f"<h2>FAILED cycles not drawn: the newest {shown} of {left.failed}</h2>"
            if left.failed > shown
            else f"<h2>FAILED cycles not drawn ({shown})</h2>"
        )
        out.append(
            '<table><tr><th>finished</th><th>session</th><th class="n">seq</th><th>action</th><th>error</th></tr>'
        )
        for current, span in left.failures:
            out.append(
                f"<tr><td>{html.escape(_ts(span.finished_at))}</td><td>{html.escape(current.session_id)}</td>"
                f'<td class="n">{span.last_seq}</td><td>{html.escape(span.action[:120])}</td>'
                f'<td class="bad">{html.escape((span.error or "")[:200])}</td></tr>'
            )
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def _bar(span: ActionSpan, pct: Any, tip: str, *, until: datetime | None) -> str:
    """One action's bar: a segment per stage, then the FINISH cap (OK, FAILED) or a hatched open tail."""
    # An open action is still running as far as anyone knows: draw it up to the last thing seen.
    bar_end = until if span.is_open and until is not None and until > span.end else span.end
    left = pct(span.start)
    width = max(pct(bar_end) - left, 0.0)
    marks: list[tuple[str, datetime]] = []
    if span.read_at is not None or span.pending_at is None:
        marks.append(("read", span.start))
    if span.pending_at is not None:
        marks.append(("pending", span.pending_at if marks else span.start))
    segments: list[str] = []
    for index, (kind, since) in enumerate(marks):
        stop = marks[index + 1][1] if index + 1 < len(marks) else span.end
        share = max((stop - since).total_seconds() * 1000, 0.0)
        segments.append(f'<div class="seg {kind}" style="flex:{share:.3f} 1 0"></div>')
    if span.is_open:
        share = max((bar_end - span.end).total_seconds() * 1000, 0.0)
        segments.append(f'<div class="seg open" style="flex:{share:.3f} 1 14px"></div>')
    elif span.status is Status.FAILED:
        segments.append('<div class="seg failed"></div>')
    else:
        segments.append('<div class="seg ok"></div>')
    classes = "bar failed" if span.status is Status.FAILED else "bar"
    status = span.status.value if span.status else "OPEN"
    return (
        f'<div class="{classes}" data-action="{html.escape(span.action)}" data-status="{status}" '
        f'data-tip="{tip}" title="{tip}" '
        f'style="left:{left:.3f}%;width:calc({width:.3f}% + 8px)">' + "".join(segments) + "</div>"
    )
