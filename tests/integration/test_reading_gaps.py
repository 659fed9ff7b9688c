"""The reading commands never hide a gap: retention under a cursor, damaged segments, missing roots,
lagging followers, rebuilt roots; and they follow like kubectl (wait for a session, stop when its
cycle finishes). Real collector, real files, the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import send_events, wait_for

from gz_ia.client import build_event

RETAINING = {
    "GZ_IA_ROTATION_MAX_BYTES": "4096",
    "GZ_IA_ROTATION_COMPRESS": "true",
    "GZ_IA_RETENTION_MAX_ARCHIVES": "2",
}
ROTATING = {"GZ_IA_ROTATION_MAX_BYTES": "4096", "GZ_IA_ROTATION_COMPRESS": "true"}
_BOUND = 30.0
"""Safety bound (seconds) on waiting for a subprocess; a passing run needs a fraction of it."""


def _send(collector: Any, session_id: str, first: int, count: int, *, parent: str | None = None) -> None:
    """Send READ/PENDING/FINISH cycles numbered from ``first`` and wait for every verdict.

    Ten events to a batch: the collector rotates at most once per batch, and these tests need many
    rotations (and retention deleting archives)."""
    events = [
        build_event(
            session_id=session_id, parent_session_id=parent, action=f"task-{index // 3}", stage=stage, agent="a"
        )
        for index in range(first, first + count)
        for stage in [("READ", "PENDING", "FINISH")[index % 3]]
    ]
    send_events(collector, events, per_batch=10)


def _seqs(stdout: str) -> list[int]:
    return [json.loads(line)["seq"] for line in stdout.splitlines() if "__notice" not in line]


def _archives(collector: Any, session_id: str) -> list[Path]:
    return sorted((collector.root / "sessions").glob(f"{session_id}.events.0*"))


def _retained(collector: Any, session_id: str) -> None:
    """Wait until retention (a worker thread, behind the writes) has deleted the archives past its limit."""
    limit = int(RETAINING["GZ_IA_RETENTION_MAX_ARCHIVES"])
    wait_for(lambda: len(_archives(collector, session_id)) <= limit, message=f"retention to trim {session_id}")


# --- never silent about what it did not show -------------------------------------------------------


def test_after_cursor_past_retention_says_what_it_skipped_and_goes_on(make_collector: Any) -> None:
    """--after-cursor whose events retention deleted: stderr names the range, the rest is shown, exit 3."""
    collector = make_collector(env=RETAINING)
    _send(collector, "lone", 0, 3)
    first = collector.gz_ia("session", "logs", "lone", "--json", "--show-cursor")
    cursor = first.stderr.strip().splitlines()[-1].removeprefix("-- cursor: ")
    _send(collector, "lone", 3, 200)
    _retained(collector, "lone")
    result = collector.gz_ia("session", "logs", "lone", "--json", "--after-cursor", cursor)
    assert result.returncode == 3, result.stderr
    shown = _seqs(result.stdout)
    oldest = shown[0]
    assert oldest > 4  # retention deleted the events right after the cursor
    assert shown == list(range(oldest, 204))
    assert f"events seq 4-{oldest - 1} not shown: deleted by retention" in result.stderr
    human = collector.gz_ia("session", "logs", "lone", "--after-cursor", cursor, "-n", "5")
    assert human.returncode == 3
    assert len(human.stdout.splitlines()) == 5
    assert "-- No entries --" not in human.stderr


def _corrupt_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = b"\xa5" * 64
    path.write_bytes(bytes(data))


def test_an_unreadable_archive_is_named_with_its_seqs_and_exits_3(make_collector: Any) -> None:
    """A corrupt archive: session logs (plain copy and decoded) say which seqs are missing and why;
    sessions --verify names the archive, and so does sessions without it once the seal shows it."""
    collector = make_collector(env=ROTATING)
    _send(collector, "rot", 0, 150)
    complete = _seqs(collector.gz_ia("session", "logs", "rot", "--json").stdout)
    assert complete == list(range(1, 151))
    archives = _archives(collector, "rot")
    assert len(archives) >= 3 and archives[1].name.endswith(".gz")
    held = [json.loads(line)["seq"] for line in _gunzip(archives[1]).splitlines()]
    _corrupt_middle(archives[1])
    for args in (["--json"], ["--json", "--since", "1h"], ["-n", "all"]):
        result = collector.gz_ia("session", "logs", "rot", *args)
        assert result.returncode == 3, (args, result.stderr)
        assert f"events seq {held[0]}-{held[-1]} not shown: " in result.stderr, result.stderr
        assert archives[1].name in result.stderr
        if "--json" in args:
            assert _seqs(result.stdout) == [seq for seq in complete if seq not in held]
    # Bytes overwritten in place keep the archive's length and trailer: decompressing finds them.
    listing = collector.gz_ia("sessions", "--json", "--verify")
    assert listing.returncode == 3, listing.stderr
    summary = json.loads(listing.stdout)
    assert summary["incomplete"] is True and summary["unreadable"] == [archives[1].name]
    assert f"session rot: cannot read {archives[1].name} (gz-ia session logs rot says which events)" in listing.stderr
    # A cut archive ends with another trailer: its seal tells without decompressing it.
    os.truncate(archives[1], archives[1].stat().st_size - 100)
    for verify in ([], ["--verify"]):
        listing = collector.gz_ia("sessions", "--json", *verify)
        assert listing.returncode == 3, (verify, listing.stderr)
        assert json.loads(listing.stdout)["unreadable"] == [archives[1].name]
        assert f"session rot: cannot read {archives[1].name}" in listing.stderr


def _gunzip(path: Path) -> str:
    import gzip

    return gzip.decompress(path.read_bytes()).decode()


def test_a_missing_archive_shows_in_the_session_listing(make_collector: Any) -> None:
    """An archive missing between two others: gz-ia sessions says incomplete without reading everything."""
    collector = make_collector(env=ROTATING)
    _send(collector, "rot", 0, 150)
    ok = collector.gz_ia("sessions", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["incomplete"] is False
    _archives(collector, "rot")[1].unlink()
    listing = collector.gz_ia("sessions", "--json")
    assert listing.returncode == 3
    assert json.loads(listing.stdout)["incomplete"] is True


def test_a_middle_archive_removed_by_hand_is_named_and_the_older_ones_still_read(make_collector: Any) -> None:
    """``rm`` of an archive between others: no retention deletes a middle one, so every reader names
    its seqs and file (exit 3) and still shows the archives older than the hole."""
    collector = make_collector(env=ROTATING)
    _send(collector, "mid", 0, 100)
    archives = _archives(collector, "mid")
    assert len(archives) >= 3  # the third is between two older ones and the active file
    wait_for(lambda: all(path.name.endswith(".gz") for path in _archives(collector, "mid")), message="compression")
    archives = _archives(collector, "mid")
    held = [json.loads(line)["seq"] for line in _gunzip(archives[2]).splitlines()]
    archives[2].unlink()
    kept = [seq for seq in range(1, 101) if seq not in held]
    reverse = ["session", "logs", "mid", "--reverse", "-n", "all"]
    for command in (
        ["session", "logs", "mid", "--json"],
        ["session", "logs", "mid", "-n", "all"],
        reverse,
        ["logs", "--json"],
    ):
        result = collector.gz_ia(*command)
        assert result.returncode == 3, (command, result.stderr)
        assert f"events seq {held[0]}-{held[-1]} not shown: " in result.stderr, (command, result.stderr)
        assert archives[2].name.split(".events.")[1].split(".")[0] in result.stderr, (command, result.stderr)
        if "--json" in command:
            assert _seqs(result.stdout) == kept, command
    listing = collector.gz_ia("sessions", "--json", "--verify")
    assert listing.returncode == 3, listing.stderr
    summary = json.loads(listing.stdout)
    assert summary["incomplete"] is True and summary["unreadable"] == []
    number = archives[2].name.split(".events.")[1].split(".")[0]
    assert summary["damage"][0] == f"segment {int(number)} (mid.events.{number}.jsonl) is missing", summary
    assert f"seq {held[0]}-{held[-1]} missing" in " ".join(summary["damage"]), summary
    assert f"session mid: segment {int(number)} (mid.events.{number}.jsonl) is missing" in listing.stderr


def test_logs_n_reads_the_newest_events_and_a_full_read_names_damage_far_back(collector: Any) -> None:
    """`gz-ia logs -n 2` over the root asks for the newest events only: a line damaged far back in a
    session is outside what it shows, so it reads (and names) nothing there and exits 0, as
    journalctl -n reads only the end. Reading everything meets the damage and names it (exit 3)."""
    _send(collector, "old", 0, 30)
    _send(collector, "new", 0, 30)
    path = collector.root / "sessions" / "old.events.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[3] = b"#" * len(lines[3])  # same length: every other line stays where it was
    path.write_bytes(b"\n".join(lines))
    newest = collector.gz_ia("logs", "-n", "2", "--json")
    assert newest.returncode == 0, newest.stderr
    assert [(record["session_id"], record["seq"]) for record in map(json.loads, newest.stdout.splitlines())] == [
        ("new", 29),
        ("new", 30),
    ]
    assert "not shown" not in newest.stderr
    everything = collector.gz_ia("logs", "--json")
    assert everything.returncode == 3, everything.stderr
    assert "session old: event seq 4 not shown" in everything.stderr
    assert len(everything.stdout.splitlines()) == 59


def test_a_fifo_under_a_session_files_name_is_named_not_waited_on(collector: Any) -> None:
    """Something that is not a file where a session's active file belongs (a FIFO nobody writes to)
    is reported as unreadable by every reading command, which show the rest; none of them hangs on it."""
    import os

    _send(collector, "good", 0, 3)
    os.mkfifo(collector.root / "sessions" / "piped.events.jsonl")
    for args in (
        ["logs", "--json"],  # the streaming read of the whole root
        ["logs", "stage=FINISH", "--json"],  # the search
        ["session", "logs", "piped", "--json"],
        ["sessions"],
    ):
        result = collector.gz_ia(*args, timeout=20)  # a hang fails here (TimeoutExpired)
        assert result.returncode == 3, (args, result.stdout, result.stderr)
        assert "session piped" in result.stderr, args
    shown = collector.gz_ia("logs", "--json", timeout=20).stdout
    assert [record["session_id"] for record in map(json.loads, shown.splitlines())] == ["good"] * 3


def test_a_missing_root_is_an_error_for_every_reading_command(collector: Any, tmp_path: Path) -> None:
    """logs, session logs, sessions and session tree on a root that does not exist: a clear error, exit 1."""
    missing = str(tmp_path / "typo" / ".harness")
    for args in (["logs"], ["logs", "-f"], ["session", "logs", "x"], ["sessions"], ["session", "tree", "x"]):
        result = collector.gz_ia("--root", missing, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert f"no session root at {missing}" in result.stderr
        assert "--root or GZ_IA_ROOT" in result.stderr
        assert "-- No entries --" not in result.stderr


def _stopped_while_retention_deletes(collector: Any, follow: Any, *options: str) -> Any:
    """A follower of session ``lone`` that shows seq 1-3, is stopped while 200 more are sent and
    retention deletes the first archive, and is then resumed."""
    _send(collector, "lone", 0, 3)
    follower = follow(collector, *options, "session", "logs", "lone", "-f", "--json")
    assert [record["seq"] for record in follower.take(3)] == [1, 2, 3]
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        _send(collector, "lone", 3, 200)
        # Only the follower's own archive must be gone (so it lagged); retention may still be deleting
        # the next ones while it catches up, and that race must not hide events either.
        first = collector.root / "sessions"
        wait_for(lambda: not list(first.glob("lone.events.000001.*")), message="retention to delete archive 1")
    finally:
        follower.proc.send_signal(signal.SIGCONT)
    return follower


def test_a_lagging_follower_reports_the_gap_and_goes_on(make_collector: Any, follow: Any, tmp_path: Path) -> None:
    """A follower of the files (no collector at its socket) stopped while retention deletes what it
    had not read: a lagged notice, then the rest, in order. The file it had open may still hold the
    first events written after it stopped, archived and deleted since: those it shows, so the gap
    need not start at seq 4."""
    collector = make_collector(env=RETAINING)
    nowhere = str(tmp_path / "no-collector.sock")
    follower = _stopped_while_retention_deletes(collector, follow, "--socket", nowhere)
    # Every seq is either shown once, in order, or inside a lagged notice that comes where it is missing.
    expected, notices = 4, []
    while expected <= 203:
        record = follower.take(1)[0]
        if "__notice" in record:
            assert record["__notice"] == "lagged" and record["session_id"] == "lone"
            assert record["from_seq"] == expected and record["to_seq"] >= expected
            assert record["reason"] == "deleted by retention before they were read"
            notices.append(record)
            expected = record["to_seq"] + 1
        else:
            assert record["seq"] == expected
            expected += 1
    assert notices
    assert follower.proc.poll() is None  # still following
    _send(collector, "lone", 203, 1)
    assert follower.take(1)[0]["seq"] == 204
    _code, stderr = follower.finish()
    gap = f"{notices[0]['from_seq']}-{notices[0]['to_seq']}"
    assert f"session lone: events seq {gap} not shown: deleted by retention" in stderr


def test_a_stopped_follower_of_the_stream_misses_nothing_retention_deletes(make_collector: Any, follow: Any) -> None:
    """The same stopped follower, subscribed to the collector: the stream still holds what retention
    deleted from the files, so every event is shown, in order, without a notice."""
    collector = make_collector(env=RETAINING)
    follower = _stopped_while_retention_deletes(collector, follow)
    shown = follower.take(200)
    assert [record.get("seq") for record in shown] == list(range(4, 204))
    _code, stderr = follower.finish()
    assert "not shown" not in stderr


def test_a_cursor_of_a_rebuilt_root_is_refused(make_collector: Any) -> None:
    """A root removed and made again at the same path has a new epoch: its old cursors are refused, exit 2."""
    collector = make_collector()
    _send(collector, "lone", 0, 30)
    shown = collector.gz_ia("session", "logs", "lone", "--json", "--show-cursor")
    cursor = shown.stderr.strip().splitlines()[-1].removeprefix("-- cursor: ")
    collector.stop()
    import shutil

    shutil.rmtree(collector.root)
    collector.root.mkdir()
    collector.start()
    _send(collector, "lone", 0, 3)
    for args in (["session", "logs", "lone"], ["logs"], ["logs", "-f"]):
        result = collector.gz_ia(*args, "--after-cursor", cursor)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "another session root" in result.stderr


# --- follow like kubectl ---------------------------------------------------------------------------


@pytest.mark.parametrize("tree", [False, True], ids=["session", "tree"])
def test_following_a_session_that_has_not_started_waits_for_it(collector: Any, tree: bool, follow: Any) -> None:
    """session logs NEW -f (and --tree -f) waits for the session, then shows its events."""
    follower = follow(collector, "session", "logs", "late", "-f", "--json", *(["--tree"] if tree else []))
    try:
        follower.said("-- waiting for session late to start --")
        _send(collector, "late", 0, 3)
        assert [(record["session_id"], record["seq"]) for record in follower.take(3)] == [
            ("late", 1),
            ("late", 2),
            ("late", 3),
        ]
    finally:
        follower.finish()


def test_waiting_for_a_session_gives_up_after_the_timeout(collector: Any) -> None:
    """--timeout bounds the wait for a session that never starts: exit 124 and a message."""
    result = collector.gz_ia("session", "logs", "never", "-f", "--timeout", "0.5s")
    assert result.returncode == 124
    assert "session never did not start within --timeout 0.5s" in result.stderr


def test_a_chain_of_subagents_deeper_than_python_recursion_is_drawn_to_its_depth_limit(collector: Any) -> None:
    """1,200 sessions each the parent of the next: the tree is drawn 64 levels deep and says how many
    deeper sessions it leaves out, instead of failing with RecursionError."""
    depth = 1_200
    client = collector.client()
    for n in range(depth):
        parent = f"deep-{n - 1}" if n else None
        client.log(session_id=f"deep-{n}", action="a", stage="READ", agent="t", parent_session_id=parent)
    assert client.flush(60)
    client.close()
    result = collector.gz_ia("session", "tree", "deep-0", "--color", "never")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 66 and lines[0].startswith("deep-0 ")
    assert "deep-64 " in lines[64] and f"{depth - 65} deeper sessions not shown" in lines[65]
    as_json = collector.gz_ia("session", "tree", "deep-0", "--json")
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    node = json.loads(as_json.stdout)
    for _ in range(64):
        (node,) = node["children"]
    assert node["session_id"] == "deep-64" and node["children"] == [] and node["hidden"] == depth - 65


def test_a_session_known_only_as_a_parent_is_part_of_its_tree(collector: Any) -> None:
    """deep-1 logged nothing, deep-2 names it as parent: --tree and session tree from deep-1 show deep-2."""
    _send(collector, "deep-2", 0, 3, parent="deep-1")
    logs = collector.gz_ia("session", "logs", "deep-1", "--tree", "--json")
    assert logs.returncode == 0, logs.stderr
    assert {json.loads(line)["session_id"] for line in logs.stdout.splitlines()} == {"deep-2"}
    tree = collector.gz_ia("session", "tree", "deep-1", "--json")
    assert tree.returncode == 0, tree.stderr
    node = json.loads(tree.stdout)
    assert node["session_id"] == "deep-1" and node["events"] == 0
    assert [child["session_id"] for child in node["children"]] == ["deep-2"]
    view = collector.gz_ia("session", "view", "deep-1", "--tree", "-o", "-")
    assert view.returncode == 0, view.stderr
    assert "deep-2" in view.stdout
    assert collector.gz_ia("session", "logs", "deep-0", "--tree").returncode == 1


def _cycle(client: Any, session_id: str, action: str, *, failed: bool) -> None:
    for stage in ("READ", "PENDING", "FINISH"):
        last = stage == "FINISH"
        event = build_event(
            session_id=session_id,
            action=action,
            stage=stage,
            agent="a",
            status="FAILED" if failed and last else "OK",
            error="exit 1" if failed and last else None,
        )
        client.send(event, timeout=10)


@pytest.mark.parametrize(("failed", "code"), [(False, 0), (True, 4)], ids=["ok", "failed"])
def test_until_finished_exits_with_the_status_of_the_followed_cycle(
    collector: Any, failed: bool, code: int, follow: Any
) -> None:
    """-f --until-finished stops at the FINISH of the session's first cycle: 0 for OK, 4 for FAILED."""
    client = collector.client()
    try:
        client.send(build_event(session_id="job", action="task", stage="READ", agent="a"), timeout=10)
        follower = follow(collector, "session", "logs", "job", "-f", "--until-finished", "--json")
        assert follower.take(1)[0]["stage"] == "READ"
        _cycle(client, "job", "inner", failed=True)  # another action's FAILED does not end the wait
        for stage in ("PENDING", "FINISH"):
            last = stage == "FINISH"
            event = build_event(
                session_id="job", action="task", stage=stage, agent="a",
                status="FAILED" if failed and last else "OK", error="exit 1" if failed and last else None,
            )  # fmt: skip
            client.send(event, timeout=10)
    finally:
        client.close()
    records = follower.take(5)
    assert records[-1]["action"] == "task" and records[-1]["stage"] == "FINISH"
    exit_code, _stderr = follower.finish(kill=False)
    assert exit_code == code
    again = collector.gz_ia("session", "logs", "job", "-f", "--until-finished", "--json")
    assert again.returncode == code  # finished before: exits at once with its status
    assert collector.gz_ia("logs", "-f", "--until-finished").returncode == 2


