"""Profiles: py-spy on the running collector during an ingest, cProfile on the agent's client.

py-spy samples the collector from outside (no code change, negligible overhead with
``--nonblocking``) and writes collapsed stacks (``-f raw``); :func:`summarise_collapsed` turns them
into the share of samples spent in each function, itself ("self") and below it ("total").
"""

from __future__ import annotations

import collections
import pstats
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Final

from ._common import BenchError

_RATE: Final = "250"


class PySpy:
    """``py-spy record`` attached to a process until :meth:`stop`."""

    def __init__(self, pid: int, out: Path) -> None:
        binary = shutil.which("py-spy")
        if binary is None:
            raise BenchError("py-spy is missing: run through bench/run (it installs the bench group)")
        self.out = out
        self.proc = subprocess.Popen(
            [binary, "record", "--pid", str(pid), "--rate", _RATE, "--nonblocking", "-f", "raw", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # attach before the clock starts

    def stop(self) -> None:
        """Stop sampling and let py-spy write its file."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _function(frame: str) -> str:
    """``name (file.py:123)`` → ``name (file.py)``: py-spy's raw frames carry the sampled line."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def summarise_collapsed(path: Path, top: int = 15) -> dict[str, list[tuple[str, float]]]:
    """Return the ``top`` functions by self share, by total share, and the top lines, of a raw py-spy file.

    Frames under which nearly every sample falls (the event loop, click, runpy) are left out of the
    totals: they say nothing about where the time goes.
    """
    self_counts: collections.Counter[str] = collections.Counter()
    line_counts: collections.Counter[str] = collections.Counter()
    total_counts: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame for frame in stack.split(";") if frame and not frame.startswith(("process ", "thread "))]
        if not frames:
            continue
        samples += count
        line_counts[frames[-1]] += count
        self_counts[_function(frames[-1])] += count
        for function in {_function(frame) for frame in frames}:
            total_counts[function] += count
    if not samples:
        return {"self": [], "total": [], "lines": []}
    totals = [(name, 100 * n / samples) for name, n in total_counts.most_common() if n < 0.95 * samples]
    return {
        "self": [(name, 100 * n / samples) for name, n in self_counts.most_common(top)],
        "total": totals[:top],
        "lines": [(name, 100 * n / samples) for name, n in line_counts.most_common(top)],
    }


def summarise_cprofile(path: Path, top: int = 15) -> list[tuple[str, float, float]]:
    """Return ``(function, tottime share %, cumtime share %)`` of the top functions of a cProfile dump."""
    stats = pstats.Stats(str(path))
    table = stats.stats  # type: ignore[attr-defined]  # pstats keeps its table public but untyped
    total = sum(entry[2] for entry in table.values()) or 1.0
    rows = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:top]
    return [
        (f"{func[2]} ({Path(func[0]).name}:{func[1]})", 100 * entry[2] / total, 100 * entry[3] / total)
        for func, entry in rows
    ]
