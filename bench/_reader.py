"""Reader figures: ``gz-ia session logs <id> --json`` of a big session against ``cat`` of its files,
and the figures of two scripts this module runs and carries into the report: the last 100 events
(``bench/reader_tail.py``) and ``--seq``, ``--failed`` and a long follower's memory
(``bench/reader_seek.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

from ._common import BENCH, BenchError
from ._systems import Ours

_CLI: Final = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()"]


def session_files(system: Ours, session: str) -> list[Path]:
    """Every segment of ``session`` under the root: active file and archives, torn fragments excluded."""
    return sorted(
        path
        for path in (system.root / "sessions").glob(f"{session}.events*")
        if path.is_file() and not path.is_symlink() and ".torn" not in path.name
    )


def _timed_pipeline(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Run ``argv | wc -l``; return (wall seconds, lines counted)."""
    start = time.monotonic()
    producer = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
    counter = subprocess.run(["wc", "-l"], stdin=producer.stdout, capture_output=True, text=True, check=True)
    assert producer.stdout is not None
    producer.stdout.close()
    if producer.wait() != 0:
        raise BenchError(f"{argv[-4:]} exited with {producer.returncode}")
    return time.monotonic() - start, int(counter.stdout.split()[0])


def dump_vs_cat(system: Ours, session: str, events: int) -> dict[str, float]:
    """Time the ``--json`` dump of ``session`` and ``cat`` of the same files, both into ``wc -l``."""
    import os

    env = {**os.environ, "GZ_IA_SOCKET": str(system.socket), "GZ_IA_ROOT": str(system.root)}
    files = session_files(system, session)
    reader = ["zcat", "-f"] if any(path.suffix == ".gz" for path in files) else ["cat"]
    cat_seconds, cat_lines = _timed_pipeline([*reader, *map(str, files)], env)
    dump_seconds, dump_lines = _timed_pipeline([*_CLI, "session", "logs", session, "--json"], env)
    if dump_lines != events:
        raise BenchError(f"the --json dump printed {dump_lines} lines, {events} expected")
    if cat_lines != events:
        raise BenchError(f"cat of the segments counted {cat_lines} lines, {events} expected")
    return {
        "segments": len(files),
        "bytes": sum(path.stat().st_size for path in files),
        "dump_seconds": dump_seconds,
        "cat_seconds": cat_seconds,
        "ratio": cat_seconds / dump_seconds,
    }


def reader_tail(quick: bool, workdir: Path) -> dict[str, object]:
    """Run ``bench/reader_tail.py`` (if it exists yet) and return what it reported."""
    script = BENCH / "reader_tail.py"
    if not script.exists():
        return {"gap": "bench/reader_tail.py (last 100 events at 10k vs 10M) is not in this tree yet"}
    helptext = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    out = workdir / "reader_tail.json"
    argv = [sys.executable, str(script)]
    if quick and "--quick" in helptext:
        argv.append("--quick")
    for flag in ("--json", "--out", "--output"):
        if flag in helptext:
            argv += [flag, str(out)]
            break
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=BENCH.parent)
    if result.returncode != 0:
        return {"gap": f"bench/reader_tail.py failed ({result.returncode}): {result.stderr[-800:]}"}
    if out.exists():
        try:
            return {"result": json.loads(out.read_text())}
        except ValueError:
            pass
    for line in reversed(result.stdout.strip().splitlines()):
        try:
            return {"result": json.loads(line)}
        except ValueError:
            continue
    return {"result": result.stdout[-2000:]}


def reader_seek(quick: bool, workdir: Path) -> dict[str, object]:
    """Run ``bench/reader_seek.py`` and return what it reported (or why it could not)."""
    out = workdir / "reader_seek.json"
    argv = [sys.executable, "-m", "bench.reader_seek", "--json", str(out)]
    if quick:
        argv.append("--quick")
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=BENCH.parent)
    if result.returncode != 0 or not out.exists():
        return {"gap": f"bench/reader_seek.py failed ({result.returncode}): {result.stderr[-800:]}"}
    return {"result": json.loads(out.read_text())}