# --- bad input never breaks a reader ---------------------------------------------------------------


def _line(seq: int, timestamp: str, action: str, session_id: str = "odd") -> bytes:
    record = {
        "timestamp": timestamp, "session_id": session_id, "action": action,
        "stage": "READ", "status": "OK", "agent": "a", "seq": seq,
    }  # fmt: skip
    return json.dumps(record).encode() + b"\n"


def test_readers_survive_any_line_on_disk_and_escape_control_characters(collector: Any) -> None:
    """Years 1 and 9999, non-UTF-8 bytes, non-object JSON and control characters: every reader keeps going."""
    _send(collector, "odd", 0, 1)
    collector.stop()
    with (collector.root / "sessions" / "odd.events.jsonl").open("ab") as file:
        file.write(_line(2, "9999-12-31T23:59:59Z", "late"))
        file.write(_line(3, "0001-01-01T00:00:00Z", "early"))
        file.write(b'{"seq": 4, "action": "\xff\xfe"}\n')
        file.write(b"[1, 2]\n")
        file.write(_line(5, "2026-01-01T00:00:00Z", "line1\nline2\x1b[31mred\u202eevil"))
    environment = {**collector.env, "TZ": "Asia/Tokyo"}
    for zone in ("Asia/Tokyo", "America/New_York"):
        environment["TZ"] = zone
        for args in (["logs", "-n", "5"], ["logs", "-n", "all"], ["sessions"], ["session", "tree", "odd"]):
            result = subprocess.run(
                [sys.executable, "-c", "from gz_ia.collector.cli import main; main()", *args],
                env=environment, capture_output=True, text=True, timeout=_BOUND, check=False,
            )  # fmt: skip
            assert "Traceback" not in result.stderr, (zone, args, result.stderr)
            assert result.returncode in (0, 3), (zone, args, result.stderr)
    human = collector.gz_ia("session", "logs", "odd", "-o", "cat")
    assert human.returncode == 3  # the undecodable lines are named
    assert "segment 1: an undecodable line at byte" in human.stderr
    assert "line1\\nline2\\x1b[31mred\\u202eevil" in human.stdout
    assert "\x1b" not in human.stdout and "\u202e" not in human.stdout
    assert len(human.stdout.splitlines()) == 4
    stored = collector.gz_ia("session", "logs", "odd", "--json", "-n", "1")
    assert json.loads(stored.stdout)["action"] == "line1\nline2\x1b[31mred\u202eevil"


