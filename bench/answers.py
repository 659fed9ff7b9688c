"""The answers against the listing: ``gz-ia sessions --hung`` and ``gz-ia session why`` beside
``gz-ia sessions`` on the same root, as a ratio.

Builds two roots directly as files (what the collector would have written: one active segment per
session, and its checkpoint as the collector's tally makes it, by a replay of the file), each one
tree of agents under ``top``:

* ``10k``: 10,000 sessions (``top`` and 9,999 subagents) of ``--per-session`` events each (30: ten
  READ, PENDING, FINISH cycles); one session in 100 ends on a cycle left open two hours ago, and one
  subagent fails a third of the way through the tree's time;
* ``1m``: a 1,000,000-event tree: ``top`` and 9 subagents of 100,000 events each (99,999: whole
  cycles), one of them failing a third of the way, one left open.

Every FINISH carries a usage record. Each command runs as a process, in turn, one warm-up round then
``--repeat`` rounds (the files are in the page cache, as for a user asking twice); the figures are
medians of wall time, and the ratios the medians of each round's ratio to ``gz-ia sessions --json``
(run under the same load). The answers are checked: ``--hung`` lists the open sessions, ``why``
names the failing subagent and says what the fold of every line of the tree says (computed once, in
the bench's process); ``why_never_failed`` asks about a subagent that did not fail (exit 1),
which reads the listing alone.

Usage::

    uv run python -m bench.answers [--repeat N] [--only 10k,1m] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.collector.reading.cycles import load_tree
from gz_ia.collector.storage.checkpoints import encode_checkpoint
from gz_ia.collector.storage.names import LAYOUT_FILE, LAYOUT_VERSION
from gz_ia.collector.storage.replay import SessionFold, Trace
from gz_ia.collector.views.answers import why_of

CLI: Final = "from gz_ia.collector.entry import main; main()"
TOP: Final = "top"
_traces: Final = msgspec.json.Decoder(Trace)
SHAPES: Final = {"10k": (10_000, 30), "1m": (10, 100_000)}
"""Sessions of the tree, and events per session."""


def _stamp(moment: datetime) -> str:
    return msgspec.json.encode(moment)[1:-1].decode()


def build(root: Path, sessions: int, per_session: int) -> dict[str, object]:
    """Write a tree of ``sessions`` sessions under ``top``; return what the answers must say."""
    (root / "sessions").mkdir(parents=True)
    (root / "state").mkdir()
    (root / LAYOUT_FILE).write_text(json.dumps({"layout": LAYOUT_VERSION}) + "\n")
    start = datetime.now(UTC) - timedelta(days=1)
    step = timedelta(hours=20) / per_session  # every session runs through the same 20 hours
    open_every = 100 if sessions >= 100 else sessions
    failing = f"sub-{sessions // 2:06d}" if sessions > 1 else TOP
    hung: list[str] = []
    for number in range(sessions):
        session_id = TOP if number == 0 else f"sub-{number:06d}"
        parent = "" if number == 0 else TOP
        left_open = number % open_every == open_every - 1
        lines: list[bytes] = []
        # Whole cycles (99,999 of 100,000 events): a session not left open ends on a FINISH.
        for index in range(per_session - per_session % 3):
            stage = ("READ", "PENDING", "FINISH")[index % 3]
            if left_open and index >= per_session - 3:
                stage = "READ"  # the last cycle: a READ, never finished
                if index > per_session - 3:
                    break
            record: dict[str, object] = {
                "timestamp": _stamp(start + step * index + timedelta(microseconds=number)),
                "session_id": session_id,
                "action": f"task-{index // 3}",
                "stage": stage,
                "status": "OK",
                "agent": "claude" if number % 2 else "codex",
            }
            if parent:
                record["parent_session_id"] = parent
            if stage == "FINISH":
                record["duration_ms"] = 1200
                record["attrs"] = {"tool": "Bash", "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 10}
                if session_id == failing and index // 3 == per_session // 9:
                    record["status"] = "FAILED"
                    record["error"] = "exit status 1: tests failed"
            record["seq"] = len(lines) + 1
            lines.append(msgspec.json.encode(record))
        if left_open:
            hung.append(session_id)
        data = b"\n".join(lines) + b"\n"
        (root / "sessions" / f"{session_id}.events.jsonl").write_bytes(data)
        # The checkpoint the collector's writer would leave: the tally of every line (open cycles,
        # where the session waits, its quiet points for `why`), as a replay of the file builds it.
        fold = SessionFold()
        for trace in _traces.decode_lines(data):
            fold.apply(trace)
        checkpoint = fold.tally_checkpoint(segment=1, offset=len(data), segment_seq=0, started=time.time())
        (root / "state" / f"{session_id}.session.json").write_bytes(encode_checkpoint(checkpoint))
    return {"hung": sorted(hung), "failing": failing}


def _run(args: list[str], env: dict[str, str], expect: int = 0) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CLI, *args], env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != expect:
        raise SystemExit(f"gz-ia {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return elapsed, done.stdout


def measure(root: Path, expected: dict[str, object], repeat: int) -> dict[str, object]:
    """Each command in turn, a warm-up round then ``repeat`` rounds; check the answers."""
    env = {**os.environ, "GZ_IA_ROOT": str(root)}
    env.pop("GZ_IA_SOCKET", None)
    commands = {
        "sessions": ["sessions", "--json"],
        "hung": ["sessions", "--hung", "--json"],
        "why": ["session", "why", TOP, "--json"],
        "why_never_failed": ["session", "why", "sub-000001", "--json"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_number in range(repeat + 1):
        for name, args in commands.items():
            elapsed, out = _run(args, env, expect=1 if name == "why_never_failed" else 0)
            if name == "hung":
                listed = sorted(json.loads(line)["session_id"] for line in out.splitlines())
                assert listed == expected["hung"], (listed[:5], expected["hung"])
            if name == "why":
                answer = json.loads(out)
                assert answer["first_failure"]["session_id"] == expected["failing"], out
                assert answer == expected["why"], (answer, expected["why"])
            if round_number:
                times[name].append(elapsed)
    base = times["sessions"]
    return {
        "median_s": {name: round(statistics.median(values), 3) for name, values in times.items()},
        "ratio_to_sessions": {
            name: round(statistics.median(value / b for value, b in zip(values, base, strict=True)), 2)
            for name, values in times.items()
            if name != "sessions"
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="10k,1m", help="Which roots: 10k, 1m.")
    parser.add_argument("--json", dest="json_out", default=None)
    options = parser.parse_args()
    results: dict[str, object] = {}
    for shape in options.only.split(","):
        sessions, per_session = SHAPES[shape]
        scratch = Path(tempfile.mkdtemp(prefix=f"gz-answers-{shape}-"))
        try:
            print(f"{shape}: building {sessions:,} sessions x {per_session:,} events", file=sys.stderr)
            expected = build(scratch / ".harness", sessions, per_session)
            # The answer `why` must give: the fold of every line of the tree, as before it read checkpoints.
            full = why_of(load_tree(scratch / ".harness", TOP))
            assert full is not None
            expected["why"] = full.as_json()
            results[shape] = measure(scratch / ".harness", expected, options.repeat)
            print(f"{shape}: {json.dumps(results[shape])}", file=sys.stderr)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    text = json.dumps(results, indent=2)
    if options.json_out:
        Path(options.json_out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
