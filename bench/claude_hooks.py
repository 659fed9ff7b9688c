"""What gz-ia's hooks add to a real Claude Code run, per hook call, against the same run without them.

The real Claude Code (installed by scripts/agents.sh) runs ``claude -p`` against the fake Anthropic
API of the tests (``tests/fixtures/model_apis/anthropic.py``), scripted to make ``--calls`` tool
calls one turn after another (a Read each: one call per turn, so every hook is on the run's critical
path: Claude Code waits for each). The variants, interleaved round by round so that a busy machine
slows them alike, each with a fresh HOME and the same hook events installed:

* ``none``: no hooks (the baseline);
* ``true``: a ``true`` command hook (Claude Code's own cost of a command hook: the floor);
* ``gz-ia up``: ``gz-ia hook claude-code`` as ``gz-ia install claude-code --hooks command`` writes
  it, from a user's install (wheels, compiled bytecode, as ``bench/_cli_cost.py`` builds it), with a
  collector running;
* ``gz-ia down``: the same with no collector (every event spooled);
* ``gz-ia inbox``: the inbox hook, as ``gz-ia install claude-code`` writes it by default where no
  service manager holds the HTTP port (a shell script leaving each payload for the collector);
* ``gz-ia inbox down``: the same with no collector (every payload kept in the inbox).

* ``http floor``: gz-ia's ``http`` handlers (the same URL shape and headers) posting to a trivial
  server that answers ``200 {}`` at once (Claude Code's own cost of an http hook: the http floor);
* ``gz-ia http``: ``gz-ia install claude-code --hooks http`` against the running collector's HTTP
  side. Both http variants leave SessionStart out: Claude Code posts no http SessionStart, and gz-ia
  installs it as a command hook (one per session), which would be counted against the floor's
  absent one. Their per-call figures divide by the hook calls without SessionStart.

A variant is a name and the ``hooks`` settings it installs. ``bench/claude_http_hooks.py`` measures
the http variants' answers request by request, which a busy machine disturbs far less.

A run's hook calls are counted once, by a recording hook (``cat``), so the figures are per real hook
call: ``(median wall of the variant - median wall of none) / hook calls``. Reported: each variant's
median wall time and added cost per hook call, gz-ia's cost over the ``true`` floor, and the ratio
of gz-ia's added cost with the collector down to with it up.

Usage (from the repository root)::

    uv run --no-sync python -m bench.claude_hooks [--calls 20] [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixtures.model_apis.anthropic import FakeAnthropic, ToolUse, Turn
from tests.fixtures.real_agents import agents_cache

from gz_ia.collector.integrations.claude_code.settings import COMMAND_ONLY_EVENTS, HOOK_EVENTS, TOOL_EVENTS
from gz_ia.collector.integrations.claude_code.settings import http_handler as _http_handler

from ._cli_cost import user_install

GZ_IA = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()"]
MARKER = "BENCH-HOOKS"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _hooks(handler: dict[str, Any]) -> dict[str, Any]:
    """The ``hooks`` settings that run ``handler`` at every event gz-ia installs."""
    return {
        event: [{**({"matcher": "*"} if event in TOOL_EVENTS else {}), "hooks": [dict(handler)]}]
        for event in HOOK_EVENTS
    }


def _command(command: str) -> Callable[[Path], dict[str, Any]]:
    return lambda _scratch: _hooks({"type": "command", "command": command, "timeout": 5})


def _gz_ia(scratch: Path) -> dict[str, Any]:
    """The hooks exactly as ``gz-ia install claude-code`` writes them (into a throwaway home), running
    the ``gz-ia`` of a user's install (wheels, compiled bytecode: :func:`bench._cli_cost.user_install`)."""
    home = scratch / "install-home"
    home.mkdir(exist_ok=True)
    return _installed(home, "--hooks", "command")


def _gz_ia_inbox(scratch: Path) -> dict[str, Any]:
    """The inbox hook as ``gz-ia install claude-code`` writes it where no service manager holds the
    HTTP port (its script in the throwaway home's data directory)."""
    home = scratch / "install-home-inbox"
    home.mkdir(exist_ok=True)
    return _installed(home, "--hooks", "inbox")


def _installed(home: Path, *options: str) -> dict[str, Any]:
    command = f"{shlex.quote(str(user_install() / 'gz-ia'))} hook claude-code"
    environment = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data")}
    subprocess.run([*GZ_IA, "install", "claude-code", "--user", "--command", command, *options],
                   env=environment, check=True, capture_output=True)  # fmt: skip
    hooks: dict[str, Any] = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    return hooks


