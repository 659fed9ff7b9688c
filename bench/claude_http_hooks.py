"""What gz-ia's Claude Code hooks cost the real Claude Code per hook call, http against command.

Claude Code waits for every hook before it goes on, so a hook's cost is the agent's time. One run
is ``claude -p`` on the same scripted conversation (the fake Anthropic API of the tests: ``--turns``
turns of one Read each, then the answer), with, in turn:

* ``none``: no hooks;
* ``floor``: the same ``http`` handlers gz-ia installs, posting to a trivial server that answers
  ``200 {}`` at once: Claude Code's own cost for an http hook;
* ``gz-ia http``: ``gz-ia install claude-code --hooks http`` against a real collector, without its
  SessionStart command hook (Claude Code posts no http SessionStart: so both http variants make the
  same hook calls);
* ``gz-ia command``: ``--hooks command``, a process per hook.

The variants run interleaved, ``--runs`` times each. Two figures per hook call:

* **answered in**: each http variant's hooks go through a timing relay (one upstream connection per
  connection Claude Code makes, as Claude Code makes them) that records, for every request, the time
  from its last byte sent on to the answer's last byte back: the server's share of the hook's cost,
  measured on Claude Code's own requests. gz-ia's figure minus the floor's, as medians over every
  hook call, is what gz-ia adds to an http hook (the target: at most 2 ms). The relay adds the same
  to both.
* **wall time**: the run's wall time over the ``none`` run's, divided by the hook calls (counted by
  the floor's relay): what a hook costs the agent whole, command hooks included. On a busy machine
  this one is noisy; the first is not.

Run ``uv run --no-sync python -m bench.claude_http_hooks`` from the repository (``--runs``,
``--turns``, ``--json FILE``); the agent comes from ``bash scripts/agents.sh``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parents[1]
GZ_IA: Final = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()"]
VARIANTS: Final = ("none", "floor", "gz-ia http", "gz-ia command")
_ANSWER: Final = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _floor_server(port: int) -> None:
    """Answer every request at once (keep-alive honoured)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await _read_message(reader)
                writer.write(_ANSWER)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


async def _read_message(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 message with a Content-Length body (what Claude Code sends, and both servers answer)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


async def _relay(port: int, upstream: int, out: Path) -> None:
    """Pass each connection on to ``upstream`` on a connection of its own; append each request's
    answered-in time (nanoseconds) to ``out``."""
    record = out.open("a", buffering=1)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream)
        try:
            while True:
                request = await _read_message(reader)
                up_writer.write(request)
                await up_writer.drain()
                sent = time.perf_counter_ns()
                answer = await _read_message(up_reader)
                record.write(f"{time.perf_counter_ns() - sent}\n")
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            up_writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def _answered_in(path: Path) -> list[float]:
    """The relay's answered-in times, in milliseconds."""
    return [int(line) / 1e6 for line in path.read_text().split()] if path.exists() else []


def _wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def _settings_without(path: Path, event: str) -> None:
    settings = json.loads(path.read_text())
    settings["hooks"].pop(event, None)
    path.write_text(json.dumps(settings))


def _floor_settings(path: Path, url: str) -> None:
    """gz-ia's http handlers (same headers), every event but SessionStart, posting to ``url``."""
    from gz_ia.collector.integrations.claude_code.settings import COMMAND_ONLY_EVENTS, HOOK_EVENTS, install

    install(path, "unused hook claude-code", http_url=url, key="the floor asks for no key")
    for event in COMMAND_ONLY_EVENTS & set(HOOK_EVENTS):
        _settings_without(path, event)


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "bench.claude_http_hooks", *args], cwd=REPO)


