"""Reader benchmark: the last page of a huge session must not scan its history.

Builds sessions with the real writer (rotation at ``--segment-bytes``, gzip archives unless
``--no-compress``), then measures, each as the median of ``--repeat`` runs:

* ``last_page``: ``read_page(..., reverse=True, limit=100)`` on a small session (``--small`` events)
  and on a huge one (``--events``, default 10,000,000: 500 segments, as the issue asks). The ratio
  huge/small is the figure: reading from the end keeps it near 1, a scan of the history would make
  it grow with size.
* ``first_page`` and ``resume``: the first page, and a page resumed from a cursor taken early (after
  every later rotation).
* ``sessions``: :func:`list_sessions` and :func:`session_tree` over ``--sessions`` sessions (10,000).
* ``follow``: latency from the end of a write to :func:`follow` yielding the event, p50 and p99, at
  the default ``poll_interval`` (0.02 s, which the CLI uses) and at 0.05 s.

Usage::

    uv run python bench/reader_tail.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.collector import reading as reader
from gz_ia.collector.config import CollectorConfig, RetentionConfig, RotationConfig
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.ingest.validation import DecodedBatch
from gz_ia.collector.storage.writer import Writer

_STAGES = (Stage.READ, Stage.PENDING, Stage.FINISH)


def _writer(segment_bytes: int, compress: bool) -> Writer:
    config = CollectorConfig(
        rotation=RotationConfig(max_bytes=segment_bytes, compress=compress),
        retention=RetentionConfig(max_archives=0),
    )
    return Writer(config=config, snapshot_interval=1.0)


def fill(root: Path, sessions: dict[str, int], segment_bytes: int, compress: bool, batch: int = 5000) -> None:
    """Write ``count`` events to each session through the real ingest path, then close the writer."""
    writer = _writer(segment_bytes, compress)
    ingest = Ingest(writer)
    store = writer.root(root, owner=os.getuid())
    start = datetime.now(UTC).timestamp()
    for session_id, count in sessions.items():
        parent = None if session_id.startswith("s0") else "s000000"
        done = 0
        while done < count:
            size = min(batch, count - done)
            events: list[LogEvent | None] = [
                LogEvent(
                    timestamp=datetime.fromtimestamp(start + (done + i) / 1e6, UTC),
                    session_id=session_id,
                    parent_session_id=parent,
                    action=f"task-{(done + i) // 3}",
                    stage=_STAGES[(done + i) % 3],
                    status=Status.OK,
                    agent="claude",
                    role="coder",
                    duration_ms=12 if (done + i) % 3 == 2 else None,
                )
                for i in range(size)
            ]
            ingest.apply(store, "ab", DecodedBatch(done + 1, False, events, {}, {}))
            writer.flush()
            done += size
    writer.close()


def _median_ms(function: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()  # type: ignore[operator]
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _follow_latency(base: Path, poll_interval: float, events: int) -> dict[str, float]:
    """Write one event every 10 ms; measure write (start) → yielded by follow, in milliseconds."""
    root = base / f"follow-{poll_interval}" / ".harness"
    root.mkdir(parents=True)
    writer = _writer(64 << 10, compress=True)  # rotates every few hundred events: latency across rotations
    ingest = Ingest(writer)
    store = writer.root(root, owner=os.getuid())
    written: dict[int, float] = {}
    latencies: list[float] = []
    stop = threading.Event()
    ingest.apply(store, "ab", DecodedBatch(1, False, [_event("live", 0)], {}, {}))
    writer.flush()
    cursor = reader.end_cursor(root, "live")

    def consume() -> None:
        for entry in reader.follow(root, ["live"], cursor=cursor, poll_interval=poll_interval, stop=stop.is_set):
            latencies.append((time.perf_counter() - written[entry.event.seq]) * 1000)
            if len(latencies) == events:
                stop.set()

    thread = threading.Thread(target=consume)
    thread.start()
    for index in range(1, events + 1):
        ingest.apply(store, "ab", DecodedBatch(index + 1, False, [_event("live", index)], {}, {}))
        written[index + 1] = time.perf_counter()  # before the write: the follower may see it at once
        writer.flush()
        time.sleep(0.01)
    thread.join(timeout=30)
    stop.set()
    writer.close()
    latencies.sort()
    return {
        "events": len(latencies),
        "p50_ms": round(latencies[len(latencies) // 2], 2),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 2),
        "max_ms": round(latencies[-1], 2),
    }


def _event(session_id: str, index: int) -> LogEvent:
    return LogEvent(
        timestamp=datetime.now(UTC),
        session_id=session_id,
        action=f"task-{index // 3}",
        stage=_STAGES[index % 3],
        status=Status.OK,
        agent="claude",
    )


def main() -> int:
    """Build the sessions, measure, print (and optionally write) the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000, help="events of the huge session")
    parser.add_argument("--small", type=int, default=10_000, help="events of the small session")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions for list_sessions/tree")
    parser.add_argument("--segment-bytes", type=int, default=4 << 20, help="rotation.max_bytes")
    parser.add_argument("--no-compress", action="store_true", help="keep archives uncompressed")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--follow-events", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="200,000 events, 2,000 sessions")
    parser.add_argument("--json", type=Path, default=None, help="also write the result to this file")
    args = parser.parse_args()
    if args.quick:
        args.events, args.sessions, args.follow_events, args.repeat = 200_000, 2_000, 100, 10
    compress = not args.no_compress
    base = Path(tempfile.mkdtemp(prefix="gzbench", dir="/tmp"))
    try:
        root = base / "ws" / ".harness"
        root.mkdir(parents=True)
        started = time.perf_counter()
        fill(root, {"huge": args.events, "small": args.small}, args.segment_bytes, compress)
        build_seconds = time.perf_counter() - started
        segments = len([name for name in os.listdir(root / "sessions") if name.startswith("huge.events.")])
        early = reader.read_page(root, "huge", limit=10).entries[-1].cursor
        figures: dict[str, object] = {
            "events": args.events,
            "small_events": args.small,
            "segments": segments,
            "compressed": compress,
            "build_seconds": round(build_seconds, 1),
        }
        small = _median_ms(lambda: reader.read_page(root, "small", reverse=True, limit=100), args.repeat)
        huge = _median_ms(lambda: reader.read_page(root, "huge", reverse=True, limit=100), args.repeat)
        figures["last_page_small_ms"] = round(small, 3)
        figures["last_page_huge_ms"] = round(huge, 3)
        figures["last_page_ratio"] = round(huge / small, 2)
        figures["first_page_huge_ms"] = round(
            _median_ms(lambda: reader.read_page(root, "huge", limit=100), args.repeat), 3
        )
        figures["resume_early_cursor_ms"] = round(
            _median_ms(lambda: reader.read_page(root, "huge", cursor=early, limit=100), args.repeat), 3
        )
        page = reader.read_page(root, "huge", reverse=True, limit=100)
        assert [entry.event.seq for entry in page.entries] == list(range(args.events, args.events - 100, -1))
        assert not page.incomplete

        many = base / "many" / ".harness"
        many.mkdir(parents=True)
        fill(many, {f"s{index:06d}": 10 for index in range(args.sessions)}, args.segment_bytes, compress, batch=10)
        figures["sessions"] = args.sessions
        figures["list_sessions_ms"] = round(_median_ms(lambda: reader.list_sessions(many), 3), 1)
        figures["session_tree_ms"] = round(_median_ms(lambda: reader.session_tree(many, "s000000"), 3), 1)
        assert len(reader.list_sessions(many)) == args.sessions

        figures["follow_poll_20ms"] = _follow_latency(base, 0.02, args.follow_events)
        figures["follow_poll_50ms"] = _follow_latency(base, 0.05, args.follow_events)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
