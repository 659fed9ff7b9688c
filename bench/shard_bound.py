"""What sharding could reach: independent collectors, each holding a share of the sessions.

The collector does all its per-event work on one thread, and at 10,000 sessions that one core is
what stands between it and twice syslog-ng (docs/performance.md, "What limits it now"). Sharding by
session (one process per share of the sessions, each with its own writer) is the step that uses the
second core. This measures its upper bound, as it was measured before ``shards`` was built:
``--shards`` independent collectors, each on its own socket and root, each fed by its share of the 8
senders (so each holds a disjoint share of the sessions), against one collector and syslog-ng,
alternating run by run in the same minutes. No front copies the batches here, so the real sharded
collector (``shards = 2``, measured by ``bench/run``) reaches less. It runs in the same rounds here
(``gz-ia shards=N``), so the two can be compared minute for minute.

Usage (installs the peers like ``bench/run``; about 40 s per round and system at 1,000,000 events)::

    uv run python -m bench.shard_bound                      # 10,000 sessions, 2 shards, 3 rounds
    uv run python -m bench.shard_bound --sessions 100 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from ._common import creation_cost, removals_deferred, scratch_dir
from ._ingest import IngestRun, run_ingest, run_verified, share, verify
from ._load import Load, build_load
from ._peers import ensure_peers
from ._systems import Ours, SyslogNg


def _ours(workdir: Path, load: Load, shards: int) -> IngestRun:
    systems = [Ours(workdir / f"shard-{part}") for part in range(shards)]
    started: list[Ours] = []
    try:
        for system in systems:
            system.workdir.mkdir()
            system.start()
            started.append(system)
        result = run_ingest(systems, load, mode="frames")
    finally:
        for system in started:
            system.stop()
    for part, system in enumerate(systems):
        verify(system, share(load, part, shards), with_seq=True)
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print each run, the medians and the ratios to syslog-ng."""
    parser = argparse.ArgumentParser(prog="python -m bench.shard_bound", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--shards", type=int, default=2, help="collectors in the sharded configuration (divides 8)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    load = build_load(args.events, args.sessions, 8)
    sharded = f"gz-ia shards={args.shards}"
    names = ("syslog-ng", "gz-ia", sharded, f"gz-ia x{args.shards}")
    rates: dict[str, list[float]] = {name: [] for name in names}
    with removals_deferred():
        print(f"creating a file in /tmp takes {creation_cost() * 1e6:.0f} µs", flush=True)
        for round_ in range(args.rounds):
            for name in names:
                with scratch_dir("gzs") as workdir:
                    os.sync()  # the previous run's files are still being written back
                    if name == "syslog-ng":
                        result = run_verified(SyslogNg(workdir, ensure_peers()), load, mode="json")
                    elif name == sharded:
                        result = run_verified(Ours(workdir, shards=args.shards), load)
                    else:
                        result = _ours(workdir, load, 1 if name == "gz-ia" else args.shards)
                rates[name].append(result.events_per_second)
                print(
                    f"round {round_ + 1} {name:<16} {result.events_per_second:>10,.0f} events/s, "
                    f"{result.collector_cpu / result.events * 1e6:.1f} µs CPU/event, {result.cores:.2f} cores",
                    flush=True,
                )
    peer = statistics.median(rates["syslog-ng"])
    print(f"\n{args.events:,} events over {args.sessions:,} sessions, medians of {args.rounds}:")
    for name in names:
        median = statistics.median(rates[name])
        print(f"  {name:<16} {median:>10,.0f} events/s  {median / peer:.2f} x syslog-ng")
    return 0


if __name__ == "__main__":
    sys.exit(main())
