"""What a session tree looks like over time: the model (actions, stages, summary) and its HTML page.

:func:`load_tree` rebuilds a session and, optionally, its subagents (found through
``parent_session_id``) from the stored files. Each action cycle becomes an :class:`ActionSpan` with
its stages as segments: READ until PENDING, PENDING until FINISH, and the FINISH status. The same
model feeds ``gz-ia session view`` (:func:`render_html`, one self-contained file: inline CSS and JS,
no network at view time) and the MCP summary tool (:func:`summarize`).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

from gz_ia.client.schema import Stage, Status, StoredEvent

from . import _pages
from .view import format_duration

__all__ = [
    "ActionSpan",
    "SessionNode",
    "build_session",
    "load_tree",
    "render_html",
    "summarize",
]

COLOURS: Final = {
    "READ": "#4c8bf5",
    "PENDING": "#f2a93b",
    "OK": "#1e9e4a",
    "FAILED": "#e0201b",
    "OPEN": "#9aa3ad",
}
"""Bar colours; the tests look for the OK and FAILED ones in screenshots."""


@dataclass(slots=True)
class ActionSpan:
    """One READ → PENDING → FINISH cycle of one action (still open if ``status`` is None)."""

    action: str
    role: str | None
    start: datetime
    end: datetime
    read_at: datetime | None = None
    pending_at: datetime | None = None
    finished_at: datetime | None = None
    status: Status | None = None
    error: str | None = None
    duration_ms: int | None = None
    first_seq: int = 0
    last_seq: int = 0

    @property
    def is_open(self) -> bool:
        """True while no FINISH closed the cycle."""
        return self.status is None

    @property
    def elapsed_ms(self) -> int:
        """The reported duration, else the time between the first and last event."""
        if self.duration_ms is not None:
            return self.duration_ms
        return max(0, int((self.end - self.start).total_seconds() * 1000))


@dataclass(slots=True)
class SessionNode:
    """One session: who ran it, its action cycles, its subagent sessions."""

    session_id: str
    parent_session_id: str | None = None
    agent: str = ""
    role: str | None = None
    events: int = 0
    stages: dict[str, int] = field(default_factory=dict)
    actions: list[ActionSpan] = field(default_factory=list)
    children: list[SessionNode] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None
    last_seq: int = 0

    def walk(self, depth: int = 0) -> Iterable[tuple[int, SessionNode]]:
        """Yield ``(depth, node)`` for this node and its descendants, depth first."""
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)


def build_session(session_id: str, events: Iterable[StoredEvent]) -> SessionNode:
    """Fold a session's events (in ``seq`` order) into a :class:`SessionNode` without children."""
    node = SessionNode(session_id)
    # Keyed like the stage protocol: runs of one action that name their cycle are separate spans.
    open_spans: dict[str | tuple[str, str], ActionSpan] = {}
    for event in events:
        node.events += 1
        node.last_seq = max(node.last_seq, event.seq)
        node.stages[event.stage.value] = node.stages.get(event.stage.value, 0) + 1
        if node.events == 1:
            node.parent_session_id = event.parent_session_id
            node.agent = event.agent
            node.role = event.role
        stamp = event.timestamp
        node.first = stamp if node.first is None else min(node.first, stamp)
        node.last = stamp if node.last is None else max(node.last, stamp)
        key = event.action if event.cycle is None else (event.action, event.cycle)
        span = open_spans.get(key)
        if span is None:
            span = ActionSpan(event.action, event.role, start=stamp, end=stamp, first_seq=event.seq)
            node.actions.append(span)
            if event.stage is not Stage.FINISH:
                open_spans[key] = span
        span.end = max(span.end, stamp)
        span.last_seq = event.seq
        if event.stage is Stage.READ and span.read_at is None:
            span.read_at = stamp
        elif event.stage is Stage.PENDING and span.pending_at is None:
            span.pending_at = stamp
        elif event.stage is Stage.FINISH:
            span.finished_at = stamp
            span.status = event.status
            span.error = event.error
            span.duration_ms = event.duration_ms
            if event.duration_ms is not None:
                # The reported duration is measured by the agent; make the bar at least that long.
                span.start = min(span.start, stamp - timedelta(milliseconds=event.duration_ms))
            open_spans.pop(key, None)
        if event.status is Status.FAILED and event.stage is not Stage.FINISH:
            span.error = event.error
    return node


def _load_one(root: Path, session_id: str) -> SessionNode:
    return build_session(session_id, (entry.event for entry in _pages.iter_session(root, session_id)))


def load_tree(root: Path, session_id: str, *, tree: bool = True) -> SessionNode:
    """Load ``session_id`` and, with ``tree``, every subagent session below it.

    The tree is the reader's (:func:`gz_ia.collector.storage.reader.session_tree`), the one
    ``gz-ia session tree`` and ``--tree`` show: a session known only as a parent is its top.

    Raises:
        SessionNotFound: the session has no file under ``root`` (and, with ``tree``, is nobody's parent).
    """
    if not tree:
        return _load_one(root, session_id)
    top = _pages.session_tree(root, session_id)

    def load(item: Any) -> SessionNode:  # as deep as the reader's tree: at most MAX_TREE_DEPTH
        try:
            node = _load_one(root, item.session_id)
        except _pages.SessionNotFound:
            node = build_session(item.session_id, ())  # known only as a parent
        node.children = [load(child) for child in item.children]
        return node

    return load(top)