def test_logs_across_sessions_are_in_time_order_even_when_a_clock_goes_back(collector: Any) -> None:
    """gz-ia logs orders by timestamp across sessions, although one session's own timestamps go backwards."""
    now = datetime.now(UTC).replace(microsecond=0)
    client = collector.client()
    try:
        stamps = {"a": [5, 1, 3, 2], "b": [4, 0, 6]}
        for session_id, offsets in stamps.items():
            for index, offset in enumerate(offsets):
                event = build_event(
                    session_id=session_id, action=f"x{index}", stage="READ", agent="a",
                    timestamp=now - timedelta(seconds=60 - offset),
                )  # fmt: skip
                client.send(event, timeout=10)
    finally:
        client.close()
    for args in (["logs", "--json"], ["logs", "--json", "-n", "all"], ["logs", "--json", "-n", "4"]):
        result = collector.gz_ia(*args)
        assert result.returncode == 0, result.stderr
        times = [json.loads(line)["timestamp"] for line in result.stdout.splitlines()]
        assert times == sorted(times), args
        assert len(times) == (4 if "4" in args else 7)
    reverse = [json.loads(line)["timestamp"] for line in collector.gz_ia("logs", "--json", "-r").stdout.splitlines()]
    assert reverse == sorted(reverse, reverse=True)
    one = collector.gz_ia("session", "logs", "a", "--json")
    assert [json.loads(line)["seq"] for line in one.stdout.splitlines()] == [1, 2, 3, 4]  # one session: stored order


