"""Small shared pieces: temporary directories, process accounting, waiting, and the sample type.

Process CPU and memory are read from ``/proc`` rather than with psutil so that the bench adds no
dependency beyond the ``bench`` group, and because ``/proc/<pid>/stat`` counts every thread of a
multi-threaded peer (syslog-ng, rsyslog) at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import msgspec

REPO: Final = Path(__file__).resolve().parents[1]
BENCH: Final = REPO / "bench"
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    """A run could not be completed or failed its verification; the message says which and why."""


class Sample(msgspec.Struct, kw_only=True):
    """Repeated measurements of one figure, with the unit they are in."""

    name: str
    unit: str
    values: list[float]
    higher_is_better: bool = True
    extra: dict[str, float | str] = {}
    """Secondary figures shown beside the main one (cores, MB/s, RSS...)."""
    series: dict[str, list[float]] = {}
    """Per-run values of the secondary figures, summarised into ``extra`` by :meth:`note`."""

    def note(self, name: str, value: float, *, use_max: bool = False) -> None:
        """Add one run's value of a secondary figure; ``extra`` keeps its median (or its max)."""
        values = self.series.setdefault(name, [])
        values.append(value)
        self.extra[name] = max(values) if use_max else float(statistics.median(values))

    @property
    def median(self) -> float:
        """The median of the runs (what the tables report)."""
        return float(statistics.median(self.values)) if self.values else float("nan")

    @property
    def low(self) -> float:
        """The smallest run."""
        return min(self.values) if self.values else float("nan")

    @property
    def high(self) -> float:
        """The largest run."""
        return max(self.values) if self.values else float("nan")


_KEEP_FREE: Final = 4 << 30
"""Free bytes under /tmp below which a scratch directory is removed at once, deferred or not."""
_deferring: list[list[Path]] = []
"""The directories kept by each active removals_deferred block, innermost last."""


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """Yield a fresh short directory under /tmp and remove it afterwards (see removals_deferred).

    Short, because AF_UNIX socket paths are limited to about 107 bytes.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        if _deferring and shutil.disk_usage(path).free > _KEEP_FREE:
            _deferring[-1].append(path)
        else:
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def removals_deferred() -> Iterator[None]:
    """Keep the scratch directories made in the block until it ends, then remove them all.

    Without a journal, ext4 (this machine's disk) skips every inode freed in the last 60 s (360 s while
    its inode table block is dirty) when it allocates one, looking each of them up: right after a
    run's 10,000 files are removed, every file created in the same block group costs 0.5-1.4 ms
    instead of 20-60 µs. Removed between runs, they would make each run pay for the one before it.
    """
    kept: list[Path] = []
    _deferring.append(kept)
    try:
        yield
    finally:
        _deferring.remove(kept)
        for path in kept:
            shutil.rmtree(path, ignore_errors=True)


def creation_cost(count: int = 1_000) -> float:
    """Return the seconds it takes here to create a file, from ``count`` in a scratch directory.

    Reported with the figures: where files freed in the last minutes slow every creation (see
    removals_deferred), the 10,000-session runs measure the file system more than the collectors.
    """
    with scratch_dir("gzc") as path:
        directory = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            started = time.perf_counter()
            for number in range(count):
                os.close(os.open(f"probe-{number:06d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=directory))
            return (time.perf_counter() - started) / count
        finally:
            os.close(directory)


def process_tree(pid: int) -> list[int]:
    """Return ``pid`` and every process below it (a sharded collector's front and its shares)."""
    tree = [pid]
    for parent in tree:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{parent}/task").iterdir():
                tree += [int(child) for child in (task / "children").read_text().split()]
    return tree


def cpu_seconds(pid: int) -> float:
    """Return user + system CPU time of every thread of ``pid`` and its children so far (0 when gone)."""
    total = 0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # Fields after the command name start at index 3 ("state"); utime and stime are 14 and 15.
        total += int(fields[11]) + int(fields[12])
    return total / _CLOCK_TICKS


def rss_bytes(pid: int, *, peak: bool = False) -> int:
    """Return the resident set size of ``pid`` and its children (``VmHWM``, each one's peak so far,
    when ``peak``)."""
    key = "VmHWM:" if peak else "VmRSS:"
    total = 0
    for member in process_tree(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith(key):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.01) -> None:
    """Poll ``predicate`` until it holds.

    Raises:
        BenchError: it did not hold within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise BenchError(f"timed out after {timeout:g} s waiting for {what}")


def socket_accepts(path: Path) -> bool:
    """Tell whether something accepts connections on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM ``proc`` and wait; SIGKILL it if it does not exit in time."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
