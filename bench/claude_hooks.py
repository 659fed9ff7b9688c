"""What gz-ia's hooks add to a real Claude Code run, per hook call, against the same run without them.

The real Claude Code (installed by scripts/agents.sh) runs ``claude -p`` against the fake Anthropic
API of the tests (``tests/fixtures/model_apis/anthropic.py``), scripted to make ``--calls`` tool
calls one turn after another (a Read each: one call per turn, so every hook is on the run's critical
path: Claude Code waits for each). The variants, interleaved round by round so that a busy machine
slows them alike, each with a fresh HOME and the same hook events installed:

* ``none``: no hooks (the baseline);
* ``true``: a ``true`` command hook (Claude Code's own cost of a command hook: the floor);
* ``gz-ia up``: ``gz-ia hook claude-code`` as ``gz-ia install claude-code`` writes it, from a
  user's install (wheels, compiled bytecode, as ``bench/_cli_cost.py`` builds it), with a collector
  running;
* ``gz-ia down``: the same with no collector (every event spooled).

The HTTP hook variants (an ``http`` hook answered at once, and gz-ia's HTTP hook) go in
:data:`VARIANTS` beside these: a variant is a name and the ``hooks`` settings it installs.

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

from gz_ia.collector.integrations.claude_code.settings import HOOK_EVENTS, TOOL_EVENTS

from ._cli_cost import user_install

GZ_IA = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()"]
MARKER = "BENCH-HOOKS"


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
    command = f"{shlex.quote(str(user_install() / 'gz-ia'))} hook claude-code"
    subprocess.run([*GZ_IA, "install", "claude-code", "--user", "--command", command],
                   env={**os.environ, "HOME": str(home)}, check=True, capture_output=True)  # fmt: skip
    hooks: dict[str, Any] = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    return hooks


VARIANTS: dict[str, tuple[Callable[[Path], dict[str, Any]] | None, bool]] = {
    "none": (None, True),
    "true": (_command("true"), True),
    "gz-ia up": (_gz_ia, True),
    "gz-ia down": (_gz_ia, False),
    # "http floor" / "gz-ia http": an http hook answered at once, gz-ia's HTTP hook (the HTTP hooks work).
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
            [sys.executable, "-m", "gz_ia.collector", "--socket", str(self.socket), "--metrics-address", "off"],
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

    def run(self, hooks: dict[str, Any] | None, up: bool) -> float:
        """One ``claude -p`` run with these hooks; its wall time in seconds."""
        self.runs += 1
        home = self.scratch / f"home{self.runs}"
        (home / ".claude").mkdir(parents=True)
        (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks} if hooks else {}))
        shutil.rmtree(self.scratch / "spool-down", ignore_errors=True)  # each down run starts unspooled
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
        if self.collector is not None:
            self.collector.terminate()
            self.collector.wait(30)
        self.api.close()


def measure(calls: int, rounds: int) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="gzia-cchooks-", dir="/tmp"))
    bench = Bench(scratch, calls)
    try:
        bench.start_collector()
        hook_calls = bench.hook_calls()
        settings = {name: (make(scratch) if make else None, up) for name, (make, up) in VARIANTS.items()}
        walls: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(rounds):
            for name, (hooks, up) in settings.items():
                walls[name].append(bench.run(hooks, up))
    finally:
        bench.close()
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    added = {name: (medians[name] - medians["none"]) / hook_calls * 1000 for name in medians}
    report: dict[str, Any] = {
        "tool_calls": calls,
        "hook_calls_per_run": hook_calls,
        "rounds": rounds,
        "load_average": os.getloadavg()[0],
        "median_wall_s": medians,
        "added_ms_per_hook_call": added,
        "gz_ia_over_true_floor_ms": {n: added[n] - added["true"] for n in added if n.startswith("gz-ia")},
        "down_over_up": added["gz-ia down"] / added["gz-ia up"] if added["gz-ia up"] > 0 else None,
        "walls_s": walls,
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20, help="tool calls per run (one per turn)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each variant, interleaved")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args()
    report = measure(args.calls, args.rounds)
    print(f"{report['hook_calls_per_run']} hook calls per run, {args.rounds} rounds, load {report['load_average']:.1f}")
    for name, wall in report["median_wall_s"].items():
        print(
            f"  {name:<12} median {wall:6.2f} s   added per hook call {report['added_ms_per_hook_call'][name]:7.1f} ms"
        )
    for name, over in report["gz_ia_over_true_floor_ms"].items():
        print(f"  {name} over the `true` floor: {over:.1f} ms per hook call")
    print(f"  gz-ia added cost, collector down / up: {report['down_over_up']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
