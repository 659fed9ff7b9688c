"""The reading command line against a real collector: logs, filters, cursors, colour, sessions, trees, jq."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.conftest import increasing_timestamps, send_events

from gz_ia.client import build_event
from gz_ia.collector.cli import main

ROTATING = {"GZ_IA_ROTATION_MAX_BYTES": "4096", "GZ_IA_ROTATION_COMPRESS": "true"}


def _cycles(
    session_id: str, count: int, *, first: int = 0, parent: str | None = None, fail_last: bool = False
) -> list[Any]:
    """READ/PENDING/FINISH cycles of one session, events ``first`` to ``first + count - 1``."""
    events = []
    for index in range(first, first + count):
        stage = ("READ", "PENDING", "FINISH")[index % 3]
        failed = fail_last and index == first + count - 1 and stage == "FINISH"
        events.append(
            build_event(
                session_id=session_id,
                parent_session_id=parent,
                action=f"task-{index // 3}",
                stage=stage,
                status="FAILED" if failed else "OK",
                error="exit 1" if failed else None,
                agent="claude",
                role="coder" if index % 2 else "planner",
                duration_ms=7 if stage == "FINISH" else None,
                timestamp=next(_CLOCK),
            )
        )
    return events


_CLOCK = increasing_timestamps()


def _send(collector: Any, session_id: str, count: int, *, parent: str | None = None, fail_last: bool = False) -> None:
    """Send READ/PENDING/FINISH cycles in one batch and wait for every verdict."""
    send_events(collector, _cycles(session_id, count, parent=parent, fail_last=fail_last))


def _populate(collector: Any) -> Any:
    """A small tree of sessions: main (150 events, rotated), sub (9, its last FINISH failed), subsub, lone."""
    send_events(
        collector,
        [
            *_cycles("main", 150),
            *_cycles("sub", 9, parent="main", fail_last=True),
            *_cycles("subsub", 4, parent="sub"),
            *_cycles("lone", 3),
        ],
        per_batch=10,  # about 25 events fill a segment: main rotates several times
    )
    return collector


@pytest.fixture(name="busy", scope="module")
def _busy(make_module_collector: Any) -> Any:
    """A real collector rotating at 4 KiB with compression, holding a small tree of sessions.

    Shared by the tests of this module, which only read it; a test that writes uses ``fresh``.
    """
    return _populate(make_module_collector(env=ROTATING))


@pytest.fixture(name="fresh")
def _fresh(make_collector: Any) -> Any:
    """The same collector and sessions as ``busy``, for one test that sends more events."""
    return _populate(make_collector(env=ROTATING))


def _run(collector: Any, *args: str, env: dict[str, str] | None = None) -> Any:
    runner = CliRunner()
    return runner.invoke(main, list(args), env={"GZ_IA_ROOT": str(collector.root), **(env or {})})


def test_session_logs_reads_every_rotated_segment_in_order(busy: Any, schema_validator: Any) -> None:
    """gz-ia session logs --json prints every stored line once, across compressed archives, valid per schema."""
    archives = [path.name for path in (busy.root / "sessions").iterdir() if path.name.startswith("main.events.0")]
    assert len(archives) >= 3
    result = _run(busy, "session", "logs", "main", "--json")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.output.splitlines()]
    assert [record["seq"] for record in records] == list(range(1, 151))
    for record in records:
        schema_validator.validate(record)


def test_json_output_parses_with_jq(busy: Any) -> None:
    """The --json output of a real subprocess feeds jq unchanged."""
    logs = busy.gz_ia("session", "logs", "main", "--json", "-n", "20", check=True)
    jq = subprocess.run(
        ["jq", "-s", "-c", "[.[] | select(.stage == \"FINISH\") | .seq]"],
        input=logs.stdout, capture_output=True, text=True, check=True,
    )  # fmt: skip
    finished = json.loads(jq.stdout)
    assert finished == [seq for seq in range(131, 151) if seq % 3 == 0]


def test_lines_reverse_and_filters(busy: Any) -> None:
    """-n takes the last N, -r reverses, repeated flags OR and different flags AND, --failed selects failures."""
    last = _run(busy, "session", "logs", "main", "--json", "-n", "4")
    assert [json.loads(line)["seq"] for line in last.output.splitlines()] == [147, 148, 149, 150]
    newest = _run(busy, "session", "logs", "main", "--json", "-n", "3", "-r")
    assert [json.loads(line)["seq"] for line in newest.output.splitlines()] == [150, 149, 148]
    both = _run(busy, "session", "logs", "main", "--json", "--stage", "READ", "--stage", "FINISH", "--role", "coder")
    records = [json.loads(line) for line in both.output.splitlines()]
    assert records
    assert {record["stage"] for record in records} == {"READ", "FINISH"}
    assert {record["role"] for record in records} == {"coder"}
    failed = _run(busy, "logs", "--failed", "--json")
    assert [json.loads(line)["session_id"] for line in failed.output.splitlines()] == ["sub"]


def test_since_until_accept_rfc3339_and_relative_times(busy: Any) -> None:
    """--since 1h includes everything just written; an --until in the past excludes it; RFC 3339 works."""
    recent = _run(busy, "session", "logs", "lone", "--json", "--since", "1h")
    assert len(recent.output.splitlines()) == 3
    old = _run(busy, "session", "logs", "lone", "--json", "--until", "2000-01-01T00:00:00Z")
    assert old.output == ""
    first = json.loads(_run(busy, "session", "logs", "lone", "--json").output.splitlines()[1])["timestamp"]
    later = _run(busy, "session", "logs", "lone", "--json", "--since", first)
    assert [json.loads(line)["seq"] for line in later.output.splitlines()] == [2, 3]
    bad = _run(busy, "session", "logs", "lone", "--since", "yesterday-ish")
    assert bad.exit_code == 2


def test_show_cursor_then_after_cursor_resumes_exactly(fresh: Any) -> None:
    """--show-cursor prints a cursor; --after-cursor prints only what was written after it."""
    first = _run(fresh, "session", "logs", "lone", "--show-cursor")
    cursor = first.output.strip().splitlines()[-1].removeprefix("-- cursor: ")
    _send(fresh, "lone", 3)
    rest = _run(fresh, "session", "logs", "lone", "--json", "--after-cursor", cursor)
    assert [json.loads(line)["seq"] for line in rest.output.splitlines()] == [4, 5, 6]
    merged = _run(fresh, "logs", "--show-cursor", "-q")
    combined = merged.output.strip().splitlines()[-1].removeprefix("-- cursor: ")
    _send(fresh, "sub", 3, parent="main")
    newer = _run(fresh, "logs", "--json", "--after-cursor", combined)
    assert [(json.loads(line)["session_id"], json.loads(line)["seq"]) for line in newer.output.splitlines()] == [
        ("sub", 10), ("sub", 11), ("sub", 12),
    ]  # fmt: skip
    bad = _run(fresh, "session", "logs", "lone", "--after-cursor", "not-a-cursor")
    assert bad.exit_code == 2


def test_logs_merges_sessions_in_time_order_with_a_prefix(busy: Any) -> None:
    """gz-ia logs shows every session, merged by timestamp, each line prefixed with its session."""
    result = _run(busy, "logs", "--color", "never")
    lines = result.output.splitlines()
    assert len(lines) == 150 + 9 + 4 + 3
    assert any(" lone " in line for line in lines)
    records = [json.loads(line) for line in _run(busy, "logs", "--json").output.splitlines()]
    stamps = [record["timestamp"] for record in records]
    assert stamps == sorted(stamps)


def test_tree_flag_includes_subagent_sessions(busy: Any) -> None:
    """session logs --tree adds the sessions below it (and not unrelated ones)."""
    result = _run(busy, "session", "logs", "main", "--tree", "--json")
    sessions = {json.loads(line)["session_id"] for line in result.output.splitlines()}
    assert sessions == {"main", "sub", "subsub"}


def test_colour_follows_the_flag_and_no_color(busy: Any) -> None:
    """--color always colours (FAILED in bold red); NO_COLOR and non-TTY output stay plain."""
    coloured = _run(busy, "session", "logs", "sub", "--color", "always")
    assert "\x1b[1;31mFAILED" in coloured.output
    plain = _run(busy, "session", "logs", "sub")
    assert "\x1b[" not in plain.output
    assert "FAILED" in plain.output
    no_color = _run(busy, "session", "logs", "sub", "--color", "auto", env={"NO_COLOR": "1"})
    assert "\x1b[" not in no_color.output


def test_exit_codes_unknown_session_and_usage_errors(busy: Any) -> None:
    """An unknown session exits 1; -r with -f and a bad -n exit 2; an empty result exits 0."""
    assert _run(busy, "session", "logs", "nobody").exit_code == 1
    assert _run(busy, "session", "logs", "main", "-r", "-f").exit_code == 2
    assert _run(busy, "session", "logs", "main", "-n", "lots").exit_code == 2
    empty = _run(busy, "session", "logs", "main", "--agent", "nobody")
    assert empty.exit_code == 0
    assert "-- No entries --" in empty.output
    quiet = _run(busy, "session", "logs", "main", "--agent", "nobody", "-q")
    assert quiet.output == ""
    assert _run(busy, "session", "tree", "nobody").exit_code == 1


def test_sessions_lists_parents_counts_and_failures(busy: Any) -> None:
    """gz-ia sessions shows id, parent, agent, times, events, open actions and failures."""
    result = _run(busy, "sessions", "--json")
    rows = {row["session_id"]: row for row in map(json.loads, result.output.splitlines())}
    assert set(rows) == {"main", "sub", "subsub", "lone"}
    assert rows["main"]["events"] == 150
    assert rows["main"]["segments"] > 3
    assert rows["sub"]["parent_session_id"] == "main"
    assert rows["sub"]["failures"] == 1
    assert rows["subsub"]["open_actions"] == 1
    table = _run(busy, "sessions").output.splitlines()
    assert table[0].split() == [
        "LAST",
        "FIRST",
        "EVENTS",
        "OPEN",
        "FAILED",
        "TOKENS",
        "COST",
        "AGENT",
        "PARENT",
        "SESSION",
    ]


def test_session_tree_draws_subagents_with_status(busy: Any) -> None:
    """gz-ia session tree draws the subagent tree with each node's status and duration."""
    result = _run(busy, "session", "tree", "main", "--color", "never")
    lines = result.output.splitlines()
    assert lines[0].startswith("main  claude  ok")
    assert lines[1].startswith("└── sub  claude  failed")
    assert lines[2].startswith("    └── subsub  claude  running")
    tree = json.loads(_run(busy, "session", "tree", "main", "--json").output)
    assert tree["children"][0]["children"][0]["session_id"] == "subsub"


