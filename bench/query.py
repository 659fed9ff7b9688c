"""Query benchmark: "what failed in the last hour, anywhere" over a big root, against rg and jq.

Builds a root directly as files (what the collector would have written: one active segment and a
checkpoint per session; building through the writer would take most of an hour at 10 million events),
``--sessions`` sessions (10,000) holding ``--events`` events in all (10,000,000), most of them days
old: ``--recent`` of the sessions (1 %) were active in the last 30 minutes. One FINISH in 50 is
FAILED; one event in 1,000 used the tool ``WebFetch``.

Then times each question with gz-ia and rg in turn, ``--repeat`` rounds after one warm-up (the files
are in the page cache, as they are for a user asking twice), the output counted by ``wc -l``; the
figures are medians, and the ratios the medians of each round's ratio (both ran under the same load).
gz-ia runs as a user installs it: the wheels in a virtual environment of their own, bytecode compiled,
no development packages (as ``bench/_cli_cost.py`` builds it):

* ``failed_last_hour``: ``gz-ia logs --failed --since -1h --json``, against
  ``rg -N --no-filename '"status":"FAILED"'`` over every segment (rg cannot tell times: it must read
  every file) and ``jq -c 'select(.status == "FAILED" and .timestamp >= T)'`` over them;
* ``field_match``: ``gz-ia logs attrs.tool=WebFetch --json`` (every file must be read), against
  ``rg -N --no-filename '"tool":"WebFetch"'`` and ``jq -c 'select(.attrs.tool == "WebFetch")'``;
* ``field_common``: ``gz-ia logs attrs.tool=Bash --json`` (a quarter of all events), against
  ``rg -N --no-filename '"tool":"Bash"'``;
* ``grep_text``: ``gz-ia logs -g 'tests failed' --json`` (smart case: case-insensitive), against
  ``rg -N --no-filename -i 'tests failed'``;
* ``grep_rare``: ``gz-ia logs -g WebFetch --json`` (case-sensitive), against ``rg -N --no-filename WebFetch``.

Two floors say what CPython itself allows, measured the same way: ``start``, the CLI answering a
question no session can match (``gz-ia logs session_id=…``: the interpreter, the imports, the root's
listing, no file read), against which a rare value's whole rg answer is compared; and for
``field_common``, ``python_floor`` (``bench/_python_floor.py``): one CPython process that only finds,
slices and writes each line holding the needle, the least any Python loop over the matching lines does.

``--cold`` also times each question with an empty page cache: before every run of either tool the
caches are dropped (``sync; echo 3 > /proc/sys/vm/drop_caches``, which needs root), so both read
the files from the disk; and ``start_cold``, the start with the interpreter and modules read from it.

The ratio is rg's time over ours: above 1, gz-ia answered faster; it is given for wall time and for
CPU time (user + system of every process of the pipeline), which a busy shared machine distorts less.
``rg`` is Debian's ``ripgrep`` (installed with apt-get when missing).

Usage::

    uv run python bench/query.py [--events N] [--sessions N] [--root DIR --keep] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from gz_ia.collector.storage.checkpoints import Checkpoint, encode_checkpoint
from gz_ia.collector.storage.names import LAYOUT_FILE, LAYOUT_VERSION

if __package__:
    from ._cli_cost import user_install
else:  # run as a script: bench/query.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench._cli_cost import user_install

_TOOLS = ("Bash", "Read", "Edit", "Grep")


def _stamp(moment: datetime) -> str:
    return msgspec.json.encode(moment)[1:-1].decode()


def build(root: Path, sessions: int, events: int, recent: float, seed: int = 7) -> dict[str, int]:
    """Write the root; return how many events are FAILED, FAILED in the last hour, and WebFetch."""
    rng = random.Random(seed)
    (root / "sessions").mkdir(parents=True)
    (root / "state").mkdir()
    (root / LAYOUT_FILE).write_text(json.dumps({"layout": LAYOUT_VERSION}) + "\n")
    now = datetime.now(UTC)
    per_session = events // sessions
    recent_every = max(1, round(1 / recent)) if recent > 0 else 0
    counts = {"failed": 0, "failed_last_hour": 0, "webfetch": 0}
    for number in range(sessions):
        session_id = f"agent-{number:06d}-" + "x" * 8
        is_recent = recent_every and number % recent_every == 0
        start = now - (timedelta(minutes=30) if is_recent else timedelta(days=rng.uniform(1, 30)))
        lines: list[bytes] = []
        failures = 0
        first = last = ""
        for index in range(per_session):
            moment = start + timedelta(milliseconds=index * 1700 // max(1, per_session // 1000))
            stage = ("READ", "PENDING", "FINISH")[index % 3]
            failed = stage == "FINISH" and rng.random() < 0.02
            tool = "WebFetch" if rng.random() < 0.001 else _TOOLS[index % 4]
            stamp = _stamp(moment)
            first = first or stamp
            last = stamp
            record: dict[str, object] = {
                "timestamp": stamp,
                "session_id": session_id,
                "action": f"task-{index // 3}",
                "stage": stage,
                "status": "FAILED" if failed else "OK",
                "agent": "claude",
                "role": "coder",
            }
            if stage == "FINISH":
                record["duration_ms"] = 1200 + index % 500
            if failed:
                record["error"] = "exit status 1: tests failed"
            record["attrs"] = {"tool": tool, "tokens": 100 + index % 900}
            record["seq"] = index + 1
            record["delivery"] = f"p{number}:{index + 1}"
            lines.append(msgspec.json.encode(record))
            failures += failed
            counts["failed"] += failed
            counts["failed_last_hour"] += failed and moment >= now - timedelta(hours=1)
            counts["webfetch"] += tool == "WebFetch"
        data = b"\n".join(lines) + b"\n"
        (root / "sessions" / f"{session_id}.events.jsonl").write_bytes(data)
        checkpoint = Checkpoint(
            segment=1,
            offset=len(data),
            seq=per_session,
            failures=failures,
            first_time=first,
            last_time=last,
            newest_time=last,
            agent="claude",
        )
        (root / "state" / f"{session_id}.session.json").write_bytes(encode_checkpoint(checkpoint))
    return counts


def _rg() -> str:
    found = shutil.which("rg")
    if found is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "ripgrep"], check=True, capture_output=True)
        found = shutil.which("rg")
    if found is None:
        raise SystemExit("rg (Debian's ripgrep) is needed")
    return found


def _run(command: str, env: dict[str, str]) -> tuple[float, float, int]:
    """Wall and CPU (user + system, every process of the pipeline) seconds of ``command | wc -l``, and
    the lines. CPU time stays meaningful on a machine shared with other work."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    pipeline = ["bash", "-o", "pipefail", "-c", f"{command} | wc -l"]
    result = subprocess.run(pipeline, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in (0, 1):  # 1: nothing matched (rg, gz-ia --grep)
        raise SystemExit(f"{command!r} failed: {result.stderr}")
    return elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, int(result.stdout.split()[0])


def _drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def _compare(ours: str, theirs: str, env: dict[str, str], repeat: int, *, cold: bool = False) -> dict[str, float]:
    """Both commands in turn, one warm-up round then ``repeat`` rounds: medians and median ratios.
    ``cold``: no warm-up, the page cache dropped before every run."""
    rounds = []
    for attempt in range(repeat + 1):
        if cold:
            _drop_caches()
        mine = _run(ours, env)
        if cold:
            _drop_caches()
        other = _run(theirs, env)
        if attempt or cold:
            rounds.append((mine, other))
    wall = statistics.median
    return {
        "gz_ia_seconds": round(wall(mine[0] for mine, _ in rounds), 3),
        "gz_ia_cpu_seconds": round(wall(mine[1] for mine, _ in rounds), 3),
        "gz_ia_lines": rounds[-1][0][2],
        "rg_seconds": round(wall(other[0] for _, other in rounds), 3),
        "rg_cpu_seconds": round(wall(other[1] for _, other in rounds), 3),
        "rg_lines": rounds[-1][1][2],
        "rg_over_gz_ia": round(wall(other[0] / mine[0] for mine, other in rounds), 2),
        "rg_over_gz_ia_cpu": round(wall(other[1] / mine[1] for mine, other in rounds), 2),
    }


def _floor(command: str, env: dict[str, str], repeat: int, *, cold: bool = False) -> dict[str, float]:
    """Median wall and CPU seconds of ``command | wc -l`` over ``repeat`` runs after one warm-up, and
    its lines. ``cold``: no warm-up, the page cache dropped before every run."""
    runs = []
    for _ in range(repeat if cold else repeat + 1):
        if cold:
            _drop_caches()
        runs.append(_run(command, env))
    runs = runs if cold else runs[1:]
    return {
        "seconds": round(statistics.median(run[0] for run in runs), 3),
        "cpu_seconds": round(statistics.median(run[1] for run in runs), 3),
        "lines": runs[-1][2],
    }


def measure(root: Path, repeat: int, with_jq: bool, *, cold: bool = False) -> dict[str, object]:
    """Time each question with gz-ia, rg and jq, and the floors; return the figures."""
    installed = user_install()
    cli = str(installed / "gz-ia")
    env = {**os.environ, "GZ_IA_ROOT": str(root), "LC_ALL": "C"}
    files = f"{root}/sessions"
    rg = _rg()
    every = f"find {files} -name '*.jsonl' -exec cat {{}} +"
    since = _stamp(datetime.now(UTC) - timedelta(hours=1))
    questions = {
        "failed_last_hour": (
            f"{cli} logs --failed --since -1h --json",
            f'{rg} -N --no-filename \'"status":"FAILED"\' {files}',
            f'{every} | jq -c \'select(.status == "FAILED" and .timestamp >= "{since}")\'',
        ),
        "field_match": (
            f"{cli} logs attrs.tool=WebFetch --json",
            f'{rg} -N --no-filename \'"tool":"WebFetch"\' {files}',
            f"{every} | jq -c 'select(.attrs.tool == \"WebFetch\")'",
        ),
        "field_common": (
            f"{cli} logs attrs.tool=Bash --json",
            f'{rg} -N --no-filename \'"tool":"Bash"\' {files}',
            None,
        ),
        "grep_text": (
            f"{cli} logs -g 'tests failed' --json",
            f"{rg} -N --no-filename -i 'tests failed' {files}",
            None,
        ),
        "grep_rare": (f"{cli} logs -g WebFetch --json", f"{rg} -N --no-filename WebFetch {files}", None),
    }
    start = f"{cli} logs session_id=no-such-session --json"
    figures: dict[str, object] = {"start": _floor(start, env, repeat)}
    if cold:  # the interpreter and the modules read from the disk too
        figures["start_cold"] = _floor(start, env, repeat, cold=True)
    floor = f"{installed / 'python'} {Path(__file__).with_name('_python_floor.py')} {root}"
    floors = {"field_common": f'{floor} \'"tool":"Bash"\''}
    for name, (ours, theirs, jq) in questions.items():
        compared = _compare(ours, theirs, env, repeat)
        row: dict[str, object] = {**compared, "command": ours.replace(cli, "gz-ia"), "rg": theirs.replace(rg, "rg")}
        if name in floors:
            row["python_floor"] = found = _floor(floors[name], env, repeat)
            row["rg_over_python_floor_cpu"] = round(compared["rg_cpu_seconds"] / found["cpu_seconds"], 2)
        if cold:
            row["cold"] = _compare(ours, theirs, env, repeat, cold=True)
        if with_jq and jq is not None:
            jq_s, _jq_cpu, jq_lines = _run(jq, env)  # minutes at 10 million events: once
            row.update(
                jq_seconds=round(jq_s, 3), jq_lines=jq_lines, jq_over_gz_ia=round(jq_s / compared["gz_ia_seconds"], 2)
            )
        figures[name] = row
    return figures


def main() -> int:
    """Build (or reuse) the root, measure, print (and optionally write) the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000, help="events in all")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--recent", type=float, default=0.01, help="fraction of sessions active in the last hour")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-jq", action="store_true", help="skip jq (minutes at 10 million events)")
    parser.add_argument("--cold", action="store_true", help="also time with the page cache dropped (root)")
    parser.add_argument("--root", type=Path, default=None, help="build here, or reuse a root built before")
    parser.add_argument("--keep", action="store_true", help="keep the root for another run")
    parser.add_argument("--json", type=Path, default=None, help="also write the result to this file")
    args = parser.parse_args()
    base = None
    if args.root is None:
        base = Path(tempfile.mkdtemp(prefix="gzquery", dir="/tmp"))
        args.root = base / ".harness"
    try:
        figures: dict[str, object] = {"sessions": args.sessions, "events": args.events, "recent": args.recent}
        if not (args.root / LAYOUT_FILE).exists():
            started = time.perf_counter()
            figures["built"] = build(args.root, args.sessions, args.events, args.recent)
            figures["build_seconds"] = round(time.perf_counter() - started, 1)
        figures["bytes"] = sum(path.stat().st_size for path in (args.root / "sessions").iterdir())
        figures.update(measure(args.root, args.repeat, not args.no_jq, cold=args.cold))
    finally:
        if base is not None and not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
