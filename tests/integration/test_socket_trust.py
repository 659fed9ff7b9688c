"""A socket another user planted: the clients send it nothing, keep the event, and say why.

Two real uids: the tests run as one user (root in CI) and the "attacker" is uid 65534 (nobody), run
with ``setpriv`` on Debian's ``/usr/bin/python3`` (it cannot run the interpreter under root's 0700
home). Every path lives under the test's own base directory, never the real ``/tmp/gz-ia-<uid>``:
the socket is named with ``GZ_IA_SOCKET``, exactly as the default path would be used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import SYSTEM_PYTHON, spool_dir, wait_for

from gz_ia.client import Client, build_event
from gz_ia.client.errors import CollectorUnavailable

HOSTILE_UID = 65534
LISTENER = Path(__file__).resolve().parents[1] / "fixtures" / "agents" / "hostile_listener.py"


class Hostile:
    """A listener run by HOSTILE_UID on ``socket``; :meth:`stop` says what it received."""

    def __init__(self, socket: Path, mode: int | None) -> None:
        args = [str(socket)] if mode is None else [str(socket), f"{mode:o}"]
        as_other = ["setpriv", f"--reuid={HOSTILE_UID}", f"--regid={HOSTILE_UID}", "--clear-groups"]
        self.proc = subprocess.Popen(
            [*as_other, SYSTEM_PYTHON, str(LISTENER), *args],
            env={"PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline()
        if ready.strip() != "ready":
            raise AssertionError(f"the hostile listener did not start: {self.close()}")

    def close(self) -> str:
        """Kill it if it still runs; return what it wrote on stderr."""
        if self.proc.returncode is not None:
            return ""
        self.proc.kill()
        return self.proc.communicate(timeout=30)[1]

    def stop(self) -> dict[str, int]:
        self.proc.terminate()
        out, err = self.proc.communicate(timeout=30)
        counts: dict[str, int] = json.loads(out.strip().splitlines()[-1])
        assert self.proc.returncode == 0, err
        return counts


@pytest.fixture(name="base")
def _base(short_tmp: Path) -> Path:
    """The test's private stand-in for ``/tmp``: sticky and writable by everyone."""
    short_tmp.chmod(0o1777)
    (short_tmp / "ws" / ".harness").mkdir(parents=True)
    return short_tmp


@pytest.fixture(name="planted")
def _planted(base: Path) -> Iterator[tuple[Path, Hostile]]:
    """The attack on the default path: the other uid made the socket's directory first, mode 0777,
    and listens in it."""
    socket = base / "gz-ia-victim" / "collector.sock"
    hostile = Hostile(socket, 0o777)
    yield socket, hostile
    hostile.close()


@pytest.fixture(name="squatted")
def _squatted(base: Path) -> Iterator[tuple[Path, Hostile]]:
    """A socket the other uid bound first in a sticky directory of ours (as in ``/tmp``): the
    directory passes, only the peer's uid tells."""
    sticky = base / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    hostile = Hostile(sticky / "collector.sock", None)
    yield sticky / "collector.sock", hostile
    hostile.close()


def gz_ia(base: Path, socket: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """The real ``gz-ia`` command line, pointed at ``socket`` (as the default path would be)."""
    env = {name: value for name, value in os.environ.items() if name != "GZ_IA_TRUSTED_UIDS"}
    env |= {"GZ_IA_SOCKET": str(socket), "GZ_IA_ROOT": str(base / "ws" / ".harness"), **extra}
    return subprocess.run(
        [sys.executable, "-c", "from gz_ia.collector.entry import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def library_send(base: Path, socket: Path) -> tuple[str, str]:
    """Send one event with the library; return the error ``send`` raised and ``stats().last_error``."""
    client = Client(socket_path=socket, root=base / "ws" / ".harness", connect_timeout=2.0)
    try:
        with pytest.raises(CollectorUnavailable) as raised:
            client.send(build_event(session_id="victim", action="secret plan", stage="READ", agent="a"), timeout=3)
        last_error = client.stats().last_error
    finally:
        client.close(timeout=0)
    return str(raised.value), last_error or ""


def spooled_events() -> int:
    """How many events this test's clients spooled (segments of the library, or of ``gz-ia``)."""
    return len(list(spool_dir().glob("*.spool")))


def test_the_library_sends_nothing_into_a_planted_directory(planted: tuple[Path, Hostile], base: Path) -> None:
    socket, hostile = planted
    raised, last_error = library_send(base, socket)
    assert hostile.stop() == {"connections": 0, "bytes": 0}
    for message in (raised, last_error):
        assert f"{socket.parent} belongs to uid {HOSTILE_UID}" in message, message
    assert "XDG_RUNTIME_DIR" in last_error
    assert spooled_events() >= 1, "the event is kept in the spool, as when no collector answers"


def test_session_log_sends_nothing_into_a_planted_directory(planted: tuple[Path, Hostile], base: Path) -> None:
    socket, hostile = planted
    result = gz_ia(
        base, socket, "session", "log", "victim", "--action", "secret plan", "--stage", "READ", "--agent", "a"
    )
    assert hostile.stop() == {"connections": 0, "bytes": 0}
    assert result.returncode == 75, result.stderr
    assert f"{socket.parent} belongs to uid {HOSTILE_UID}" in result.stderr
    assert spooled_events() == 1


def test_the_library_sends_nothing_to_a_peer_of_another_uid(squatted: tuple[Path, Hostile], base: Path) -> None:
    """The directory is fine; the peer's uid (``SO_PEERCRED``) is not: not even the Hello is sent."""
    socket, hostile = squatted
    raised, last_error = library_send(base, socket)
    counts = hostile.stop()
    assert counts["connections"] >= 1 and counts["bytes"] == 0, counts
    for message in (raised, last_error):
        assert f"is served by uid {HOSTILE_UID}" in message, message
    assert "GZ_IA_TRUSTED_UIDS" in last_error
    assert spooled_events() >= 1


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("session", "log", "victim", "--action", "secret plan", "--stage", "READ", "--agent", "a"), 75),
        (("status",), 69),
        (("gc", "--dry-run"), 69),
    ],
    ids=["session-log", "status", "gc"],
)
def test_commands_send_nothing_to_a_peer_of_another_uid(
    squatted: tuple[Path, Hostile], base: Path, args: tuple[str, ...], code: int
) -> None:
    socket, hostile = squatted
    result = gz_ia(base, socket, *args)
    counts = hostile.stop()
    assert counts["connections"] >= 1 and counts["bytes"] == 0, counts
    assert result.returncode == code, result.stderr
    assert f"is served by uid {HOSTILE_UID}" in result.stderr
    if args[0] == "session":
        assert spooled_events() == 1


