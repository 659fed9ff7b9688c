"""Finding events and sessions through the real CLI against a real collector: time expressions, field
matches, --grep, --seq, gz-ia sessions filters, the pager and shell completion."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gz_ia.client import build_event

NOW = datetime.now(UTC)
OLD = NOW - timedelta(hours=3)


def _send(collector: Any, events: list[dict[str, Any]]) -> None:
    client = collector.client()
    try:
        for fields in events:
            values: dict[str, Any] = {"agent": "claude", "stage": "READ", "action": "look"}
            values.update(fields)
            client.send(build_event(**values), timeout=10)
    finally:
        client.close()


@pytest.fixture(name="root")
def _root(collector: Any) -> Any:
    """A collector holding an old session, a recent one with tools in attrs, and a failed one."""
    _send(
        collector,
        [
            {"session_id": "old", "timestamp": OLD, "action": "Deploy old build"},
            {"session_id": "old", "timestamp": OLD, "stage": "FINISH", "action": "Deploy old build"},
            {"session_id": "new", "attrs": {"tool": "Bash", "cmd": "make CHECK"}, "role": "coder"},
            {"session_id": "new", "stage": "FINISH", "attrs": {"tool": "Bash"}, "role": "coder"},
            {"session_id": "new", "attrs": {"tool": "Read"}, "role": "coder", "action": "read"},
            {"session_id": "new", "stage": "PENDING", "attrs": {"tool": "Edit"}, "action": "edit"},
            {"session_id": "bad", "parent_session_id": "new", "agent": "codex", "role": "tester"},
            {
                "session_id": "bad",
                "parent_session_id": "new",
                "agent": "codex",
                "stage": "FINISH",
                "status": "FAILED",
                "error": "Timeout waiting",
                "role": "tester",
            },
        ],
    )
    return collector


def _json(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_since_and_until_accept_journalctl_forms(root: Any) -> None:
    """-1h, +5min, now, yesterday and a local 'YYYY-MM-DD HH:MM' select by event time."""
    recent = _json(root.gz_ia("logs", "--json", "--since", "-1h"))
    assert {record["session_id"] for record in recent} == {"new", "bad"}
    older = _json(root.gz_ia("logs", "--json", "--until", "-1h"))
    assert {record["session_id"] for record in older} == {"old"}
    assert len(_json(root.gz_ia("logs", "--json", "--since", "yesterday", "--until", "+5min"))) == 8
    assert _json(root.gz_ia("logs", "--json", "--since", "+5min")) == []
    two_hours_ago = (NOW - timedelta(hours=2)).astimezone().strftime("%Y-%m-%d %H:%M")
    wall = _json(root.gz_ia("session", "logs", "old", "--json", "--until", two_hours_ago))
    assert len(wall) == 2
    assert _json(root.gz_ia("session", "logs", "old", "--json", "--since", two_hours_ago)) == []
    bad = root.gz_ia("logs", "--since", "soonish")
    assert bad.returncode == 2
    assert "is not a time" in bad.stderr


def test_field_matches_or_within_a_field_and_across_fields(root: Any) -> None:
    """stage=FINISH attrs.tool=Bash ANDs; two tools OR; the same works on session logs."""
    both = _json(root.gz_ia("logs", "--json", "stage=FINISH", "attrs.tool=Bash"))
    assert [(r["session_id"], r["seq"]) for r in both] == [("new", 2)]
    tools = _json(root.gz_ia("session", "logs", "new", "--json", "attrs.tool=Bash", "attrs.tool=Edit"))
    assert [r["seq"] for r in tools] == [1, 2, 4]
    failed = _json(root.gz_ia("logs", "--json", "status=FAILED", "agent=codex"))
    assert [r["session_id"] for r in failed] == ["bad"]
    children = _json(root.gz_ia("logs", "--json", "parent_session_id=new"))
    assert [r["session_id"] for r in children] == ["bad", "bad"]
    no_role = _json(root.gz_ia("session", "logs", "new", "--json", "role="))
    assert [r["seq"] for r in no_role] == [4]


def test_unknown_field_is_an_error_naming_the_known_ones(root: Any) -> None:
    """A field that is not stored exits 2 and lists the fields; attrs.* is always allowed."""
    result = root.gz_ia("logs", "tool=Bash")
    assert result.returncode == 2
    assert "unknown field 'tool'" in result.stderr
    assert "action" in result.stderr
    assert "attrs.KEY" in result.stderr
    assert root.gz_ia("logs", "attrs.never_seen=x", "-q").returncode == 0


def test_grep_searches_every_text_field_with_smart_case(root: Any) -> None:
    """-g matches agent, role, error, session ids and attrs strings; lower case ignores case."""

    def sessions_of(*args: str) -> list[tuple[str, int]]:
        return [(r["session_id"], r["seq"]) for r in _json(root.gz_ia("logs", "--json", *args))]

    assert sessions_of("-g", "deploy") == [("old", 1), ("old", 2)]
    assert sessions_of("-g", "Deploy") == [("old", 1), ("old", 2)]
    assert root.gz_ia("logs", "-g", "DEPLOY").returncode == 1
    assert root.gz_ia("logs", "-g", "deploy", "--case-sensitive").returncode == 1
    assert sessions_of("-g", "DEPLOY", "--case-sensitive=no") == [("old", 1), ("old", 2)]
    assert sessions_of("-g", "timeout") == [("bad", 2)]  # error
    assert sessions_of("-g", "^codex$") == [("bad", 1), ("bad", 2)]  # agent
    assert sessions_of("-g", "tester") == [("bad", 1), ("bad", 2)]  # role
    assert sessions_of("-g", "check") == [("new", 1)]  # attrs string value
    assert [sid for sid, _seq in sessions_of("-g", "^new$")] == ["new"] * 4 + ["bad"] * 2  # session and parent ids


def test_field_matches_apply_while_following(root: Any) -> None:
    """session logs -f -n all stage=FINISH attrs.tool=Bash prints only those events, old and new."""
    _send(root, [{"session_id": "live", "attrs": {"tool": "Bash"}}])
    command = [sys.executable, "-c", "from gz_ia.collector.cli import main; main()"]
    command += ["session", "logs", "live", "-f", "-n", "all", "--json", "stage=FINISH", "attrs.tool=Bash"]
    with subprocess.Popen(
        command, env=root.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as follower:
        try:
            _send(
                root,
                [
                    {"session_id": "live", "stage": "FINISH", "attrs": {"tool": "Read"}},
                    {"session_id": "live", "action": "wanted"},
                    {"session_id": "live", "stage": "FINISH", "attrs": {"tool": "Bash"}, "action": "wanted"},
                ],
            )
            assert follower.stdout is not None
            record = json.loads(follower.stdout.readline())
            assert (record["seq"], record["action"]) == (4, "wanted")
        finally:
            follower.terminate()


def test_one_event_by_its_seq(root: Any) -> None:
    """--seq N prints that event; N..M a range; a missing seq exits 1 and says which and why."""
    one = _json(root.gz_ia("session", "logs", "new", "--seq", "3", "--json"))
    assert [r["seq"] for r in one] == [3]
    assert [r["seq"] for r in _json(root.gz_ia("session", "logs", "new", "--seq", "2..4", "--json"))] == [2, 3, 4]
    missing = root.gz_ia("session", "logs", "new", "--seq", "3..6", "--json")
    assert missing.returncode == 1
    assert [json.loads(line)["seq"] for line in missing.stdout.splitlines()] == [3, 4]
    assert "seq 5..6 not written yet (newest: seq 4)" in missing.stderr
    human = root.gz_ia("session", "logs", "new", "--seq", "9", "--color", "never")
    assert human.returncode == 1
    assert "has no event for seq 9" in human.stderr
    assert root.gz_ia("session", "logs", "new", "--seq", "0").returncode == 2
    assert root.gz_ia("session", "logs", "new", "--seq", "1", "-f").returncode == 2


def test_sessions_filter_and_sort_by_last_activity(root: Any) -> None:
    """--failed, --open, --agent, --role, --since and -n select sessions, the most recently active last."""

    def ids(*args: str) -> list[str]:
        return [r["session_id"] for r in _json(root.gz_ia("sessions", "--json", *args))]

    assert ids() == ["old", "new", "bad"]
    assert ids("-r") == ["bad", "new", "old"]
    assert ids("-n", "1") == ["bad"]
    assert ids("--failed") == ["bad"]
    assert ids("--open") == ["new"]  # edit is PENDING
    assert ids("--agent", "codex", "--agent", "claude", "--since", "-1h") == ["new", "bad"]
    assert ids("--until", "-1h") == ["old"]
    assert ids("--role", "coder") == ["new"]
    row = _json(root.gz_ia("sessions", "--json", "--failed"))[0]
    assert set(row) >= {"session_id", "parent_session_id", "agent", "first_time", "last_time", "events"}
    assert row["parent_session_id"] == "new"


def test_sessions_table_keeps_long_ids_whole_and_last(collector: Any) -> None:
    """A 128-character id is printed whole at the end of its line; a long parent is cut in the middle."""
    parent = "p" * 60 + "-end"
    child = "c" * 120 + "-tail-x"
    _send(collector, [{"session_id": parent}, {"session_id": child, "parent_session_id": parent}])
    lines = collector.gz_ia("sessions", "--color", "never", check=True).stdout.splitlines()
    assert lines[0].split()[-1] == "SESSION"
    row = next(line for line in lines if child in line)
    assert row.endswith("  " + child)
    assert "ppppppppppp\u2026pppppppp-end" in row
    header_at = lines[0].index("SESSION")
    assert all(line[header_at:].split()[0] in {"SESSION", parent, child} for line in lines)


def _in_terminal(collector: Any, *args: str, env: dict[str, str]) -> str:
    """Run gz-ia with stdout on a pseudo-terminal; return what reached the terminal."""
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [sys.executable, "-c", "from gz_ia.collector.cli import main; main()", *args],
        env={**collector.env, **env},
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    ) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            chunks.append(data)
        os.close(leader)
        assert process.stderr is not None
        errors = process.stderr.read()
        assert process.wait(timeout=30) == 0, errors
    return b"".join(chunks).decode(errors="replace")


def test_pager_is_used_on_a_terminal_only(root: Any, short_tmp: Path) -> None:
    """GZ_IA_PAGER gets the human output on a TTY; never with --no-pager, --json or a pipe."""
    paged = short_tmp / "paged.txt"
    pager = {"GZ_IA_PAGER": f"cat > {paged}", "PAGER": "false"}
    shown = _in_terminal(root, "logs", "--color", "never", env=pager)
    text = paged.read_text()
    assert "Deploy old build" in text
    assert "Deploy old build" not in shown
    paged.unlink()
    assert "Deploy old build" in _in_terminal(root, "logs", "--no-pager", env=pager)
    assert "Deploy old build" in _in_terminal(root, "logs", "--json", env=pager)
    assert "new" in _in_terminal(root, "sessions", "--no-pager", env=pager)
    assert not paged.exists()
    _in_terminal(root, "sessions", "--color", "never", env=pager)
    assert paged.read_text().splitlines()[0].split()[-1] == "SESSION"
    paged.unlink()
    piped = subprocess.run(
        [sys.executable, "-c", "from gz_ia.collector.cli import main; main()", "logs"],
        env={**root.env, **pager},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Deploy old build" in piped.stdout
    assert not paged.exists()


@pytest.mark.parametrize("command", ["logs", "tree", "view"])
def test_completion_offers_session_ids(root: Any, command: str) -> None:
    """click's bash completion protocol completes session ids of session logs, tree and view."""
    script = Path(sys.executable).parent / "gz-ia"

    def complete(words: str) -> list[str]:
        environment = {**root.env, "_GZ_IA_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": "3"}
        return subprocess.run([str(script)], env=environment, capture_output=True, text=True, check=True).stdout.split()

    assert complete(f"gz-ia session {command} n") == ["plain,new"]
    assert complete(f"gz-ia session {command} ") == ["plain,bad", "plain,new", "plain,old"]