def summarize(node: SessionNode) -> dict[str, Any]:
    """Return counts, failures, open actions and durations of a session tree, as JSON-ready data."""
    sessions: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    open_actions: list[dict[str, Any]] = []
    totals = {"events": 0, "actions": 0, "finished_ok": 0, "failed": 0, "open": 0}
    for depth, current in node.walk():
        ok = sum(1 for span in current.actions if span.status is Status.OK)
        failed = [span for span in current.actions if span.status is Status.FAILED]
        still_open = [span for span in current.actions if span.is_open]
        totals["events"] += current.events
        totals["actions"] += len(current.actions)
        totals["finished_ok"] += ok
        totals["failed"] += len(failed)
        totals["open"] += len(still_open)
        wall = int((current.last - current.first).total_seconds() * 1000) if current.first and current.last else 0
        finished = [span for span in current.actions if not span.is_open]
        sessions.append(
            {
                "session_id": current.session_id,
                "parent_session_id": current.parent_session_id,
                "depth": depth,
                "agent": current.agent,
                "role": current.role,
                "events": current.events,
                "stages": dict(current.stages),
                "actions": len(current.actions),
                "finished_ok": ok,
                "failed": len(failed),
                "open": len(still_open),
                "first_timestamp": current.first.isoformat() if current.first else None,
                "last_timestamp": current.last.isoformat() if current.last else None,
                "wall_ms": wall,
                "action_ms_total": sum(span.elapsed_ms for span in finished),
                "last_seq": current.last_seq,
            }
        )
        failures += [
            {
                "session_id": current.session_id,
                "action": span.action,
                "error": span.error,
                "duration_ms": span.elapsed_ms,
                "seq": span.last_seq,
            }
            for span in failed
        ]
        open_actions += [
            {
                "session_id": current.session_id,
                "action": span.action,
                "stage": "PENDING" if span.pending_at else "READ",
                "since": span.start.isoformat(),
            }
            for span in still_open
        ]
    longest = sorted(
        ((current.session_id, span) for _, current in node.walk() for span in current.actions if not span.is_open),
        key=lambda item: item[1].elapsed_ms,
        reverse=True,
    )[:5]
    return {
        "session_id": node.session_id,
        "totals": totals,
        "sessions": sessions,
        "failures": failures,
        "open_actions": open_actions,
        "longest_actions": [
            {"session_id": session_id, "action": span.action, "duration_ms": span.elapsed_ms}
            for session_id, span in longest
        ],
    }


# --- HTML ----------------------------------------------------------------------------------------

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
        lines.append(f"error: {span.error}")
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


def render_html(node: SessionNode, *, title: str | None = None) -> str:
    """Return one self-contained HTML page showing the session tree as a timeline."""
    everything = [current for _, current in node.walk()]
    stamps = [span.start for current in everything for span in current.actions]
    stamps += [span.end for current in everything for span in current.actions]
    stamps += [stamp for current in everything for stamp in (current.first, current.last) if stamp is not None]
    start = min(stamps) if stamps else None
    end = max(stamps) if stamps else None
    total_ms = max(1.0, (end - start).total_seconds() * 1000) if start and end else 1.0

    def pct(value: datetime) -> float:
        assert start is not None
        return max(0.0, min(100.0, (value - start).total_seconds() * 1000 / total_ms * 100))

    summary = summarize(node)
    totals = summary["totals"]
    out: list[str] = []
    add = out.append
    heading = title or f"gz-ia session {node.session_id}"
    add('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
    add('<meta name="viewport" content="width=device-width, initial-scale=1">')
    add(f"<title>{html.escape(heading)}</title><script>{_ERROR_RECORDER}</script>")
    add(f"<style>{_CSS}</style></head><body>")
    add(f'<header><h1>{html.escape(heading)}</h1><div class="meta">')
    add(
        f"<b>{len(everything)}</b> session{'s' if len(everything) != 1 else ''} · <b>{totals['events']}</b> events · "
        f"<b>{totals['actions']}</b> actions · <b>{totals['finished_ok']}</b> OK · "
        f'<b class="{"bad" if totals["failed"] else ""}">{totals["failed"]}</b> failed · '
        f"<b>{totals['open']}</b> open"
    )
    if start and end:
        add(f" · {html.escape(_ts(start))} → {html.escape(_ts(end))} ({format_duration(int(total_ms))})")
    add('</div><div class="legend">')
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
        failed = sum(1 for span in current.actions if span.status is Status.FAILED)
        session_tip = (
            f"session {current.session_id}\nagent {current.agent}"
            + (f"/{current.role}" if current.role else "")
            + (f"\nparent {current.parent_session_id}" if current.parent_session_id else "")
            + f"\n{current.events} events, {len(current.actions)} actions, {failed} failed"
            + f"\n{_ts(current.first)} → {_ts(current.last)}"
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
    add("</main><footer>Generated by gz-ia " + html.escape(_ts(end)) + " · self-contained, no network needed</footer>")
    add(f'<div id="tip"></div><script>{_JS}</script></body></html>\n')
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