def test_the_claude_code_hook_sends_nothing_to_a_peer_of_another_uid(
    squatted: tuple[Path, Hostile], base: Path
) -> None:
    socket, hostile = squatted
    (base / "ws" / "src").mkdir()
    first = (
        (Path(__file__).parents[1] / "fixtures" / "claude_code" / "parallel_tools.jsonl").read_text().splitlines()[0]
    )
    payload = json.dumps({**json.loads(first), "cwd": str(base / "ws" / "src")})
    env = {name: value for name, value in os.environ.items() if name not in ("GZ_IA_TRUSTED_UIDS", "GZ_IA_ROOT")}
    result = subprocess.run(
        [sys.executable, "-c", "from gz_ia.collector.entry import main; main()", "hook", "claude-code"],
        input=payload,
        env={**env, "GZ_IA_SOCKET": str(socket)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    counts = hostile.stop()
    assert counts["connections"] >= 1 and counts["bytes"] == 0, counts
    assert result.returncode == 0, result.stderr  # a hook never fails Claude Code
    assert spooled_events() == 1


@pytest.mark.parametrize(("agent", "fixture"), [("codex", "codex-SessionStart"), ("gemini", "gemini-SessionStart")])
def test_the_codex_and_gemini_hooks_send_nothing_to_a_peer_of_another_uid(
    squatted: tuple[Path, Hostile], base: Path, agent: str, fixture: str
) -> None:
    """Their hooks share the one-shot delivery: another uid's socket hears nothing, the event is spooled."""
    socket, hostile = squatted
    (base / "ws" / "src").mkdir()
    captured = (Path(__file__).parents[1] / "fixtures" / "agent_hooks" / f"{fixture}.json").read_text()
    payload = json.dumps({**json.loads(captured), "cwd": str(base / "ws" / "src")})
    env = {name: value for name, value in os.environ.items() if name not in ("GZ_IA_TRUSTED_UIDS", "GZ_IA_ROOT")}
    result = subprocess.run(
        [sys.executable, "-m", "gz_ia.collector.entry", "hook", agent],
        input=payload,
        env={**env, "GZ_IA_SOCKET": str(socket)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    counts = hostile.stop()
    assert counts["connections"] >= 1 and counts["bytes"] == 0, counts
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    assert spooled_events() == 1


def test_a_trusted_uid_is_talked_to(squatted: tuple[Path, Hostile], base: Path) -> None:
    """``GZ_IA_TRUSTED_UIDS`` names the uids of a collector the user chose to share (its ``allow_uids``)."""
    socket, hostile = squatted
    result = gz_ia(
        base, socket, "session", "log", "victim", "--action", "a", "--stage", "READ", "--agent", "a",
        "--timeout", "1", GZ_IA_TRUSTED_UIDS=f"1234, {HOSTILE_UID}",
    )  # fmt: skip
    counts = hostile.stop()
    assert counts["bytes"] > 0, (counts, result.stderr)


def test_the_users_collector_adopts_what_was_spooled_for_a_squatted_socket(
    squatted: tuple[Path, Hostile], base: Path, make_collector: Any
) -> None:
    """Another user's listener is no collector of ours: it does not keep the user's own collector
    (on another socket) from adopting the events spooled for that socket."""
    socket, hostile = squatted
    result = gz_ia(base, socket, "session", "log", "victim", "--action", "a", "--stage", "READ", "--agent", "a")
    assert result.returncode == 75, result.stderr
    make_collector()
    session = base / "ws" / ".harness" / "sessions" / "victim.events.jsonl"
    wait_for(session.exists, message="the spool to be adopted")
    assert [json.loads(line)["action"] for line in session.read_text().splitlines()] == ["a"]
    assert hostile.stop()["bytes"] == 0


def test_the_collector_says_what_to_do_in_a_planted_directory(planted: tuple[Path, Hostile], base: Path) -> None:
    socket, hostile = planted
    hostile.stop()
    result = subprocess.run(
        [sys.executable, "-m", "gz_ia.collector", "--socket", str(socket)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    message = result.stderr
    assert f"{socket.parent} belongs to uid {HOSTILE_UID} (mode 777)" in message, message
    assert "XDG_RUNTIME_DIR" in message and "--socket" in message and "GZ_IA_SOCKET" in message, message
    assert "0700" in message, message