def test_collector_counts_rotations_in_its_metrics(busy: Any) -> None:
    """The running collector exports gzia_rotations_total for the rotations it made."""
    text = busy.metrics()
    value = next(line for line in text.splitlines() if line.startswith("gzia_rotations_total "))
    # Archives, not files: while one is being compressed, its .jsonl, a hidden temporary file and
    # its .jsonl.gz may all exist.
    names = (path.name for path in (busy.root / "sessions").iterdir())
    archives = {
        found.group(1) for found in map(re.compile(r"([^.].*\.events\.\d+)\.jsonl(\.gz)?").fullmatch, names) if found
    }
    assert float(value.split()[1]) >= len(archives) >= 3, sorted(archives)


def test_a_real_subprocess_reads_the_last_lines(busy: Any) -> None:
    """gz-ia session logs -n runs as a real process and prints a readable timeline."""
    result = busy.gz_ia("session", "logs", "main", "-n", "2", check=True)
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert "task-49" in lines[-1]
    assert "FINISH" in lines[-1]


def test_the_root_can_come_from_the_flag(busy: Any, tmp_path: Path) -> None:
    """gz-ia --root wins over the environment."""
    runner = CliRunner()
    result = runner.invoke(main, ["--root", str(busy.root), "session", "logs", "lone", "--json"],
                           env={"GZ_IA_ROOT": str(tmp_path)})  # fmt: skip
    assert result.exit_code == 0
    assert len(result.output.splitlines()) == 3


