"""Import cost of the thin client: ``import gz_ia.client`` against ``import logging``.

An agent pays for the client's import once per process, and short-lived agent processes (hooks,
scripts, subagents) pay it often, so it should cost about what the standard library's logging costs:
the target is at most twice ``import logging``.

Each measurement is a fresh interpreter that times the one import statement with
``time.perf_counter`` (interpreter start-up excluded); the statements are run in turn, ``--runs``
times, and the medians compared. ``as installed alone`` hides ``typing_extensions``, which msgspec
imports when present: a development environment has it (for the type checkers), an install of
``gz-ia-client`` alone does not. ``--breakdown`` prints the largest cumulative entries of
``python -X importtime`` for ``import gz_ia.client``.

Usage::

    uv run python -m bench.import_time [--runs 30] [--breakdown] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Final

_HIDE_TYPING_EXTENSIONS: Final = "import sys; sys.modules['typing_extensions'] = None\n"
STATEMENTS: Final = {
    "logging": ("", "import logging"),
    "gz_ia.client": ("", "import gz_ia.client"),
    "gz_ia.client, as installed alone": (_HIDE_TYPING_EXTENSIONS, "import gz_ia.client"),
}
TARGET_RATIO: Final = 2.0


def time_import(setup: str, statement: str) -> float:
    """Seconds one fresh interpreter takes to run ``statement`` (after ``setup``)."""
    code = f"{setup}import time\nstart = time.perf_counter()\n{statement}\nprint(time.perf_counter() - start)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(result.stdout)


def breakdown(limit: int = 15) -> list[tuple[str, float]]:
    """The largest cumulative import times (seconds) under ``import gz_ia.client``."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import gz_ia.client"], capture_output=True, text=True, check=True
    )
    entries: list[tuple[str, float]] = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        entries.append((name.rstrip(), int(cumulative) / 1e6))
    return sorted(entries, key=lambda entry: entry[1], reverse=True)[:limit]


def measure(runs: int) -> dict[str, float]:
    """Median seconds of each statement, the statements interleaved run by run."""
    samples: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    for _ in range(runs):
        for name, (setup, statement) in STATEMENTS.items():
            samples[name].append(time_import(setup, statement))
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    """Measure, print a table, and exit 1 when the client's import costs more than the target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=30, help="fresh interpreters per statement")
    parser.add_argument("--breakdown", action="store_true", help="print python -X importtime's largest entries")
    parser.add_argument("--json", help="also write the figures to this file")
    options = parser.parse_args(argv)
    medians = measure(options.runs)
    base = medians["logging"]
    print(f"import time, median of {options.runs} fresh interpreters each")
    print(f"{'statement':<36} {'ms':>8} {'x logging':>10}")
    for name, seconds in medians.items():
        print(f"{name:<36} {seconds * 1e3:8.2f} {seconds / base:10.2f}")
    ratio = medians["gz_ia.client, as installed alone"] / base
    print(f"target: import gz_ia.client (installed alone) <= {TARGET_RATIO:g}x import logging: {ratio:.2f}x")
    if options.breakdown:
        print("\nlargest cumulative entries of python -X importtime -c 'import gz_ia.client' (ms):")
        for name, seconds in breakdown():
            print(f"{seconds * 1e3:8.2f}  {name}")
    if options.json:
        figures = {"runs": options.runs, "seconds": medians, "ratio": ratio, "target": TARGET_RATIO}
        Path(options.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
