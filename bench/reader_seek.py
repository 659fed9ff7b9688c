"""Reader costs that must not grow with the session: ``--seq``, ``--failed`` and a long follower.

On one session of ``--events`` events (1,000,000), never failed, written by the real writer into
gzip archives of ``--segment-bytes`` (8 MiB, about 30 archives), each figure the median of
``--repeat`` runs, the CLI as a real subprocess (cold: a new process decompresses what it reads):

* ``seq``: ``gz-ia session logs huge --seq N --json`` for an early, a middle and a late ``N``, in
  turn with :func:`event_at` in-process: the ratio CLI / ``event_at``, and CLI / (``event_at`` +
  ``start_seconds``), the command's own cost on a 10-event session (interpreter, imports, one
  event), which no seek can save; and the CLI's peak RSS.
  Each ``--seq`` run alternates with ``gz-ia session logs huge -n 10 --json`` (the newest events,
  read from the end): ``vs_tail`` is ``--seq``'s time and peak RSS over ``-n 10``'s.
* ``failed``: ``gz-ia session logs huge --failed --json``, whose checkpoint says 0 failed.
* ``follower``: the peak RSS (``VmHWM``) of ``gz-ia session logs live -f`` while the writer rotates
  ``--rotations`` times into gzip archives of ``--follow-segment-bytes`` (1 MiB), as a day of an
  agent's work would; the follower decodes every event (``--action`` keeps only the last one). Its
  RSS (``VmRSS``) is sampled at each rotation: flat when what it holds does not grow with what it
  read. ``--follower MB:ROTATIONS[:lag]`` (repeatable) measures more segment sizes, e.g. ``64:6``
  (the default segment size) and ``256:3``; with ``:lag`` the follower is stopped while the writer
  rotates and continued after, so that it reads every segment back from its gzip archive.

Usage (``--root DIR`` keeps the generated session there and reuses it on the next run)::

    uv run python -m bench.reader_seek [--quick] [--root /tmp/gz-seek] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.collector import reading
from gz_ia.collector.config import CollectorConfig, RetentionConfig, RotationConfig
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.ingest.validation import DecodedBatch
from gz_ia.collector.storage.writer import Writer

from .reader_tail import fill

_CLI: Final = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()"]
_PEAK: Final = "gz-ia-bench-peak-rss "
# The command with its own peak RSS on stderr at exit: rusage's maxrss of a child counts the parent's
# memory at the fork, the new process's VmHWM does not.
_MEASURED: Final = [
    sys.executable,
    "-c",
    "import atexit, sys\n"
    "def peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    f"            sys.stderr.write('{_PEAK}' + line.split()[1] + '\\n')\n"
    "atexit.register(peak)\n"
    "from gz_ia.collector.entry import main; main()",
]
_MB: Final = 1 << 20


def _run_rss(argv: list[str], env: dict[str, str]) -> tuple[float, int, bytes]:
    """Run the command ``argv`` (after ``gz-ia``); return (wall seconds, its peak RSS in bytes, stdout)."""
    started = time.perf_counter()
    result = subprocess.run([*_MEASURED, *argv], capture_output=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{argv} exited with {result.returncode}: {result.stderr.decode()[-500:]}")
    peaks = [line for line in result.stderr.decode().splitlines() if line.startswith(_PEAK)]
    return seconds, int(peaks[-1].split()[-1]) * 1024 if peaks else 0, result.stdout


def _median(function: Callable[[], float], repeat: int) -> float:
    return statistics.median(function() for _ in range(repeat))


def _timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def _build(root: Path, events: int, segment_bytes: int) -> None:
    """Write the session unless ``root`` already holds it (a previous run's, same size)."""
    marker = root / "bench-reader-seek.json"
    wanted = {"events": events, "segment_bytes": segment_bytes}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    fill(root, {"huge": events, "tiny": 10}, segment_bytes, True)
    marker.write_text(json.dumps(wanted))


def seq_and_failed(root: Path, events: int, repeat: int) -> dict[str, object]:
    """``--seq N`` against ``event_at``, and ``--failed``, on the session ``huge``."""
    env = {**os.environ, "GZ_IA_ROOT": str(root)}
    # What the command costs whatever the session: the interpreter, the imports, one event found.
    start = _median(lambda: _run_rss(["session", "logs", "tiny", "--seq", "5", "--json"], env)[0], repeat)
    figures: dict[str, object] = {"start_seconds": round(start, 3)}
    for name, seq in (("early", 10), ("middle", events // 2), ("late", events - 10)):
        cli_times: list[float] = []
        api_times: list[float] = []
        tail_times: list[float] = []
        rss = tail_rss = 0
        for _ in range(repeat):  # in turn, so that all meet the same minutes
            seconds, peak, out = _run_rss(["session", "logs", "huge", "--seq", str(seq), "--json"], env)
            if [json.loads(line)["seq"] for line in out.splitlines()] != [seq]:
                raise RuntimeError(f"--seq {seq} printed {out[:200]!r}")
            cli_times.append(seconds)
            rss = max(rss, peak)
            api_times.append(_timed(lambda seq=seq: reading.event_at(root, "huge", seq)))  # type: ignore[misc]
            seconds, peak, out = _run_rss(["session", "logs", "huge", "-n", "10", "--json"], env)
            if len(out.splitlines()) != 10:
                raise RuntimeError(f"-n 10 printed {out[:200]!r}")
            tail_times.append(seconds)
            tail_rss = max(tail_rss, peak)
        cli, api, tail = statistics.median(cli_times), statistics.median(api_times), statistics.median(tail_times)
        figures[f"seq_{name}"] = {
            "seq": seq,
            "cli_seconds": round(cli, 3),
            "event_at_seconds": round(api, 3),
            "ratio": round(cli / api, 2),
            "ratio_with_start": round(cli / (start + api), 2),
            "cli_peak_rss_mb": round(rss / _MB, 1),
            "tail_seconds": round(tail, 3),
            "tail_peak_rss_mb": round(tail_rss / _MB, 1),
            "vs_tail": {"seconds": round(cli / tail, 2), "peak_rss": round(rss / max(1, tail_rss), 2)},
        }
    failed_times: list[float] = []
    rss = 0
    for _ in range(repeat):
        seconds, peak, out = _run_rss(["session", "logs", "huge", "--failed", "--json"], env)
        if out:
            raise RuntimeError(f"--failed printed {out[:200]!r}")
        failed_times.append(seconds)
        rss = max(rss, peak)
    figures["failed"] = {
        "cli_seconds": round(statistics.median(failed_times), 3),
        "cli_peak_rss_mb": round(rss / _MB, 1),
    }
    return figures


def _event(index: int, action: str) -> LogEvent:
    """Event ``index`` of the followed session, its stage from ``index`` (0: a READ, which any action
    may start with: the last event's action is new)."""
    return LogEvent(
        timestamp=datetime.now(UTC),
        session_id="live",
        action=action,
        stage=(Stage.READ, Stage.PENDING, Stage.FINISH)[index % 3],
        status=Status.OK,
        agent="claude",
        attrs={"step": index, "note": "x" * 100},
    )


def follower(base: Path, rotations: int, segment_bytes: int, *, lag: bool = False) -> dict[str, object]:
    """Peak RSS of ``gz-ia session logs live -f`` while the session rotates ``rotations`` times.

    ``lag``: the follower is stopped (``SIGSTOP``) while the writer rotates, and continued after, so
    that it reads every segment from its archive, as a follower that fell behind, or the MCP server
    and the exporter reading history, do."""
    root = base / "follow" / ".harness"
    root.mkdir(parents=True)
    config = CollectorConfig(
        rotation=RotationConfig(max_bytes=segment_bytes, compress=True), retention=RetentionConfig(max_archives=0)
    )
    rotated = [0]
    writer = Writer(config=config, snapshot_interval=1.0, on_rotated=lambda: rotated.__setitem__(0, rotated[0] + 1))
    ingest = Ingest(writer)
    store = writer.root(root, owner=os.getuid())
    ingest.apply(store, "ab", DecodedBatch(1, False, [_event(0, "first")], {}, {}))
    writer.flush()
    env = {**os.environ, "GZ_IA_ROOT": str(root)}
    argv = [*_CLI, "session", "logs", "live", "-f", "-n", "0", "--action", "the-end", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    written = 1
    started = time.perf_counter()
    samples: list[float] = []
    try:
        time.sleep(1.0)  # the follower is up and at the end
        if lag:
            proc.send_signal(signal.SIGSTOP)
        while rotated[0] < rotations:
            batch: list[LogEvent | None] = [_event(written + i, f"task-{(written + i) // 3}") for i in range(2000)]
            # The first delivery number of the batch: its events take the numbers after it.
            ingest.apply(store, "ab", DecodedBatch(written + 1, False, batch, {}, {}))
            writer.flush()
            written += len(batch)
            time.sleep(0.005)  # a writer at a pace, not a burst: the follower keeps close behind
            if rotated[0] > len(samples):
                samples.append(_status_mb(proc.pid, "VmRSS:"))
        if lag:
            proc.send_signal(signal.SIGCONT)
        ingest.apply(store, "ab", DecodedBatch(written + 1, False, [_event(0, "the-end")], {}, {}))
        writer.flush()
        written += 1
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the follower has read every event before this one
        if b'"the-end"' not in line:
            raise RuntimeError(f"the follower printed {line[:200]!r}")
        peak = _status_mb(proc.pid, "VmHWM:")
        seconds = time.perf_counter() - started
    finally:
        proc.kill()
        proc.wait()
        writer.close()
    return {
        "events": written,
        "rotations": rotated[0],
        "segment_mb": segment_bytes / _MB,
        "seconds": round(seconds, 1),
        "follower_peak_rss_mb": peak,
        "follower_rss_mb_at_each_rotation": samples,
    }


def _status_mb(pid: int, field: str) -> float:
    """A memory figure of ``/proc/PID/status``, in MiB."""
    for text in Path(f"/proc/{pid}/status").read_text().splitlines():
        if text.startswith(field):
            return round(int(text.split()[1]) / 1024, 1)
    return 0.0


def main() -> int:
    """Build (or reuse) the session, measure, print (and optionally write) the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--segment-bytes", type=int, default=8 * _MB)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rotations", type=int, default=300, help="rotations the follower sees")
    parser.add_argument("--follow-segment-bytes", type=int, default=_MB)
    parser.add_argument(
        "--follower", action="append", default=[], metavar="MB:ROTATIONS", help="also follow at this segment size"
    )
    parser.add_argument("--root", type=Path, default=None, help="keep the generated session here, reuse it")
    parser.add_argument("--quick", action="store_true", help="200,000 events, 60 rotations, 3 runs")
    parser.add_argument("--json", type=Path, default=None, help="also write the result to this file")
    args = parser.parse_args()
    if args.quick:
        args.events, args.rotations, args.repeat, args.segment_bytes = 200_000, 60, 3, 2 * _MB
    base = Path(tempfile.mkdtemp(prefix="gzseek", dir="/tmp"))
    try:
        root = args.root.absolute() if args.root is not None else base / "ws" / ".harness"
        started = time.perf_counter()
        _build(root, args.events, args.segment_bytes)
        figures: dict[str, object] = {
            "events": args.events,
            "archives": len([name for name in os.listdir(root / "sessions") if name.endswith(".gz")]),
            "build_seconds": round(time.perf_counter() - started, 1),
        }
        figures.update(seq_and_failed(root, args.events, args.repeat))
        figures["follower"] = follower(base, args.rotations, args.follow_segment_bytes)
        for spec in args.follower:
            size, rotations, *lagging = spec.split(":")
            shutil.rmtree(base / "follow", ignore_errors=True)
            lag = lagging == ["lag"]
            name = f"follower_{size}mb" + ("_lagging" if lag else "")
            figures[name] = follower(base, int(rotations or 3), int(size) * _MB, lag=lag)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
