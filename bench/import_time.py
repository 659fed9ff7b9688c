"""Import cost of the thin client: ``import gz_ia.client`` against ``import logging``.

An agent pays for the client's import once per process, and short-lived agent processes (hooks,
scripts, subagents) pay it often, so it should cost about what the standard library's logging costs:
the target is at most twice ``import logging``.

Both are measured as a user has them: in a fresh virtual environment holding ``./client`` alone and
its one dependency (msgspec), built by this module as ``scripts/test-client`` builds its own. Not in
the development workspace, whose extra packages change what msgspec imports (``typing_extensions``,
when it is installed). Bytecode is compiled at install and before the first timing.

Each measurement is a fresh interpreter that times the one import statement with
``time.perf_counter`` (interpreter start-up excluded); the statements are run in turn, ``--runs``
times, and the medians compared. ``--breakdown`` prints the largest cumulative entries of
``python -X importtime`` for ``import gz_ia.client`` in that environment.

Usage::

    uv run python -m bench.import_time [--runs 30] [--breakdown] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from ._common import REPO

STATEMENTS: Final = {
    "logging": "import logging",
    "gz_ia.client, as installed alone": "import gz_ia.client",
    "Client and session, as installed alone": "from gz_ia.client import Client, session",
}
"""The package loads each public name on first use, so the second line is what ``import gz_ia.client``
alone costs and the third what an agent pays before its first event (the scopes, the client, the
schema and msgspec; the sender thread's modules come with the first ``Client()``)."""
TARGET_RATIO: Final = 2.0


def _environment() -> dict[str, str]:
    # Bytecode written and read, as on a user's machine; nothing of the workspace on the path.
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env.pop("VIRTUAL_ENV", None)
    return env


@contextlib.contextmanager
def client_alone(client: Path = REPO / "client") -> Iterator[Path]:
    """Yield the interpreter of a fresh virtual environment with ``client`` (this tree's) installed alone."""
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    with tempfile.TemporaryDirectory(prefix="gz-ia-import-") as scratch:
        venv = Path(scratch) / "venv"
        env = _environment()
        subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], env=env, check=True)
        subprocess.run(
            [uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", str(venv / "bin" / "python"),
             str(client)],
            env=env, check=True,
        )  # fmt: skip
        python = venv / "bin" / "python"
        probe = "import importlib.util as u, sys; sys.exit(u.find_spec('gz_ia.collector') is not None)"
        subprocess.run([str(python), "-c", probe], env=env, check=True, cwd=scratch)
        for statement in STATEMENTS.values():  # writes any bytecode still missing
            subprocess.run([str(python), "-c", statement], env=env, check=True, cwd=scratch)
        yield python


def time_import(python: Path, statement: str) -> float:
    """Seconds one fresh interpreter takes to run ``statement``."""
    code = f"import time\nstart = time.perf_counter()\n{statement}\nprint(time.perf_counter() - start)\n"
    result = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True, env=_environment(), cwd=python.parent
    )
    return float(result.stdout)


def breakdown(python: Path, limit: int = 15) -> list[tuple[str, float]]:
    """The largest cumulative import times (seconds) under ``import gz_ia.client``."""
    result = subprocess.run(
        [str(python), "-X", "importtime", "-c", "import gz_ia.client"],
        capture_output=True, text=True, check=True, env=_environment(), cwd=python.parent,
    )  # fmt: skip
    entries: list[tuple[str, float]] = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        entries.append((name.rstrip(), int(cumulative) / 1e6))
    return sorted(entries, key=lambda entry: entry[1], reverse=True)[:limit]


def measure(runs: int, python: Path | None = None) -> dict[str, float]:
    """Median seconds of each statement, the statements interleaved run by run, in ``python`` (by
    default a fresh environment with the client alone, built for this call)."""
    if python is None:
        with client_alone() as alone:
            return measure(runs, alone)
    samples: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    for _ in range(runs):
        for name, statement in STATEMENTS.items():
            samples[name].append(time_import(python, statement))
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    """Measure, print a table, and exit 1 when the client's import costs more than the target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=30, help="fresh interpreters per statement")
    parser.add_argument("--breakdown", action="store_true", help="print python -X importtime's largest entries")
    parser.add_argument("--json", help="also write the figures to this file")
    options = parser.parse_args(argv)
    with client_alone() as python:
        medians = measure(options.runs, python)
        print(f"import time in a fresh virtual environment with ./client alone (and msgspec), {sys.version.split()[0]}")
        print(f"median of {options.runs} fresh interpreters each")
        base = medians["logging"]
        print(f"{'statement':<40} {'ms':>8} {'x logging':>10}")
        for name, seconds in medians.items():
            print(f"{name:<40} {seconds * 1e3:8.2f} {seconds / base:10.2f}")
        ratio = medians["gz_ia.client, as installed alone"] / base
        print(f"target: import gz_ia.client (installed alone) <= {TARGET_RATIO:g}x import logging: {ratio:.2f}x")
        if options.breakdown:
            print("\nlargest cumulative entries of python -X importtime -c 'import gz_ia.client' (ms):")
            for name, seconds in breakdown(python):
                print(f"{seconds * 1e3:8.2f}  {name}")
    if options.json:
        figures = {"runs": options.runs, "seconds": medians, "ratio": ratio, "target": TARGET_RATIO}
        Path(options.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
