"""What gz-ia costs an agent at an agent's pace: the same loop with and without gz-ia, as a ratio.

Agents do not log in a tight loop: they do some work, log, and wait. A cost measured back to back
(events that share one wake-up of the sender thread and one frame) says little about what one event
costs when it goes out alone, after a sleep, with the CPU's caches cold. This benchmark runs a loop
of steps, each doing a fixed amount of CPU work or a sleep (see ``PACES``), inside one action scope
(READ on entry, FINISH on exit) or followed by one ``log()``, in four variants: without gz-ia, with
the null client (what ``GZ_IA_DISABLED=1`` gives), the floor (each event's fields handed to a thread
that takes them once per linger period, and nothing more: the least any design that delivers from a
background thread costs) and with gz-ia delivering to a collector on a private socket. For each
pace it reports:

* the process CPU per step (``time.process_time``: every thread, the sender's included) with gz-ia
  against the same loop without it, as a ratio, and the same for the null client;
* the agent CPU per event that gz-ia adds ((with - without) / events), the calling thread's share,
  and what the null client and the floor add;
* for the sleeping paces, where the work itself takes almost no CPU, only the second figure matters.

The variants run in one process, in blocks of about 0.5 s taken in turn (``--blocks`` of
each), so that what drifts (the CPU's frequency, the machine's other work) hits them alike; the
figures are medians over blocks of the calling thread's CPU; the sender thread's CPU (the process's
beyond the calling thread's and the floor's thread's) is added to gz-ia's, the floor's thread's to
the floor's. Run ``uv run python -m bench.pace``
(``--pace NAME``, ``--block-seconds S``, ``--json FILE``); ``bench/run --only pace`` runs it in the suite.
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
from typing import Any, Final

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
MODES: Final = ("none", "null", "floor", "gz-ia")
"""Without gz-ia; with it disabled (the null client's scopes, what ``GZ_IA_DISABLED=1`` gives); the
floor (each call's fields handed to a thread, and nothing more: see the child's ``hand_over``); with it."""

BLOCK_SECONDS: Final = 0.5
"""About how long a block of one variant lasts by default: several times the client's default linger,
so that a block of gz-ia sends about the batches the same pace would send without the other
variants. Each block of gz-ia is a burst, though: its first event wakes the sender thread, whose
last linger period ends empty once the block is over. Longer blocks (``--block-seconds``) come
closer to a pace kept up for minutes, with fewer blocks in the same time to even out the drift."""

_CHILD: Final = r"""
import json, sys, time
kind, amount, steps, blocks, out, shape = sys.argv[1:7]
amount, steps, blocks = float(amount), int(steps), int(blocks)

def calibrate(seconds):
    # Iterations of the busy loop below that take about `seconds` of CPU in this process.
    n = 1000
    while True:
        began = time.thread_time()
        x = 0
        for i in range(n):
            x += i * i
        took = time.thread_time() - began
        if took > 0.2:
            return max(1, int(n * seconds / took))
        n *= 2

iterations = calibrate(amount) if kind == "work" else 0

def work():
    if kind == "work":
        x = 0
        for i in range(iterations):
            x += i * i
    else:
        time.sleep(amount)

from gz_ia import client as gz

# The floor: the least a design that hands each call to a thread can cost. A step appends the
# call's fields, as a tuple, to a deque that a thread empties once per linger period; the first
# call after an empty period wakes that thread (as gz-ia's first event after a quiet spell wakes
# its sender). Nothing is encoded, framed or sent.
import collections, threading
floor_inbox, floor_idle, floor_armed = collections.deque(), [True], threading.Event()
floor_stop, linger = [False], gz.env.linger()

def drain():
    while True:
        floor_armed.wait()
        if floor_stop[0]:
            break
        time.sleep(linger)
        if floor_inbox:
            for _ in range(len(floor_inbox)):
                floor_inbox.popleft()
        else:
            floor_armed.clear()
            floor_idle[0] = True

floor_thread = threading.Thread(target=drain, daemon=True)
floor_thread.start()
floor_clock = time.pthread_getcpuclockid(floor_thread.ident)

def hand_over(stage):
    floor_inbox.append((time.time_ns(), "s-1", "step", stage, "OK", "bench", None, "pace", None, None, None,
                        None, None))
    if floor_idle[0]:
        floor_idle[0] = False
        floor_armed.set()

def stepper(mode):
    if mode == "none":
        return work
    if mode == "floor":
        if shape == "scope":
            def step():
                hand_over("READ")
                work()
                hand_over("FINISH")
        else:
            def step():
                work()
                hand_over("READ")
        return step
    client = gz.NullClient() if mode == "null" else gz.get_client()
    session = gz.session(agent="bench", role="pace", client=client)
    if shape == "scope":
        def step():
            with session.action("step"):
                work()
    else:
        def step():
            work()
            session.log("step", "READ")
    return step

steppers = {mode: stepper(mode) for mode in ("none", "null", "floor", "gz-ia")}
for mode, step in steppers.items():  # warm-up: imports, the first connection, caches
    for _ in range(steps):
        step()
gz.get_client().flush(10.0)
# Short blocks of each variant in turn, in one process: what drifts (the CPU's frequency, the
# machine's other work) hits all of them alike. Each block counts the calling thread's CPU; the
# floor's thread is counted on its own clock, and the rest of the process's CPU is gz-ia's sender's.
per_step = {mode: [] for mode in steppers}
process0, main0, floor0 = time.process_time(), time.thread_time(), time.clock_gettime(floor_clock)
for block in range(blocks):
    for mode, step in steppers.items():
        began = time.thread_time()
        for _ in range(steps):
            step()
        per_step[mode].append((time.thread_time() - began) / steps)
client = gz.get_client()
client.flush(30.0)
floor_thread_cpu = time.clock_gettime(floor_clock) - floor0
# The process's CPU beyond the calling thread's and the floor's thread is the sender's.
other_threads = (time.process_time() - process0) - (time.thread_time() - main0) - floor_thread_cpu
floor_stop[0] = True
floor_armed.set()
stats = client.stats()
with open(out, "w") as f:
    json.dump({"per_step": per_step, "sender": other_threads, "floor_thread": floor_thread_cpu,
               "gz_ia_steps": steps * blocks, "accepted": stats.accepted, "dropped": stats.dropped}, f)
"""


def measure(blocks: int, paces: list[str], block_seconds: float = BLOCK_SECONDS) -> dict[str, dict[str, float]]:
    """Run each pace in one process, ``blocks`` short blocks of each variant in turn; return the
    medians over blocks, per step and per event."""
    results: dict[str, dict[str, float]] = {}
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
                "--http-address", "off", "--log-level", "warning"]  # fmt: skip
        collector = subprocess.Popen(argv, env=env)
        try:
            wait_until(lambda: socket_accepts(sock), 60, "the collector")
            for pace in paces:
                kind, seconds, shape = PACES[pace]
                steps = max(1, round(block_seconds / seconds))
                out = work / f"{pace}.json"
                child = [sys.executable, "-c", _CHILD, kind, str(seconds), str(steps), str(blocks), str(out), shape]
                subprocess.run(child, env=env, check=True, timeout=3600)
                results[pace] = _figures(json.loads(out.read_text()), _EVENTS_PER_STEP[shape])
        finally:
            stop_process(collector)
    return results


def _figures(run: dict[str, Any], events: int) -> dict[str, float]:
    without, null, floor_thread, thread = (float(statistics.median(run["per_step"][mode])) for mode in MODES)
    with_ = thread + run["sender"] / run["gz_ia_steps"]
    floor = floor_thread + run["floor_thread"] / run["gz_ia_steps"]
    return {
        "cpu_per_step_without_us": without * 1e6,
        "cpu_per_step_with_us": with_ * 1e6,
        "cpu_ratio": with_ / without if without else float("nan"),
        "added_cpu_per_event_us": (with_ - without) / events * 1e6,
        "added_thread_cpu_per_event_us": (thread - without) / events * 1e6,
        "null_cpu_ratio": null / without if without else float("nan"),
        "null_added_cpu_per_event_us": (null - without) / events * 1e6,
        "floor_added_cpu_per_event_us": (floor - without) / events * 1e6,
        "floor_added_thread_cpu_per_event_us": (floor_thread - without) / events * 1e6,
        "dropped": float(run["dropped"]),
    }


def main() -> None:
    """Measure and print a table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30, help="blocks of each variant, in turn")
    parser.add_argument("--pace", action="append", choices=list(PACES), help="one pace (repeatable); default all")
    parser.add_argument("--block-seconds", type=float, default=BLOCK_SECONDS, help="about how long each block lasts")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    results = measure(args.blocks, args.pace or list(PACES), args.block_seconds)
    print(
        f"{'pace':<12} {'CPU/step without':>17} {'with gz-ia':>11} {'ratio':>7} {'added/event':>12}"
        f" {'(agent thread)':>14} {'disabled: ratio':>16} {'added/event':>12} {'floor: added/event':>19}"
    )
    for pace, r in results.items():
        print(
            f"{pace:<12} {r['cpu_per_step_without_us']:>14.1f} µs {r['cpu_per_step_with_us']:>8.1f} µs "
            f"{r['cpu_ratio']:>7.3f} {r['added_cpu_per_event_us']:>9.1f} µs"
            f" {r['added_thread_cpu_per_event_us']:>11.1f} µs"
            f" {r['null_cpu_ratio']:>16.3f} {r['null_added_cpu_per_event_us']:>9.1f} µs"
            f" {r['floor_added_cpu_per_event_us']:>16.1f} µs"
        )
    print(
        f"({args.blocks} blocks of about {args.block_seconds:g} s per variant, {time.perf_counter() - started:.0f} s)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
