"""What gz-ia's Claude Code hooks cost the real Claude Code per hook call, http against command.

Claude Code waits for every hook before it goes on, so a hook's cost is the agent's time. One run
is ``claude -p`` on the same scripted conversation (the fake Anthropic API of the tests: ``--turns``
turns of one Read each, then the answer), with, in turn:

* ``none``: no hooks (the baseline of the wall time);
* ``floor``: the same ``http`` hook handlers gz-ia installs, posting to a trivial server that answers
  ``200 {}`` at once (Claude Code's own cost for an http hook, the floor);
* ``gz-ia http``: ``gz-ia install claude-code --hooks http`` against a real collector, without its
  SessionStart command hook (Claude Code posts no http SessionStart: the figure compares the same
  hook calls with the floor);
* ``gz-ia http + start``: the same as installed, SessionStart's forwarding command hook included;
* ``gz-ia command``: ``--hooks command``, a process per hook.

The variants run interleaved, ``--runs`` times each, so that what drifts on the machine hits all
alike. Each run's hook calls are counted by the floor server. The figure for the target is the
median added per hook call over the floor: ``(median(gz-ia http) - median(floor)) / calls``.

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
VARIANTS: Final = ("none", "floor", "gz-ia http", "gz-ia http + start", "gz-ia command")
_ANSWER: Final = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _floor_server(port: int, counter: Path) -> None:
    """Answer every request at once (keep-alive honoured); count them into ``counter``."""
    count = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                writer.write(_ANSWER)
                count += 1
                counter.write_text(str(count))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


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

    install(path, "unused hook claude-code", http_url=url)
    for event in COMMAND_ONLY_EVENTS & set(HOOK_EVENTS):
        _settings_without(path, event)


def run(runs: int, turns: int) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from tests.fixtures.claude_run import ClaudeCode, scratch_home
    from tests.fixtures.model_apis.anthropic import FakeAnthropic, ToolUse, Turn

    base = Path(tempfile.mkdtemp(prefix="gzia-bench-hooks-", dir="/tmp"))
    workspace = base / "ws"
    (workspace / ".harness").mkdir(parents=True)
    (workspace / "small.txt").write_text("hello\n")
    http_port, floor_port = _free_port(), _free_port()
    socket_path = base / "run" / "collector.sock"
    environment = {
        **os.environ,
        "GZ_IA_SOCKET": str(socket_path),
        "GZ_IA_SPOOL_DIR": str(base / "spool"),
        "GZ_IA_STATE_DIR": str(base / "state"),
        "XDG_CONFIG_HOME": str(base / "config"),
        "GZ_IA_HTTP_ADDRESS": f"127.0.0.1:{http_port}",
    }
    environment.pop("GZ_IA_ROOT", None)
    collector = subprocess.Popen(
        [sys.executable, "-m", "gz_ia.collector", "--metrics-address", "off"],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=(base / "collector.log").open("wb"),
    )
    counter = base / "floor.count"
    floor_command = ["-m", "bench.claude_http_hooks", "--floor-server", str(floor_port), str(counter)]
    floor = subprocess.Popen([sys.executable, *floor_command], cwd=REPO)
    api = FakeAnthropic()
    marker = "bench: read the small file again and again"
    read = ToolUse("Read", {"file_path": str(workspace / "small.txt")})
    api.script(marker, *[Turn(tools=(read,)) for _ in range(turns)], Turn(text="done"))
    try:
        _wait_port(http_port)
        _wait_port(floor_port)
        homes: dict[str, ClaudeCode] = {}
        for variant in VARIANTS:
            claude = ClaudeCode(
                scratch_home(base / variant.replace(" ", "-").replace("+", "")), workspace, api, environment
            )
            if variant == "floor":
                _floor_settings(claude.settings_path, f"http://127.0.0.1:{floor_port}/hooks/claude-code")
            elif variant.startswith("gz-ia http"):
                claude.install_hooks("--hooks", "http")
                if variant == "gz-ia http":
                    _settings_without(claude.settings_path, "SessionStart")
            elif variant == "gz-ia command":
                claude.install_hooks("--hooks", "command")
            homes[variant] = claude
        times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        calls: list[int] = []
        for _ in range(runs):
            for variant in VARIANTS:
                before = int(counter.read_text()) if counter.exists() else 0
                started = time.perf_counter()
                result = homes[variant].run(marker)
                elapsed = time.perf_counter() - started
                if result.returncode != 0:
                    raise RuntimeError(f"{variant}: claude exited {result.returncode}: {result.stderr[-2000:]}")
                times[variant].append(elapsed)
                if variant == "floor":
                    time.sleep(0.05)
                    calls.append(int(counter.read_text()) - before)
    finally:
        api.close()
        floor.terminate()
        collector.terminate()
        floor.wait(10)
        collector.wait(30)
    hook_calls = statistics.median(calls)
    medians = {variant: statistics.median(values) for variant, values in times.items()}
    per_call = {
        variant: (medians[variant] - medians["none"]) * 1000 / hook_calls for variant in VARIANTS if variant != "none"
    }
    return {
        "runs": runs,
        "turns": turns,
        "http_hook_calls_per_run": hook_calls,
        "wall_seconds": times,
        "median_wall_seconds": medians,
        "ms_per_hook_call_over_no_hooks": per_call,
        "gz_ia_http_over_floor_ms_per_call": (medians["gz-ia http"] - medians["floor"]) * 1000 / hook_calls,
        "session_start_command_ms": (medians["gz-ia http + start"] - medians["gz-ia http"]) * 1000,
        "gz_ia_command_over_floor_ms_per_call": (medians["gz-ia command"] - medians["floor"]) * 1000 / hook_calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--floor-server", nargs=2, metavar=("PORT", "COUNTER"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        asyncio.run(_floor_server(int(args.floor_server[0]), Path(args.floor_server[1])))
        return
    report = run(args.runs, args.turns)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