HTTP_PORT = _free_port()
"""The collector's HTTP side in this run (never the user's own port)."""
FLOOR_PORT = _free_port()


def _http_floor(_scratch: Path) -> dict[str, Any]:
    """gz-ia's http handlers, posting to the trivial server on :data:`FLOOR_PORT`."""
    handler = _http_handler(f"http://127.0.0.1:{FLOOR_PORT}/hooks/claude-code", "a-key-the-floor-ignores")
    return {event: groups for event, groups in _hooks(handler).items() if event not in COMMAND_ONLY_EVENTS}


def _gz_ia_http(scratch: Path) -> dict[str, Any]:
    """The hooks ``gz-ia install claude-code --hooks http`` writes for this run's collector, without
    its SessionStart command hook (see the module's docstring)."""
    home = scratch / "install-home-http"
    home.mkdir(exist_ok=True)
    subprocess.run([*GZ_IA, "install", "claude-code", "--user", "--hooks", "http"],
                   env={**os.environ, "HOME": str(home), "GZ_IA_HTTP_ADDRESS": f"127.0.0.1:{HTTP_PORT}",
                        "GZ_IA_STATE_DIR": str(scratch / "state")},
                   check=True, capture_output=True)  # fmt: skip
    hooks: dict[str, Any] = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    return {event: groups for event, groups in hooks.items() if event not in COMMAND_ONLY_EVENTS}


VARIANTS: dict[str, tuple[Callable[[Path], dict[str, Any]] | None, bool]] = {
    "none": (None, True),
    "true": (_command("true"), True),
    "gz-ia up": (_gz_ia, True),
    "gz-ia down": (_gz_ia, False),
    "gz-ia inbox": (_gz_ia_inbox, True),
    "gz-ia inbox down": (_gz_ia_inbox, False),
    "http floor": (_http_floor, True),
    "gz-ia http": (_gz_ia_http, True),
}
"""Each variant: the ``hooks`` settings it installs (None: none), and whether a collector runs."""


class Bench:
    """The fake API, a collector, and a workspace, shared by every run."""

    def __init__(self, scratch: Path, calls: int) -> None:
        self.scratch = scratch
        self.claude = agents_cache() / "claude" / "node_modules" / ".bin" / "claude"
        if not self.claude.exists():
            raise SystemExit(f"Claude Code is not installed at {self.claude}: run `bash scripts/agents.sh`")
        self.workspace = scratch / "ws"
        (self.workspace / ".harness").mkdir(parents=True)
        (self.workspace / "notes.txt").write_text("a line to read\n")
        self.socket = scratch / "run" / "collector.sock"
        self.api = FakeAnthropic()
        read = ToolUse("Read", {"file_path": str(self.workspace / "notes.txt")})
        self.api.script(MARKER, *[Turn(tools=(read,)) for _ in range(calls)], Turn(text="done"))
        self.collector: subprocess.Popen[bytes] | None = None
        self.floor: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def env(self, home: Path, up: bool) -> dict[str, str]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("GZ_IA_", "ANTHROPIC_"))}
        environment.update(
            HOME=str(home),
            ANTHROPIC_BASE_URL=self.api.base_url,
            ANTHROPIC_API_KEY="sk-ant-fake-key-for-bench",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_ERROR_REPORTING="1",
            IS_SANDBOX="1",
            GZ_IA_SOCKET=str(self.socket if up else self.scratch / "nobody-listens.sock"),
            GZ_IA_SPOOL_DIR=str(self.scratch / ("spool" if up else "spool-down")),
        )
        return environment

    def start_collector(self) -> None:
        environment = {**self.env(self.scratch, True), "GZ_IA_STATE_DIR": str(self.scratch / "state"),
                       "XDG_CONFIG_HOME": str(self.scratch / "config")}  # fmt: skip
        self.collector = subprocess.Popen(
            [sys.executable, "-m", "gz_ia.collector", "--socket", str(self.socket), "--metrics-address", "off",
             "--http-address", f"127.0.0.1:{HTTP_PORT}"],
            env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            probe = socket.socket(socket.AF_UNIX)
            try:
                probe.connect(str(self.socket))
                return
            except OSError:
                time.sleep(0.05)
            finally:
                probe.close()
        raise SystemExit("the collector did not start")

    def start_floor(self) -> None:
        """The trivial server of the ``http floor`` variant (``bench/claude_http_hooks.py``'s)."""
        self.floor = subprocess.Popen([sys.executable, "-m", "bench.claude_http_hooks", "--floor-server",
                                       str(FLOOR_PORT)])  # fmt: skip

    def run(self, hooks: dict[str, Any] | None, up: bool) -> float:
        """One ``claude -p`` run with these hooks; its wall time in seconds."""
        self.runs += 1
        home = self.scratch / f"home{self.runs}"
        (home / ".claude").mkdir(parents=True)
        (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks} if hooks else {}))
        shutil.rmtree(self.scratch / "spool-down", ignore_errors=True)  # each down run starts unspooled
        (self.scratch / "spool-down" / "hooks").mkdir(mode=0o700, parents=True)  # an inbox a collector made
        command = [str(self.claude), "-p", f"{MARKER}: read the notes", "--output-format", "stream-json",
                   "--verbose", "--dangerously-skip-permissions"]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(command, cwd=self.workspace, env=self.env(home, up), capture_output=True, timeout=600,
                              stdin=subprocess.DEVNULL, check=False)  # fmt: skip
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"claude exited with {done.returncode}: {done.stderr.decode()[-500:]}")
        shutil.rmtree(home, ignore_errors=True)
        return elapsed

    def hook_calls(self) -> int:
        """How many hook calls one run makes, counted by a recording hook."""
        record = self.scratch / "calls.jsonl"
        self.run(_command(f"cat >/dev/null; echo x >> {shlex.quote(str(record))}")(self.scratch), True)
        return len(record.read_text().splitlines())

    def close(self) -> None:
        if self.floor is not None:
            self.floor.terminate()
            self.floor.wait(30)
        if self.collector is not None:
            self.collector.terminate()
            self.collector.wait(30)
        self.api.close()