def run(runs: int, turns: int) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from tests.fixtures.claude_run import ClaudeCode, scratch_home
    from tests.fixtures.model_apis.anthropic import FakeAnthropic, ToolUse, Turn

    base = Path(tempfile.mkdtemp(prefix="gzia-bench-hooks-", dir="/tmp"))
    workspace = base / "ws"
    (workspace / ".harness").mkdir(parents=True)
    (workspace / "small.txt").write_text("hello\n")
    http_port, floor_port, floor_relay, gzia_relay = (_free_port() for _ in range(4))
    environment = {
        **os.environ,
        "GZ_IA_SOCKET": str(base / "run" / "collector.sock"),
        "GZ_IA_SPOOL_DIR": str(base / "spool"),
        "GZ_IA_STATE_DIR": str(base / "state"),
        "XDG_CONFIG_HOME": str(base / "config"),
        "GZ_IA_HTTP_ADDRESS": f"127.0.0.1:{gzia_relay}",  # what install writes into the hooks' URL
    }
    environment.pop("GZ_IA_ROOT", None)
    collector_env = {**environment, "GZ_IA_HTTP_ADDRESS": f"127.0.0.1:{http_port}"}
    collector = subprocess.Popen(
        [sys.executable, "-m", "gz_ia.collector", "--metrics-address", "off"],
        env=collector_env,
        stdout=subprocess.DEVNULL,
        stderr=(base / "collector.log").open("wb"),
    )
    answered = {"floor": base / "floor.ns", "gz-ia http": base / "gz-ia.ns"}
    helpers = [
        _spawn("--floor-server", str(floor_port)),
        _spawn("--relay", str(floor_relay), str(floor_port), str(answered["floor"])),
        _spawn("--relay", str(gzia_relay), str(http_port), str(answered["gz-ia http"])),
    ]
    api = FakeAnthropic()
    marker = "bench: read the small file again and again"
    read = ToolUse("Read", {"file_path": str(workspace / "small.txt")})
    api.script(marker, *[Turn(tools=(read,)) for _ in range(turns)], Turn(text="done"))
    try:
        for port in (http_port, floor_port, floor_relay, gzia_relay):
            _wait_port(port)
        homes: dict[str, ClaudeCode] = {}
        for variant in VARIANTS:
            claude = ClaudeCode(scratch_home(base / variant.replace(" ", "-")), workspace, api, environment)
            if variant == "floor":
                _floor_settings(claude.settings_path, f"http://127.0.0.1:{floor_relay}/hooks/claude-code")
            elif variant == "gz-ia http":
                claude.install_hooks("--hooks", "http")
                _settings_without(claude.settings_path, "SessionStart")
            elif variant == "gz-ia command":
                claude.install_hooks("--hooks", "command")
            homes[variant] = claude
        times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        calls: list[int] = []
        for _ in range(runs):
            for variant in VARIANTS:
                before = len(_answered_in(answered["floor"]))
                started = time.perf_counter()
                result = homes[variant].run(marker)
                elapsed = time.perf_counter() - started
                if result.returncode != 0:
                    raise RuntimeError(f"{variant}: claude exited {result.returncode}: {result.stderr[-2000:]}")
                times[variant].append(elapsed)
                if variant == "floor":
                    calls.append(len(_answered_in(answered["floor"])) - before)
    finally:
        api.close()
        for helper in helpers:
            helper.terminate()
        collector.terminate()
        for process in (*helpers, collector):
            process.wait(30)
    hook_calls = statistics.median(calls)
    medians = {variant: statistics.median(values) for variant, values in times.items()}
    answered_ms = {variant: _answered_in(path) for variant, path in answered.items()}
    answered_median = {variant: statistics.median(values) for variant, values in answered_ms.items()}
    return {
        "runs": runs,
        "turns": turns,
        "http_hook_calls_per_run": hook_calls,
        "answered_in_ms_median": answered_median,
        "answered_in_ms_p25": {
            variant: statistics.quantiles(values, n=4)[0] for variant, values in answered_ms.items()
        },
        "answered_in_ms_p90": {
            variant: statistics.quantiles(values, n=10)[-1] for variant, values in answered_ms.items()
        },
        "gz_ia_http_adds_over_floor_ms_p25": statistics.quantiles(answered_ms["gz-ia http"], n=4)[0]
        - statistics.quantiles(answered_ms["floor"], n=4)[0],
        "load_average_1min_at_end": os.getloadavg()[0],
        "answered_in_requests": {variant: len(values) for variant, values in answered_ms.items()},
        "gz_ia_http_adds_over_floor_ms": answered_median["gz-ia http"] - answered_median["floor"],
        "wall_seconds": times,
        "median_wall_seconds": medians,
        "wall_ms_per_hook_call_over_none": {
            variant: (medians[variant] - medians["none"]) * 1000 / hook_calls
            for variant in VARIANTS
            if variant != "none"
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--floor-server", metavar="PORT", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--relay", nargs=3, metavar=("PORT", "UPSTREAM", "OUT"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server is not None:
        asyncio.run(_floor_server(args.floor_server))
        return
    if args.relay is not None:
        asyncio.run(_relay(int(args.relay[0]), int(args.relay[1]), Path(args.relay[2])))
        return
    report = run(args.runs, args.turns)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