@pytest.mark.parametrize("when", ["now", "older"])
def test_an_intact_archive_whose_mtime_changed_is_not_damaged(make_collector: Any, when: str) -> None:
    """An archive touched, or restored by a copy without its times: every command reads all 120
    events, and sessions (with --verify and without) agrees with session logs."""
    collector = make_collector(env=ROTATING)
    _send(collector, "rot", 0, 120)

    def compressed() -> list[Path]:  # compression runs in a worker thread, behind the writes
        archives = _archives(collector, "rot")
        return archives if len(archives) >= 2 and all(path.name.endswith(".gz") for path in archives) else []

    wait_for(lambda: bool(compressed()), message="the archives to be compressed")
    archives = compressed()
    for archive in archives:
        if when == "now":
            os.utime(archive)
        else:
            os.utime(archive, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    logs = collector.gz_ia("session", "logs", "rot", "--json")
    assert logs.returncode == 0, logs.stderr
    assert _seqs(logs.stdout) == list(range(1, 121))
    for verify in ([], ["--verify"]):
        listing = collector.gz_ia("sessions", "--json", *verify)
        assert listing.returncode == 0, (verify, listing.stderr)
        summary = json.loads(listing.stdout)
        assert summary["incomplete"] is False and summary["events"] == 120
        assert listing.stderr == ""


def _rewrite_lines(path: Path, change: Any) -> None:
    """Edit a stored file by hand, as a person would: plain or gzip, its lines passed to ``change``."""
    import gzip

    packed = path.name.endswith(".gz")
    data = gzip.decompress(path.read_bytes()) if packed else path.read_bytes()
    lines = change(data.splitlines(keepends=True))
    path.write_bytes(gzip.compress(b"".join(lines)) if packed else b"".join(lines))


def test_verify_names_a_line_missing_a_seq_twice_and_out_of_order_in_active_files_and_archives(
    make_collector: Any,
) -> None:
    """sessions --verify reads every line: a line deleted by hand, one pasted twice, two swapped,
    in the active file or in an archive, each named with its file; exit 3; a clean session passes."""
    collector = make_collector(env=ROTATING)
    for session_id in ("clean", "miss", "dup", "swap", "arc"):
        _send(collector, session_id, 0, 60)
    collector.stop()
    sessions = collector.root / "sessions"
    _rewrite_lines(sessions / "miss.events.jsonl", lambda lines: lines[:1] + lines[2:])
    _rewrite_lines(sessions / "dup.events.jsonl", lambda lines: lines[:2] + lines[1:])
    _rewrite_lines(sessions / "swap.events.jsonl", lambda lines: [lines[1], lines[0], *lines[2:]])
    archive = _archives(collector, "arc")[0]
    _rewrite_lines(archive, lambda lines: lines[:3] + lines[4:])
    firsts = {
        session_id: json.loads((sessions / f"{session_id}.events.jsonl").read_text().splitlines()[0])["seq"]
        for session_id in ("miss", "dup", "swap")
    }
    listing = collector.gz_ia("sessions", "--json", "--verify")
    assert listing.returncode == 3, listing.stderr
    damage = {record["session_id"]: record["damage"] for record in map(json.loads, listing.stdout.splitlines())}
    assert damage["clean"] == []
    assert damage["miss"] == [f"seq {firsts['miss'] + 1} missing (before the next line of miss.events.jsonl)"]
    assert damage["dup"] == [f"seq {firsts['dup'] + 1} appears twice (again in dup.events.jsonl)"]
    assert damage["swap"] == [f"seq {firsts['swap'] - 1} out of order in swap.events.jsonl"]
    assert damage["arc"] == [f"seq 4 missing (before the next line of {archive.name})"]
    assert f"session arc: seq 4 missing (before the next line of {archive.name})" in listing.stderr