# --- -o/--output, -g/--grep, --utc, --pager ------------------------------------------------------------------

_BOUND = 30.0
"""Safety bound (seconds) on waiting for a follower's output; a passing run needs a fraction of it."""
_ZONE = "GZT-5:30"
"""A POSIX TZ string (no tz database needed): local time is UTC+05:30, a half-hour offset on purpose."""


def _stored(collector: Any, session_id: str) -> bytes:
    """The active segment of a session that never rotated: every line it holds, as written."""
    sessions = collector.root / "sessions"
    assert not list(sessions.glob(f"{session_id}.events.0*")), f"{session_id} rotated"
    return bytes((sessions / f"{session_id}.events.jsonl").read_bytes())


def _in_zone(collector: Any, zone: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run gz-ia as a real process whose local time zone is ``zone`` (TZ is read at start-up)."""
    return subprocess.run(
        [sys.executable, "-c", "from gz_ia.collector.cli import main; main()", *args],
        env={**collector.env, "TZ": zone, "NO_COLOR": "1"}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_output_json_is_the_stored_lines_byte_for_byte(busy: Any) -> None:
    """-o json, --json and both print the stored bytes; --utc does not touch them; filters keep lines whole."""
    stored = _stored(busy, "lone")
    for flags in (["-o", "json"], ["--output", "json"], ["--json"], ["--json", "-o", "json"], ["-o", "json", "--utc"]):
        result = _run(busy, "session", "logs", "lone", *flags)
        assert result.exit_code == 0, result.output
        assert result.stdout_bytes == stored, flags
    lines = _stored(busy, "sub").splitlines(keepends=True)
    finished = _run(busy, "session", "logs", "sub", "-o", "json", "--stage", "FINISH")
    assert finished.stdout_bytes == b"".join(line for line in lines if json.loads(line)["stage"] == "FINISH")
    merged = _run(busy, "logs", "-o", "json", "-g", "exit 1")
    assert merged.stdout_bytes == lines[-1]


def test_json_with_another_output_format_is_a_usage_error(busy: Any) -> None:
    """--json is -o json: combined with a different -o it exits 2 and prints no events; an unknown -o exits 2."""
    for other in ("short", "short-iso", "json-pretty", "cat"):
        result = _run(busy, "session", "logs", "lone", "--json", "-o", other)
        assert result.exit_code == 2, other
        assert result.stdout == ""
        assert "--json" in result.output
    assert _run(busy, "logs", "-o", "yaml").exit_code == 2


def test_output_json_pretty_is_the_stored_records_indented(busy: Any) -> None:
    """-o json-pretty prints one indented object per event, parsing back to exactly the stored records."""
    result = _run(busy, "session", "logs", "sub", "-o", "json-pretty")
    assert result.exit_code == 0, result.output
    decoder = json.JSONDecoder()
    text, position, objects = result.stdout, 0, []
    while text[position:].strip():
        position += len(text[position:]) - len(text[position:].lstrip())
        value, position = decoder.raw_decode(text, position)
        objects.append(value)
    assert objects == [json.loads(line) for line in _stored(busy, "sub").splitlines()]
    assert '\n  "session_id": "sub",\n' in text
    assert all(line.startswith(("{", "}", "  ")) for line in text.splitlines())
    none = _run(busy, "session", "logs", "sub", "-o", "json-pretty", "--agent", "nobody")
    assert (none.exit_code, none.output) == (0, "")  # a format for programs: no banner


def test_short_iso_and_utc_show_the_stored_instant(busy: Any) -> None:
    """--utc shows the stored instant with Z; the default is local time with its offset; short-iso is RFC 3339."""
    instants = [_instant(json.loads(line)["timestamp"]) for line in _stored(busy, "lone").splitlines()]
    in_ms = [moment.replace(microsecond=moment.microsecond // 1000 * 1000) for moment in instants]

    iso_utc = _in_zone(busy, _ZONE, "session", "logs", "lone", "-o", "short-iso", "--utc")
    stamps = [line.split()[0] for line in iso_utc.stdout.splitlines()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp) for stamp in stamps), stamps
    assert [_instant(stamp) for stamp in stamps] == instants

    iso_local = _in_zone(busy, _ZONE, "session", "logs", "lone", "-o", "short-iso")
    stamps = [line.split()[0] for line in iso_local.stdout.splitlines()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+05:30", stamp) for stamp in stamps), stamps
    assert [_instant(stamp) for stamp in stamps] == instants

    short_utc = _in_zone(busy, _ZONE, "session", "logs", "lone", "--utc")
    stamps = [" ".join(line.split()[:2]) for line in short_utc.stdout.splitlines()]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z", stamp) for stamp in stamps), stamps
    assert [_instant(stamp) for stamp in stamps] == in_ms

    short_local = _in_zone(busy, _ZONE, "session", "logs", "lone")
    stamps = [" ".join(line.split()[:2]) for line in short_local.stdout.splitlines()]
    assert all(stamp.endswith("+05:30") for stamp in stamps), stamps
    assert [_instant(stamp) for stamp in stamps] == in_ms
    assert short_local.stdout != short_utc.stdout  # the same instants, written differently


def test_sessions_show_times_like_logs(busy: Any) -> None:
    """gz-ia sessions writes first/last times in the local zone with its offset, or in UTC with --utc,
    as the logs do; both denote the instants that --json gives in UTC."""
    rows = {row["session_id"]: row for row in map(json.loads, _run(busy, "sessions", "--json").output.splitlines())}
    expected = _instant(rows["lone"]["first_time"]).replace(microsecond=0)
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    for flags, zone in (((), r"\+05:30"), (("--utc",), "Z")):
        table = _in_zone(busy, _ZONE, "sessions", *flags).stdout.splitlines()
        line = next(line for line in table if line.endswith("  lone"))
        last, first = re.findall(stamp + zone, line)
        assert _instant(first) == expected, (flags, line)
        assert _instant(last) >= _instant(first)


def test_cat_prints_only_what_happened(busy: Any) -> None:
    """-o cat: stage, status, action and error; no time, agent/role, duration, nor session unless --prefix."""
    result = _run(busy, "session", "logs", "sub", "-o", "cat", "--color", "never")
    lines = result.stdout.splitlines()
    assert len(lines) == 9
    assert lines[0] == "READ    OK     task-0"
    assert lines[-1] == "FINISH  FAILED task-2 error: exit 1"
    assert not [line for line in lines if re.search(r"\d\d:\d\d|claude|planner|coder|ms\)", line)]
    merged = _run(busy, "logs", "-o", "cat", "--color", "never").stdout.splitlines()
    assert len(merged) == 150 + 9 + 4 + 3
    assert all(line.startswith(("READ ", "PENDING ", "FINISH ")) for line in merged)
    prefixed = _run(busy, "logs", "-o", "cat", "--failed", "--prefix", "--color", "never")
    assert prefixed.stdout.splitlines() == [f"{'sub':<16} FINISH  FAILED task-2 error: exit 1"]


def test_grep_matches_action_or_error_before_lines(busy: Any) -> None:
    """-g keeps events whose action or error matches (re.search), then -n and -r apply to the matches."""
    hits = [
        json.loads(line)
        for line in _run(busy, "session", "logs", "main", "--json", "-g", r"^task-4\d$").stdout.splitlines()
    ]
    assert len(hits) == 30
    assert {record["action"] for record in hits} == {f"task-{number}" for number in range(40, 50)}
    on_error = _run(busy, "logs", "--json", "--grep", "exit 1")  # no action contains it: only the error does
    assert [(json.loads(line)["session_id"], json.loads(line)["seq"]) for line in on_error.stdout.splitlines()] == [
        ("sub", 9)
    ]
    last = _run(busy, "session", "logs", "main", "--json", "-g", "^task-3$", "-n", "2")
    assert [json.loads(line)["seq"] for line in last.stdout.splitlines()] == [11, 12]
    newest = _run(busy, "session", "logs", "main", "--json", "-g", "^task-3$", "-n", "2", "-r")
    assert [json.loads(line)["seq"] for line in newest.stdout.splitlines()] == [12, 11]
    human = _run(busy, "session", "logs", "main", "--tree", "-g", "exit", "--color", "never")
    assert human.exit_code == 0
    assert [line.split()[-3:] for line in human.stdout.splitlines()] == [["error:", "exit", "1"]]


def test_grep_exit_codes(busy: Any) -> None:
    """No match exits 1 (with the banner unless -q), a bad regex exits 2, an unknown session stays 1."""
    none = _run(busy, "session", "logs", "main", "-g", "no-such-action")
    assert none.exit_code == 1
    assert none.stdout == ""
    assert "-- No entries --" in none.output
    quiet = _run(busy, "logs", "--json", "-g", "task", "--agent", "nobody", "-q")
    assert (quiet.exit_code, quiet.output) == (1, "")
    bad = _run(busy, "session", "logs", "main", "-g", "task-(")
    assert bad.exit_code == 2
    assert "--grep" in bad.output
    assert _run(busy, "session", "logs", "nobody", "-g", "task").exit_code == 1
    assert _run(busy, "session", "logs", "main", "-g", "task-49").exit_code == 0


def test_grep_while_following_filters_and_exits_0(fresh: Any, follow: Any) -> None:
    """-f -g prints only matching new events (none matched before) and ends with 0 on Ctrl-C, never 1."""
    follower = follow(fresh, "session", "logs", "lone", "-f", "-n", "all", "--json", "-g", "^needle")
    client = fresh.client()
    try:
        for action in ("hay-1", "needle-1", "hay-2", "needle-2"):
            client.send(build_event(session_id="lone", action=action, stage="READ", agent="claude"), timeout=10)
    finally:
        client.close()
    assert [record["action"] for record in follower.take(2)] == ["needle-1", "needle-2"]
    code, stderr = follower.interrupt()
    assert code == 0
    assert "Traceback" not in stderr
    assert follower.lines.empty()


def test_pager_flags_are_accepted_and_never_page(busy: Any) -> None:
    """--pager and --no-pager are accepted (journalctl habits) and change nothing in the output."""
    plain = _run(busy, "session", "logs", "sub", "--utc")
    for flag in ("--pager", "--no-pager"):
        result = _run(busy, "session", "logs", "sub", "--utc", flag)
        assert result.exit_code == 0, result.output
        assert result.stdout == plain.stdout


def test_an_hour_long_session_shows_hours_like_its_timeline(collector: Any) -> None:
    """Durations of an hour or more read ``2 h 5 min`` on the terminal, as on the HTML timeline."""
    end = datetime.now(UTC)
    events = [
        build_event(session_id="long", action="build", stage=stage, agent="claude", timestamp=end - gap)
        for stage, gap in (("READ", timedelta(hours=2, minutes=5)), ("FINISH", timedelta()))
    ]
    send_events(collector, events)
    tree = collector.gz_ia("session", "tree", "long", "--color", "never", check=True)
    assert tree.stdout.startswith("long  claude  ok  2 h 5 min"), tree.stdout
    page = collector.gz_ia("session", "view", "long", "-o", "-", check=True)
    assert "2 h 5 min" in page.stdout
