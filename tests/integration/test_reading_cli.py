"""The reading command line against a real collector: logs, filters, cursors, colour, sessions, trees, jq."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gz_ia.client import build_event
from gz_ia.collector.cli import main

ROTATING = {"GZ_IA_ROTATION_MAX_BYTES": "4096", "GZ_IA_ROTATION_COMPRESS": "true"}


def _send(collector: Any, session_id: str, count: int, *, parent: str | None = None, fail_last: bool = False) -> None:
    """Send READ/PENDING/FINISH cycles and wait for every verdict."""
    client = collector.client()
    try:
        for index in range(count):
            stage = ("READ", "PENDING", "FINISH")[index % 3]
            failed = fail_last and index == count - 1 and stage == "FINISH"
            event = build_event(
                session_id=session_id,
                parent_session_id=parent,
                action=f"task-{index // 3}",
                stage=stage,
                status="FAILED" if failed else "OK",
                error="exit 1" if failed else None,
                agent="claude",
                role="coder" if index % 2 else "planner",
                duration_ms=7 if stage == "FINISH" else None,
            )
            client.send(event, timeout=10)
    finally:
        client.close()


@pytest.fixture(name="busy")
def _busy(make_collector: Any) -> Any:
    """A real collector rotating at 4 KiB with compression, holding a small tree of sessions."""
    collector = make_collector(env=ROTATING)
    _send(collector, "main", 150)
    _send(collector, "sub", 9, parent="main", fail_last=True)
    _send(collector, "subsub", 4, parent="sub")
    _send(collector, "lone", 3)
    return collector


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


def test_show_cursor_then_after_cursor_resumes_exactly(busy: Any) -> None:
    """--show-cursor prints a cursor; --after-cursor prints only what was written after it."""
    first = _run(busy, "session", "logs", "lone", "--show-cursor")
    cursor = first.output.strip().splitlines()[-1].removeprefix("-- cursor: ")
    _send(busy, "lone", 3)
    rest = _run(busy, "session", "logs", "lone", "--json", "--after-cursor", cursor)
    assert [json.loads(line)["seq"] for line in rest.output.splitlines()] == [4, 5, 6]
    merged = _run(busy, "logs", "--show-cursor", "-q")
    combined = merged.output.strip().splitlines()[-1].removeprefix("-- cursor: ")
    _send(busy, "sub", 3, parent="main")
    newer = _run(busy, "logs", "--json", "--after-cursor", combined)
    assert [(json.loads(line)["session_id"], json.loads(line)["seq"]) for line in newer.output.splitlines()] == [
        ("sub", 10), ("sub", 11), ("sub", 12),
    ]  # fmt: skip
    bad = _run(busy, "session", "logs", "lone", "--after-cursor", "not-a-cursor")
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
    assert table[0].split() == ["SESSION", "PARENT", "AGENT", "FIRST", "LAST", "EVENTS", "OPEN", "FAILED"]


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
    archives = [path for path in (busy.root / "sessions").iterdir() if ".events.0" in path.name]
    assert float(value.split()[1]) >= len(archives) >= 3


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