def measure(calls: int, rounds: int, only: list[str] | None = None) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="gzia-cchooks-", dir="/tmp"))
    bench = Bench(scratch, calls)
    try:
        bench.start_collector()
        bench.start_floor()
        hook_calls = bench.hook_calls()
        chosen = {name: VARIANTS[name] for name in VARIANTS if only is None or name in {"none", *only}}
        settings = {name: (make(scratch) if make else None, up) for name, (make, up) in chosen.items()}
        walls: dict[str, list[float]] = {name: [] for name in chosen}
        for _ in range(rounds):
            for name, (hooks, up) in settings.items():
                walls[name].append(bench.run(hooks, up))
    finally:
        bench.close()
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    # SessionStart fires once per run; the http variants leave it out.
    calls_of = {name: hook_calls - 1 if "http" in name else hook_calls for name in medians}
    added = {name: (medians[name] - medians["none"]) / calls_of[name] * 1000 for name in medians}
    over_floor = {n: added[n] - added["true"] for n in added if n.startswith("gz-ia") and "true" in added}
    report: dict[str, Any] = {
        "tool_calls": calls,
        "hook_calls_per_run": hook_calls,
        "rounds": rounds,
        "load_average": os.getloadavg()[0],
        "median_wall_s": medians,
        "added_ms_per_hook_call": added,
        "gz_ia_over_true_floor_ms": over_floor,
        "walls_s": walls,
    }
    if "gz-ia up" in added and "gz-ia down" in added and added["gz-ia up"] > 0:
        report["down_over_up"] = added["gz-ia down"] / added["gz-ia up"]
    if "http floor" in walls:
        # What the bound is about: a tool call's cost over Claude Code's own floor for a hook (an
        # http hook answered at once), from each round's pair of runs (they ran in the same minutes).
        report["over_http_floor_ms_per_tool_call"] = {
            name: statistics.median(a - b for a, b in zip(walls[name], walls["http floor"], strict=True)) / calls * 1000
            for name in walls
            if name.startswith("gz-ia") or name == "true"
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="tool calls per run (one per turn)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each variant, interleaved")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument("--only", nargs="+", choices=list(VARIANTS), help="these variants (and none) alone")
    args = parser.parse_args()
    report = measure(args.calls, args.rounds, args.only)
    print(f"{report['hook_calls_per_run']} hook calls per run, {args.rounds} rounds, load {report['load_average']:.1f}")
    for name, wall in report["median_wall_s"].items():
        print(
            f"  {name:<16} median {wall:6.2f} s   added per hook call {report['added_ms_per_hook_call'][name]:7.1f} ms"
        )
    for name, over in report["gz_ia_over_true_floor_ms"].items():
        print(f"  {name} over the `true` floor: {over:.1f} ms per hook call")
    if "down_over_up" in report:
        print(f"  gz-ia added cost, collector down / up: {report['down_over_up']:.2f}x")
    for name, over in report.get("over_http_floor_ms_per_tool_call", {}).items():
        print(f"  {name} over the http floor, paired by round: {over:.1f} ms per tool call")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