def _lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode in (0, 1, 3), result.stderr
    return result.stdout.splitlines()


def test_since_finds_an_event_older_sessions_wrote_first(collector: Any) -> None:
    """A session whose last event is old but an earlier one is recent is not skipped by --since:
    its checkpoint records the greatest timestamp, not the last one written."""
    _send(
        collector,
        [
            {"session_id": "back", "timestamp": NOW, "action": "recent"},
            {"session_id": "back", "timestamp": OLD, "action": "late-arriving old"},
        ],
    )
    collector.stop()  # the collector writes every checkpoint when it closes
    state = json.loads((collector.root / "state" / "back.session.json").read_text())
    assert datetime.fromisoformat(state["newest_time"]) == NOW
    assert datetime.fromisoformat(state["last_time"]) == OLD
    recent = _json(collector.gz_ia("logs", "--json", "--since", "-1h"))
    assert [record["action"] for record in recent] == ["recent"]
    collector.start()
    _send(collector, [{"session_id": "back", "timestamp": OLD - timedelta(hours=1), "action": "older still"}])
    collector.stop()
    state = json.loads((collector.root / "state" / "back.session.json").read_text())
    assert datetime.fromisoformat(state["newest_time"]) == NOW  # kept across a restart


def test_root_wide_answers_match_the_careful_reader(make_collector: Any) -> None:
    """Over rotated, compressed sessions and one with a corrupt line, gz-ia logs with matches prints
    exactly what the session-by-session reader prints (--show-cursor takes that path), and names the
    corrupt line (exit 3) whenever it decodes it: always, unless a byte search passes it by."""
    collector = make_collector(env={"GZ_IA_ROTATION_MAX_BYTES": "4096", "GZ_IA_ROTATION_COMPRESS": "true"})
    events = []
    for index in range(60):
        stage = ("READ", "FINISH")[index % 2]
        failed = stage == "FINISH" and index % 6 == 1
        events.append(
            {
                "session_id": f"s{(index // 2) % 3}",
                "action": f"task-{index // 2}",
                "stage": stage,
                "status": "FAILED" if failed else "OK",
                "error": "boom" if failed else None,
                "attrs": {"tool": ("Bash", "Read", "Edit")[index % 5 % 3]},
            }
        )
    # A few more of s2 so that its active segment holds at least two events whatever rotated before.
    events += [{"session_id": "s2", "action": f"tail-{n}", "attrs": {"tool": "Read"}} for n in range(3)]
    _send(collector, events)
    collector.stop()
    active = collector.root / "sessions" / "s2.events.jsonl"
    lines = active.read_bytes().splitlines(keepends=True)
    # Between two events: a reader always decodes a segment's first and last lines, not the others.
    assert len(lines) >= 2
    active.write_bytes(b"".join([lines[0], b'{"not": "an event", "status":"FAILED"}\n', *lines[1:]]))
    questions = [  # the corrupt line holds "status":"FAILED", not "tool":...
        (["--failed"], 3),
        (["--failed", "--since", "-1h"], 3),
        (["stage=FINISH", "attrs.tool=Bash"], 0),
        (["attrs.tool=Edit", "attrs.tool=Read", "-n", "4"], 0),
        (["-g", "TASK-1", "--case-sensitive=no", "-r"], 0),  # its literal, in any case, is searched as bytes
        (["-g", "task-1|boom", "-r"], 3),  # no literal every match holds: every line decoded
        (["--since", "+1h"], 3),
    ]
    for question, code in questions:
        fast = collector.gz_ia("logs", "--json", *question)
        careful = collector.gz_ia("logs", "--json", "--show-cursor", *question)
        assert _lines(fast) == _lines(careful), question
        assert careful.returncode == 3, question
        assert fast.returncode == code, (question, fast.stderr)
        if code == 3:
            assert "session s2: a stored line not shown" in fast.stderr
    assert len(_lines(collector.gz_ia("logs", "--json", "--failed"))) == 10
