"""How events, sessions and trees look on a terminal: one readable line each, coloured when asked to.

Colour is decided by the caller (``gz-ia --color auto|always|never``, ``NO_COLOR``, TTY detection);
these functions only apply it. FAILED stands out: bold red status and error.

Text from events is shown escaped, as journalctl does: a newline, an escape sequence or a bidi
override inside an action cannot forge a line or repaint the terminal (``\n``, ``\x1b``,
``\u202e`` are printed instead). The JSON formats keep the stored text as it is.

Event times follow journalctl: the local zone by default, shown with its offset so that a line is
never ambiguous, or UTC with a ``Z`` (``--utc``). The JSON formats are the stored lines themselves
and are not rendered here.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, Literal

from gz_ia.client.schema import Stage, Status, StoredEvent
from gz_ia.client.usage import reading_of

if TYPE_CHECKING:
    from gz_ia.collector.reading import SessionSummary, TreeNode

__all__ = [
    "EventStyle",
    "display_width",
    "format_duration",
    "format_event",
    "format_sessions",
    "format_time",
    "format_tree",
    "plural",
    "printable",
]

EventStyle = Literal["short", "short-iso", "cat"]
"""The human ``-o`` formats of ``gz-ia logs``: a timeline line, the same with an RFC 3339 time, or the message only."""

_STAGE_COLOURS: Final = {Stage.READ: "\x1b[36m", Stage.PENDING: "\x1b[33m", Stage.FINISH: "\x1b[32m"}
_FAILED: Final = "\x1b[1;31m"
_OK: Final = "\x1b[32m"
_DIM: Final = "\x1b[2m"
_BOLD: Final = "\x1b[1m"
_SESSION: Final = "\x1b[35m"
_RESET: Final = "\x1b[0m"
_STATUS_COLOURS: Final = {"running": "\x1b[33m", "failed": _FAILED, "ok": _OK}


_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """Return ``text`` with every non-printable character escaped (``\n``, ``\x1b``, ``\u202e``)."""
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable():
            out.append(char)
        elif char in _ESCAPES:
            out.append(_ESCAPES[char])
        else:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def _paint(text: str, code: str, colour: bool) -> str:
    return code + text + _RESET if colour else text


def format_time(moment: datetime, *, utc: bool, sep: str = " ", timespec: str = "milliseconds") -> str:
    """Return ``moment`` as the reading commands show it, in UTC (``Z``) or the local zone (``+HH:MM``).

    A space and milliseconds read better in a column; ``-o short-iso`` asks for ``T`` and
    microseconds (full RFC 3339), ``gz-ia sessions`` for seconds. The zone is always written, so a
    local time can be pasted into ``--since`` as it is.
    """
    try:
        shown = moment.astimezone(UTC) if utc else moment.astimezone()
    except (OverflowError, ValueError):
        # Year 1 or 9999 shifted into another zone leaves the calendar: show it as it was stored.
        return moment.isoformat(sep=sep, timespec=timespec).replace("+00:00", "Z")
    text = shown.isoformat(sep=sep, timespec=timespec)
    return text.removesuffix("+00:00") + "Z" if utc else text


def format_event(
    event: StoredEvent,
    *,
    colour: bool = False,
    show_session: bool = False,
    style: EventStyle = "short",
    utc: bool = True,
) -> str:
    """Return one line: time, [session], agent/role, stage, status, action, duration, error.

    ``style="short-iso"`` writes the time as full RFC 3339; ``style="cat"`` keeps only what happened
    (stage, status, action, error), without time, agent/role or duration, like ``journalctl -o cat``
    keeps only the message. ``utc`` chooses between UTC and local time (see :func:`format_time`).
    """
    who = printable(event.agent + (f"/{event.role}" if event.role else ""))
    action = printable(event.action)
    failed = event.status is Status.FAILED
    full = style != "cat"
    parts = []
    if full:
        iso = style == "short-iso"
        time_text = format_time(
            event.timestamp, utc=utc, sep="T" if iso else " ", timespec="microseconds" if iso else "milliseconds"
        )
        parts.append(_paint(time_text, _DIM, colour))
    if show_session:
        parts.append(_paint(f"{event.session_id:<16}", _SESSION, colour))
    if full:
        parts.append(f"{who:<20}")
    parts.append(_paint(f"{event.stage.value:<7}", _STAGE_COLOURS[event.stage], colour))
    parts.append(_paint(f"{event.status.value:<6}", _FAILED if failed else _OK, colour))
    parts.append(_paint(action, _BOLD, colour) if failed else action)
    if event.duration_ms is not None and full:
        parts.append(f"({format_duration(event.duration_ms)})")
    if event.attrs is not None and full:
        found = reading_of(event.attrs)
        if found is not None:
            # A hook's reading is marked: the session's totals count it only without another record.
            text = format_usage(found[0]) + (" (hook)" if found[1] else "")
            parts.append(_paint(text, _DIM, colour))
    if event.error:
        parts.append(_paint(f"error: {printable(event.error)}", _FAILED, colour))
    return " ".join(parts)


def format_usage(used: tuple[tuple[int, int, int, int], float, str]) -> str:
    """A usage record as ``[model: 12 in, 3 out, 1.0k cache read, $0.0100]`` (the kinds it has)."""
    tokens, cost, model = used
    named = ("in", "out", "cache read", "cache write")
    counts = [f"{format_tokens(count)} {name}" for count, name in zip(tokens, named, strict=True) if count]
    if cost:
        counts.append(format_cost(cost))
    text = ", ".join(counts) or "no tokens"
    return f"[{printable(model)}: {text}]" if model else f"[{text}]"


def format_duration(ms: int) -> str:
    """Return a short human duration: ``340 ms``, ``4.2 s``, ``3 min 5 s``, ``2 h 10 min`` (terminal and HTML alike)."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        minutes, seconds = divmod(ms // 1000, 60)
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(ms // 60_000, 60)
    return f"{hours} h {minutes} min"


def _seconds(value: float | None) -> str:
    return "-" if value is None else format_duration(round(value * 1000))


def _when(value: datetime | None, *, utc: bool) -> str:
    return "-" if value is None else format_time(value, utc=utc, timespec="seconds")


def format_tokens(count: int) -> str:
    """A token count as a few characters: ``950``, ``12.3k``, ``4.1M``; ``-`` for none."""
    if not count:
        return "-"
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


def format_cost(cost: float) -> str:
    """A cost in US dollars: ``$0.0123``, ``$4.56``; ``-`` for none."""
    if not cost:
        return "-"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def format_sessions(
    summaries: Iterable[SessionSummary],
    *,
    colour: bool = False,
    utc: bool = True,
    usage: dict[str, tuple[tuple[int, int, int, int], float]] | None = None,
) -> list[str]:
    """Return the ``gz-ia sessions`` table: a header line, then one line per session (times as in
    :func:`format_time`: UTC, or the local zone with its offset).

    TOKENS and COST are the session's with its subagents' (``usage``: from
    :func:`~gz_ia.collector.reading.tree_usage`), else its own.

    The session id comes last and whole (ids reach 128 characters and must stay copyable); a long
    agent or parent is shortened in the middle so that the other columns keep their place.
    """
    rows = [("LAST", "FIRST", "EVENTS", "OPEN", "FAILED", "TOKENS", "COST", "AGENT", "PARENT", "SESSION")]
    for item in summaries:
        tokens, cost = (usage or {}).get(item.session_id, (item.tokens, item.cost_usd))
        rows.append(
            (
                _when(item.last_time, utc=utc),
                _when(item.first_time, utc=utc),
                str(item.events),
                str(item.open_actions),
                str(item.failures),
                format_tokens(sum(tokens)),
                format_cost(cost),
                _middle(printable(item.agent) or "-", _NAME_WIDTH),
                _middle(item.parent_session_id or "-", _NAME_WIDTH),
                item.session_id,
            )
        )
    widths = [max(display_width(row[index]) for row in rows) for index in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        cells = [
            _pad(cell, width, right=2 <= index <= 6)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        line = "  ".join(cells).rstrip()
        if number == 0:
            line = _paint(line, _BOLD, colour)
        elif row[4] != "0":
            line = _paint(line, _FAILED, colour)
        lines.append(line)
    return lines


_NAME_WIDTH: Final = 24
"""Widest agent or parent shown by ``gz-ia sessions`` before it is shortened in the middle."""


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in {"Mn", "Me", "Cf"}:
        return 0
    return 2 if unicodedata.east_asian_width(char) in {"W", "F"} else 1


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: East Asian wide and full-width characters two, combining
    marks and format characters none, every other character one."""
    if text.isascii():
        return len(text)
    return sum(map(_char_width, text))


def _pad(text: str, width: int, *, right: bool) -> str:
    fill = " " * max(0, width - display_width(text))
    return fill + text if right else text + fill


def _fit(chars: Iterable[str], width: int) -> str:
    """The leading characters of ``chars`` that fit in ``width`` columns (marks stay with their base)."""
    taken: list[str] = []
    used = 0
    for char in chars:
        used += _char_width(char)
        if used > width:
            break
        taken.append(char)
    return "".join(taken)


def _middle(text: str, width: int) -> str:
    """``text`` shortened to ``width`` columns with an ellipsis in the middle (both ends kept)."""
    if display_width(text) <= width:
        return text
    head = _fit(text, (width - 1) // 2)
    tail = _fit(reversed(text), width - 1 - display_width(head))[::-1]
    return head + "\u2026" + tail


def plural(count: int, noun: str) -> str:
    """``1 event``, ``2 events``: a count with its noun (nouns made plural with an ``s``)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def format_tree(node: TreeNode, *, colour: bool = False) -> list[str]:
    """Return the subagent tree, one line per session: id, agent, status, duration, events."""
    from gz_ia.collector.reading import MAX_TREE_DEPTH

    lines: list[str] = []

    def describe(item: TreeNode) -> str:
        summary = item.summary
        status = _paint(item.status, _STATUS_COLOURS[item.status], colour)
        details = plural(summary.events, "event") if summary.events else "no events of its own"
        if summary.failures:
            details += f", {summary.failures} failed"
        if summary.open_actions:
            details += f", {summary.open_actions} open"
        if summary.total_tokens or summary.cost_usd:
            details += f", {format_tokens(summary.total_tokens)} tokens {format_cost(summary.cost_usd)}"
        below = item.tree_tokens, item.tree_cost_usd
        if item.children and (sum(below[0]), below[1]) != (summary.total_tokens, summary.cost_usd):
            details += f"; with subagents {format_tokens(sum(below[0]))} tokens {format_cost(below[1])}"
        name = _paint(item.session_id, _SESSION, colour)
        return f"{name}  {printable(summary.agent) or '-'}  {status}  {_seconds(item.duration_seconds)}  ({details})"

    def walk(item: TreeNode, prefix: str, last: bool, top: bool) -> None:
        if top:
            lines.append(describe(item))
            child_prefix = ""
        else:
            lines.append(prefix + ("└── " if last else "├── ") + describe(item))
            child_prefix = prefix + ("    " if last else "│   ")
        for index, child in enumerate(item.children):
            walk(child, child_prefix, index == len(item.children) - 1 and not item.hidden, False)
        if item.hidden:
            lines.append(
                f"{child_prefix}└── … {plural(item.hidden, 'deeper session')} not shown (depth limit {MAX_TREE_DEPTH})"
            )

    walk(node, "", True, True)
    return lines
