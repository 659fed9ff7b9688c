"""`gz-ia session log` in a real subprocess: its verdict as an exit code and a readable message."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.conftest import spool_dir, wait_for

from gz_ia.collector.cli import main

LOG = ("session", "log", "3f9a12c8", "--agent", "agy", "--action", "Index deps")


def test_accepted_events_exit_0_and_print_their_seq(collector: Any, schema_validator: Any) -> None:
    """READ then FINISH with a duration: both accepted, seq 1 and 2, stored as given."""
    first = collector.gz_ia(*LOG, "--stage", "READ", "--role", "indexer", "--attr", "files=12")
    assert (first.returncode, first.stdout.strip()) == (0, "accepted: 3f9a12c8 seq 1")
    second = collector.gz_ia(*LOG, "--stage", "finish", "--duration", "420")
    assert (second.returncode, second.stdout.strip()) == (0, "accepted: 3f9a12c8 seq 2")
    lines = collector.session_lines("3f9a12c8")
    for line in lines:
        schema_validator.validate(line)
    assert lines[0]["role"] == "indexer"
    assert lines[0]["attrs"] == {"files": 12}
    assert (lines[1]["stage"], lines[1]["duration_ms"]) == ("FINISH", 420)


def test_a_rejected_event_exits_1_with_the_collectors_reason(collector: Any) -> None:
    """FINISH without an open cycle: exit 1, the reason code and sentence on stderr, nothing stored."""
    result = collector.gz_ia(*LOG, "--stage", "FINISH")
    assert result.returncode == 1
    assert "rejected (finish_without_start)" in result.stderr
    assert "no open cycle" in result.stderr
    assert collector.session_lines("3f9a12c8") == []


def test_no_collector_spools_exits_75_and_the_event_is_written_when_one_starts(collector: Any) -> None:
    """With no collector on the socket the command says so, spools the event and exits 75
    (EX_TEMPFAIL); the collector that starts next writes it."""
    collector.stop()
    result = collector.gz_ia(*LOG, "--stage", "READ", "--timeout", "3")
    assert result.returncode == 75, result.stderr
    assert "spooled: no collector is reachable" in result.stderr
    assert str(collector.socket) in result.stderr
    collector.start()
    wait_for(lambda: len(collector.session_lines("3f9a12c8")) == 1, message="the spooled event written")
    assert collector.session_lines("3f9a12c8")[0]["action"] == "Index deps"


@pytest.mark.parametrize("reply", [b"\x00\x00\x00\x05hello", b"\xff\xff\xff\xff"], ids=["not-msgpack", "huge-frame"])
def test_a_peer_that_does_not_speak_the_protocol_gets_the_event_spooled(
    collector: Any, short_tmp: Path, reply: bytes
) -> None:
    """Something else listening on the socket answers garbage: the command spools the event and exits
    75, as for a collector that does not answer, instead of failing with a traceback."""
    collector.stop()
    path = short_tmp / "impostor.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)

        def answer() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(1 << 16)
                connection.sendall(reply)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        result = collector.gz_ia(*LOG, "--stage", "READ", env={**collector.env, "GZ_IA_SOCKET": str(path)})
        thread.join(10)
    assert result.returncode == 75, result.stderr
    assert "spooled:" in result.stderr and "Traceback" not in result.stderr
    collector.start()
    wait_for(lambda: len(collector.session_lines("3f9a12c8")) == 1, message="the spooled event written")


def test_events_after_a_spooled_one_are_spooled_too_and_written_in_order(collector: Any, short_tmp: Path) -> None:
    """READ spooled while the collector is down, FINISH sent while a collector that has not adopted
    the spool yet runs: the FINISH waits in the spool behind its READ, and both are written."""
    collector.stop()
    assert collector.gz_ia(*LOG, "--stage", "READ").returncode == 75
    collector.extra_env["GZ_IA_SPOOL_DIR"] = str(short_tmp / "elsewhere")  # this one adopts nothing
    collector.start()
    finish = collector.gz_ia(*LOG, "--stage", "FINISH", "--duration", "5")
    assert finish.returncode == 75, finish.stderr
    assert "still in the spool" in finish.stderr
    assert collector.session_lines("3f9a12c8") == []
    collector.extra_env.pop("GZ_IA_SPOOL_DIR")  # the test's own spool again
    collector.restart()
    wait_for(lambda: len(collector.session_lines("3f9a12c8")) == 2, message="both events written")
    assert [line["stage"] for line in collector.session_lines("3f9a12c8")] == ["READ", "FINISH"]
    after = collector.gz_ia(*LOG, "--stage", "READ")
    assert (after.returncode, after.stdout.strip()) == (0, "accepted: 3f9a12c8 seq 3")
    assert collector.rejects() == []


HEAVY = (
    "asyncio", "click", "gz_ia.collector.cli", "msgspec", "gz_ia.client.schema", "gz_ia.client.protocol",
    "gz_ia.client._client", "pathlib", "typing", "json", "re",
)  # fmt: skip
"""What a one-shot that reaches its collector does without: each costs more than the rest of the call."""


def test_session_log_loads_no_click(collector: Any) -> None:
    """The entry point answers `session log` with every option, and the agent and role from the
    environment, without importing click, asyncio, msgspec, the client's schema, protocol or sender,
    pathlib, typing, json or re; the event is stored as given."""
    probe = (
        "import sys; from gz_ia.collector.entry import fast_path; "
        "code = fast_path(sys.argv[1:]); "
        f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    argv = ["session", "log", "3f9a12c8", "--action=Index deps", "--stage", "finish", "--status", "failed",
            "--error", "3 failed", "--duration", "7", "--attr", "files=12", "--attr", "ok=false",
            "--parent", "root-1", "--timeout", "4", "-q"]  # fmt: skip
    assert collector.gz_ia(*LOG, "--stage", "PENDING", check=True).stdout.strip() == "accepted: 3f9a12c8 seq 1"
    result = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        env={**collector.env, "GZ_IA_AGENT": "agy", "GZ_IA_ROLE": "indexer"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.stdout.strip() == "0 []", result.stderr
    stored = collector.session_lines("3f9a12c8")[1]
    assert {key: stored[key] for key in ("agent", "role", "status", "error", "duration_ms", "attrs")} == {
        "agent": "agy",
        "role": "indexer",
        "status": "FAILED",
        "error": "3 failed",
        "duration_ms": 7,
        "attrs": {"files": 12, "ok": False},
    }
    assert stored["parent_session_id"] == "root-1"


def test_unusual_command_lines_get_the_click_cli_s_answers(collector: Any) -> None:
    """--help, a missing option, and an unknown one are answered by the click CLI."""
    helped = collector.gz_ia(*LOG, "--help")
    assert helped.returncode == 0
    assert "Send one event to SESSION_ID" in helped.stdout
    missing = collector.gz_ia("session", "log", "3f9a12c8", "--stage", "READ", "--agent", "a")
    assert missing.returncode == 2
    assert "Missing option '--action'" in missing.stderr
    unknown = collector.gz_ia(*LOG, "--stage", "READ", "--colour")
    assert unknown.returncode == 2
    assert "No such option '--colour'" in unknown.stderr
    assert collector.session_lines("3f9a12c8") == []


def test_the_parent_comes_from_the_environment(collector: Any) -> None:
    """Inside a parent's session scope, GZ_IA_PARENT_SESSION_ID becomes the event's parent_session_id."""
    env = {**collector.env, "GZ_IA_PARENT_SESSION_ID": "root-session"}
    result = subprocess.run(
        [sys.executable, "-c", "from gz_ia.collector.cli import main; main()", *LOG, "--stage", "READ"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert collector.session_lines("3f9a12c8")[0]["parent_session_id"] == "root-session"


def test_usage_errors_exit_2_before_anything_is_sent(short_tmp: Path) -> None:
    """FAILED without --error, or an unknown stage, is a usage error (exit 2) caught locally."""
    runner = CliRunner()
    env = {"GZ_IA_SOCKET": str(short_tmp / "none.sock"), "GZ_IA_ROOT": str(short_tmp / ".harness")}
    failed = runner.invoke(main, [*LOG, "--stage", "FINISH", "--status", "FAILED"], env=env)
    assert failed.exit_code == 2
    assert "requires a non-empty error" in failed.output
    unknown = runner.invoke(main, [*LOG, "--stage", "WRITING"], env=env)
    assert unknown.exit_code == 2


@pytest.mark.parametrize("command", ["session-log", "hook"])
def test_a_root_that_does_not_exist_yet_is_made_as_the_client_makes_it(
    collector: Any, tmp_path: Path, command: str
) -> None:
    """A new project's root (its parent too) is created by the call, as the Python client creates it;
    the collector only opens roots. Without that, the first event of a new root was refused and lost."""
    import json

    root = tmp_path / "new-project" / ".harness"
    environment = {**collector.env, "GZ_IA_ROOT": str(root)}
    if command == "session-log":
        result = collector.gz_ia(*LOG, "--stage", "READ", env=environment)
    else:
        start = {"hook_event_name": "SessionStart", "session_id": "cc-new-root", "cwd": str(tmp_path)}
        result = collector.gz_ia("hook", "claude-code", env=environment, stdin=json.dumps(start))
    assert result.returncode == 0, result.stderr
    assert list((root / "sessions").glob("*.events.jsonl")), (result.stdout, result.stderr)


@pytest.mark.parametrize("entry", ["gz_ia.collector.entry", "gz_ia.collector.cli"], ids=["fast-path", "click"])
def test_disabled_sends_nothing_says_nothing_and_exits_0(collector: Any, entry: str) -> None:
    """GZ_IA_DISABLED=1 turns `gz-ia session log` into a no-op, as it turns every agent's client into
    the null client: exit 0, no output, nothing written and, with no collector, nothing spooled."""
    env = {**collector.env, "GZ_IA_DISABLED": "1"}
    command = [sys.executable, "-c", f"from {entry} import main; main()", *LOG]
    for stage in ("READ", "FINISH"):
        result = subprocess.run(
            [*command, "--stage", stage], env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert collector.session_lines("3f9a12c8") == []
    collector.stop()
    result = subprocess.run(
        [*command, "--stage", "READ"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert [path.name for path in spool_dir().rglob("*") if path.suffix in (".spool", ".json")] == []
