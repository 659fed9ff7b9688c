"""Time this work tree's collector against an earlier commit's, alternating run by run.

On this shared 2-core machine the same code ingests up to 1.7x faster or slower from one minute to
the next (docs/performance.md), wider than most changes. Runs of the old and the new collector that
alternate in the same minutes see the same machine, so their medians and their pairs tell a change
apart where separate runs of the suite cannot. The earlier commit is checked out into a temporary
``git worktree`` and put first on the collector's ``PYTHONPATH`` (same virtual environment, so the
commit must need the same dependencies). Each run is the suite's ingest from pre-encoded frames,
verified like the suite's.

Usage::

    uv run python -m bench.compare ba46b50                       # 10,000 sessions, 4 pairs
    uv run python -m bench.compare 2da6014 --sessions 100 --pairs 6
    uv run python -m bench.compare 2da6014 --shards 2             # a front and two share processes
    uv run python -m bench.compare . --before-env GZ_IA_REDACTION_ENABLED=false   # this tree, a setting off

``.`` as the commit runs this tree on both sides: with ``--before-env`` that measures what a setting
costs (redaction, above), in the same minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ._common import REPO, BenchError, creation_cost, removals_deferred, scratch_dir
from ._ingest import run_verified
from ._load import build_load
from ._systems import Ours

_BEFORE = "before"
_NOW = "now"


def _loaded_from(env: dict[str, str]) -> Path:
    """Where the collector package is imported from under ``env`` (proves which code runs)."""
    probe = "import gz_ia.collector as c; print(c.__file__)"
    result = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    return Path(result.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    """Run the pairs and print each run, the medians and the ratio of each pair."""
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="the earlier commit (anything git rev-parse accepts)")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--shards", type=int, default=1, help="the collectors' shards setting (default 1)")
    parser.add_argument(
        "--before-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of the 'before' collector only (repeatable)",
    )
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.before_env)
    if args.commit == ".":
        return _compare(args, settings)
    with tempfile.TemporaryDirectory(prefix="gz-ia-compare-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), args.commit], cwd=REPO, check=True, capture_output=True
        )
        try:
            before = {"PYTHONPATH": f"{tree / 'client' / 'src'}:{tree / 'collector' / 'src'}"}
            if not _loaded_from(before).is_relative_to(tree):
                raise BenchError(f"the collector of {args.commit} is not the one imported with {before}")
            return _compare(args, {**before, **settings})
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)


def _compare(args: argparse.Namespace, before: dict[str, str]) -> int:
    load = build_load(args.events, args.sessions, 8, with_json=False)
    rates: dict[str, list[float]] = {_BEFORE: [], _NOW: []}
    cpu: dict[str, list[float]] = {_BEFORE: [], _NOW: []}
    with removals_deferred():
        print(f"creating a file in /tmp takes {creation_cost() * 1e6:.0f} µs", flush=True)
        for pair in range(args.pairs):
            for name in (_BEFORE, _NOW) if pair % 2 == 0 else (_NOW, _BEFORE):
                with scratch_dir("gzab") as workdir:
                    os.sync()  # the previous run's files are still being written back
                    ours = Ours(workdir, env=before if name == _BEFORE else None, shards=args.shards)
                    result = run_verified(ours, load)
                rates[name].append(result.events_per_second)
                cpu[name].append(result.collector_cpu / result.events * 1e6)
                print(
                    f"pair {pair + 1} {name:<6} {result.events_per_second:>10,.0f} events/s, "
                    f"{cpu[name][-1]:.2f} µs CPU/event",
                    flush=True,
                )
    print(f"\n{args.events:,} events over {args.sessions:,} sessions, medians of {args.pairs}:")
    before_label = args.commit if args.commit != "." else "this tree, " + " ".join(args.before_env)
    for name, label in ((_BEFORE, before_label), (_NOW, "this tree")):
        print(
            f"  {label:<12} {statistics.median(rates[name]):>10,.0f} events/s, "
            f"{statistics.median(cpu[name]):.2f} µs CPU/event"
        )
    ratios = ", ".join(f"{now / old:.2f}" for now, old in zip(rates[_NOW], rates[_BEFORE], strict=True))
    print(f"  now / before, pair by pair: {ratios}")
    cpu_ratios = ", ".join(f"{now / old:.2f}" for now, old in zip(cpu[_NOW], cpu[_BEFORE], strict=True))
    print(f"  CPU per event, now / before, pair by pair: {cpu_ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
