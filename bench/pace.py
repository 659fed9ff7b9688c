"""What gz-ia costs an agent at an agent's pace: the same loop with and without gz-ia, as a ratio.

Agents do not log in a tight loop: they do some work, log, and wait. A cost measured back to back
(events that share one wake-up of the sender thread and one frame) says little about what one event
costs when it goes out alone. This benchmark runs one loop of steps, each doing a fixed amount of CPU
work or a sleep (see ``PACES``), inside one action scope (READ on entry, FINISH on exit) or followed
by one ``log()``, in a fresh process per variant: without gz-ia, with it disabled
(``GZ_IA_DISABLED=1``) and with it. For each pace it reports:

* the process CPU per step (``time.process_time``: every thread, the sender's included) with gz-ia
  against the same loop without it, as a ratio, and the same for the disabled client;
* the agent CPU per event that gz-ia adds ((with - without) / events), and the calling thread's share;
* for the sleeping paces, where the work itself takes almost no CPU, only the second figure matters.

Run ``python -m bench.pace`` (``--steps``, ``--rounds``, ``--json FILE``) from the workspace
(``uv run python -m bench.pace``); ``bench/run --only pace`` runs it in the suite. Each round runs every
variant once, in turn, against one collector on a private socket, so that drift hits all alike;
the figures are the medians over rounds. The busy loop is calibrated once, in this process, and the
same number of iterations is given to every variant.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from ._common import scratch_dir, socket_accepts, stop_process, wait_until

PACES: Final = {
    "work-100us": ("work", 100e-6, "scope"),
    "work-1ms": ("work", 1e-3, "scope"),
    "sleep-0.5ms": ("sleep", 0.5e-3, "scope"),
    "log-every-5ms": ("sleep", 5e-3, "log"),
}
"""Each pace: what a step does (CPU work or a sleep), for how long, and how it logs: ``scope``, one
action scope around the work (READ and FINISH, two events); ``log``, one ``log()`` after it."""
_EVENTS_PER_STEP: Final = {"scope": 2, "log": 1}
MODES: Final = ("none", "null", "gz-ia")
"""Without gz-ia; with it disabled (``GZ_IA_DISABLED=1``: the null client's scopes); with it."""

_CHILD: Final = r"""
import json, os, sys, time
mode, kind, amount, steps, out, shape = sys.argv[1:7]
amount, steps = float(amount), int(steps)
# For "work", amount is the busy loop's iterations (calibrated once by the parent, the same for
# every variant); for "sleep", seconds.

iterations = int(amount) if kind == "work" else 0

def work():
    if kind == "work":
        x = 0
        for i in range(iterations):
            x += i * i
    else:
        time.sleep(amount)

if mode == "null":
    os.environ["GZ_IA_DISABLED"] = "1"
if mode in ("gz-ia", "null"):
    from gz_ia import client as gz
    scope = gz.session(agent="bench", role="pace")
    session = scope.__enter__()
    if shape == "scope":
        def step(n):
            with session.action("step"):
                work()
    else:
        def step(n):
            work()
            session.log("step", "READ")
else:
    def step(n):
        work()

for n in range(min(steps // 10, 200)):  # warm-up: imports, the first connection, caches
    step(n)
if mode == "gz-ia":
    session.client.flush(10.0)
cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
for n in range(steps):
    step(n)
cpu, thread, wall = time.process_time() - cpu0, time.thread_time() - thread0, time.perf_counter() - wall0
result = {"cpu": cpu, "thread": thread, "wall": wall, "steps": steps}
if mode == "gz-ia":
    stats = session.client.stats()
    result.update(accepted=stats.accepted, dropped=stats.dropped, spooled=getattr(stats, "spooled", 0))
    scope.__exit__(None, None, None)
with open(out, "w") as f:
    json.dump(result, f)
"""


def _calibrate(seconds: float) -> int:
    """Iterations of the children's busy loop that take about ``seconds`` of CPU here."""
    n = 1000
    while True:
        began = time.process_time()
        x = 0
        for i in range(n):
            x += i * i
        took = time.process_time() - began
        if took > 0.2:
            return max(1, int(n * seconds / took))
        n *= 2


def _run_child(
    mode: str, pace: tuple[str, float, str], amount: float, steps: int, env: dict[str, str], out: Path
) -> dict[str, float]:
    kind, _, shape = pace
    argv = [sys.executable, "-c", _CHILD, mode, kind, str(amount), str(steps), str(out), shape]
    subprocess.run(argv, env=env, check=True, timeout=600)
    result: dict[str, float] = json.loads(out.read_text())
    return result


def measure(steps: int, rounds: int, paces: list[str]) -> dict[str, dict[str, float]]:
    """Run every pace with and without gz-ia, ``rounds`` times in turn; return the medians per pace."""
    with scratch_dir("gzpace") as work:
        sock, root = work / "collector.sock", work / "ws" / ".harness"
        root.mkdir(parents=True)
        env = {
            **os.environ,
            "GZ_IA_SOCKET": str(sock),
            "GZ_IA_ROOT": str(root),
            "GZ_IA_SPOOL_DIR": str(work / "spool"),
            "XDG_CONFIG_HOME": str(work / "config"),
            "XDG_STATE_HOME": str(work / "state"),
        }
        env.pop("GZ_IA_DISABLED", None)
        argv = [sys.executable, "-m", "gz_ia.collector", "--socket", str(sock), "--metrics-address", "off",
                "--log-level", "warning"]  # fmt: skip
        collector = subprocess.Popen(argv, env=env)
        try:
            wait_until(lambda: socket_accepts(sock), 60, "the collector")
            runs: dict[str, dict[str, list[dict[str, float]]]] = {p: {m: [] for m in MODES} for p in paces}
            amounts = {
                pace: float(_calibrate(seconds)) if kind == "work" else seconds
                for pace, (kind, seconds, _) in PACES.items()
                if pace in paces
            }
            for _ in range(rounds):
                for pace in paces:
                    for mode in MODES:
                        result = _run_child(mode, PACES[pace], amounts[pace], steps, env, work / "out.json")
                        runs[pace][mode].append(result)
        finally:
            stop_process(collector)
    results: dict[str, dict[str, float]] = {}
    for pace, modes in runs.items():
        per_step = {mode: statistics.median(r["cpu"] for r in modes[mode]) / steps for mode in MODES}
        thread = {mode: statistics.median(r["thread"] for r in modes[mode]) / steps for mode in MODES}
        wall = {mode: statistics.median(r["wall"] for r in modes[mode]) / steps for mode in MODES}
        without = per_step["none"]
        events = _EVENTS_PER_STEP[PACES[pace][2]]
        results[pace] = {
            "cpu_per_step_without_us": without * 1e6,
            "cpu_per_step_with_us": per_step["gz-ia"] * 1e6,
            "cpu_ratio": per_step["gz-ia"] / without if without else float("nan"),
            "added_cpu_per_event_us": (per_step["gz-ia"] - without) / events * 1e6,
            "added_thread_cpu_per_event_us": (thread["gz-ia"] - thread["none"]) / events * 1e6,
            "null_cpu_ratio": per_step["null"] / without if without else float("nan"),
            "null_added_cpu_per_event_us": (per_step["null"] - without) / events * 1e6,
            "wall_ratio": wall["gz-ia"] / wall["none"] if wall["none"] else float("nan"),
            "dropped": sum(r.get("dropped", 0) for r in modes["gz-ia"]),
        }
    return results


def main() -> None:
    """Measure and print a table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pace", action="append", choices=list(PACES), help="one pace (repeatable); default all")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    results = measure(args.steps, args.rounds, args.pace or list(PACES))
    print(
        f"{'pace':<12} {'CPU/step without':>17} {'with gz-ia':>11} {'ratio':>7} {'added/event':>12}"
        f" {'(agent thread)':>14} {'disabled: ratio':>16} {'added/event':>12}"
    )
    for pace, r in results.items():
        print(
            f"{pace:<12} {r['cpu_per_step_without_us']:>14.1f} µs {r['cpu_per_step_with_us']:>8.1f} µs "
            f"{r['cpu_ratio']:>7.3f} {r['added_cpu_per_event_us']:>9.1f} µs"
            f" {r['added_thread_cpu_per_event_us']:>11.1f} µs"
            f" {r['null_cpu_ratio']:>16.3f} {r['null_added_cpu_per_event_us']:>9.1f} µs"
        )
    print(f"({args.rounds} rounds of {args.steps} steps, {time.perf_counter() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
