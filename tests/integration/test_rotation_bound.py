"""Rotation between lines: a burst written in one pass still leaves no segment past its limit by more
than one event, and no event lost or repeated across the segments."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.conftest import send_events

from gz_ia.client import build_event

LIMIT = 4096


def segments(collector: Any, session_id: str) -> list[tuple[str, list[bytes]]]:
    """Every segment of the session, archives in order then the active file, as its lines."""
    folder = collector.root / "sessions"
    archives = sorted(folder.glob(f"{session_id}.events.*.jsonl"))
    active = folder / f"{session_id}.events.jsonl"
    return [(path.name, path.read_bytes().splitlines(keepends=True)) for path in [*archives, active] if path.exists()]


def burst(session_id: str, count: int) -> list[Any]:
    """``count`` PENDING events of one session, mostly small, some of them larger than the limit."""
    return [
        build_event(
            session_id=session_id,
            action=f"step {index}",
            stage="PENDING",
            agent="claude",
            # Every 97th past the limit by itself (text values are cut at 1,000 characters).
            attrs={f"note{part}": "x" * 900 for part in range(6)} if index % 97 == 0 else {"note": "x" * (index % 300)},
        )
        for index in range(count)
    ]


def check_bound(collector: Any, session_id: str, count: int) -> int:
    """Assert the bound on every archived segment and contiguous seqs 1..count; return the archives."""
    found = segments(collector, session_id)
    archives = [(name, lines) for name, lines in found if not name.endswith(".events.jsonl")]
    for name, lines in archives:
        size = sum(map(len, lines))
        assert size <= LIMIT + max(map(len, lines)), f"{name}: {size} bytes, {len(lines)} events"
        # The line that reached the limit is the last one: without it, the segment was below it.
        assert size - len(lines[-1]) < LIMIT, name
    seqs = [json.loads(line)["seq"] for _name, lines in found for line in lines]
    assert seqs == list(range(1, count + 1))
    return len(archives)


@pytest.mark.parametrize("durability", ["os", "fsync"])
def test_a_burst_in_one_batch_rotates_between_lines(make_collector: Any, durability: str) -> None:
    """2,000 events in one batch at max_bytes = 4096: every archive holds at most the limit plus one
    event, seqs run on across archives, and the collector, restarted, continues from there (with
    fsync, the pass is written in the writer's thread and syncs each part before its rename)."""
    collector = make_collector(start=False)
    # Plain archives, all kept: their sizes are the point.
    collector.write_config(
        f'durability = "{durability}"\n'
        f"[rotation]\nmax_bytes = {LIMIT}\ncompress = false\n[retention]\nmax_archives = 0\n"
    )
    collector.start()
    verdicts = send_events(collector, burst("burst", 2_000), per_batch=2_000)
    assert [verdict.seq for verdict in verdicts] == list(range(1, 2_001))
    archives = check_bound(collector, "burst", 2_000)
    largest = max(len(line) for _name, lines in segments(collector, "burst") for line in lines)
    assert largest > LIMIT
    assert archives > 100  # about 300 bytes an event: the burst spans many segments
    listed = collector.gz_ia("session", "logs", "burst", "--json")
    assert [json.loads(line)["seq"] for line in listed.stdout.splitlines()] == list(range(1, 2_001))
    sessions = collector.gz_ia("sessions")
    assert "2000" in sessions.stdout, sessions.stdout
    # What the checkpoint says after the burst is what a restarted collector starts from.
    collector.stop()
    collector.start()
    more = send_events(collector, burst("burst", 2_500)[2_000:], per_batch=500)
    assert [verdict.seq for verdict in more] == list(range(2_001, 2_501))
    check_bound(collector, "burst", 2_500)
