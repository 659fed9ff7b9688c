"""A session's checkpoint on disk: what an earlier gz-ia wrote is restored, and written back the same."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from gz_ia.client.schema import Stage
from gz_ia.collector.storage.checkpoints import MAX_QUIET_POINTS, USAGE_FOLD, Checkpoint, QuietPoint, encode_checkpoint
from gz_ia.collector.storage.replay import SessionFold, Trace
from gz_ia.collector.storage.writer import Writer

# A checkpoint exactly as the collector has written it since it counted usage by today's rule.
STORED = (
    b'{"segment":3,"seq":42,"segment_seq":40,"started":1764590000.5,"open_actions":{"read":"READ"},'
    b'"open_cycles":[["edit","c1","PENDING"]],"marks":{"p1":7},"failures":2,'
    b'"first_time":"2026-12-01T10:00:00Z","last_time":"2026-12-01T11:00:00Z","parent":"top",'
    b'"agent":"claude","newest_time":"2026-12-01T11:30:00Z","usage_fold":1}\n'
)
# The same from before checkpoints recorded it: the newest timestamp stays unknown, not made up.
EARLIER = STORED.replace(b',"newest_time":"2026-12-01T11:30:00Z"', b"")


def _restored(harness: Path, stored: bytes) -> bytes:
    writer = Writer(background=False)
    store = writer.root(harness, owner=os.getuid())
    (harness / "state" / "s1.session.json").write_bytes(stored)
    state = writer.session(store, "s1")
    try:
        assert (state.seq, state.segment, state.segment_seq, state.failures) == (42, 3, 40, 2)
        assert set(state.open_actions) == {"read", ("edit", "c1")}
        assert (state.parent, state.agent, state.marks) == ("top", "claude", {"p1": 7})
        return encode_checkpoint(state.checkpoint())
    finally:
        writer.close()


def test_a_stored_checkpoint_is_restored_and_written_back_byte_for_byte(harness: Path) -> None:
    assert _restored(harness, STORED) == STORED


# Since it counted usage: tokens by kind, cost and the newest model, the records, the hooks' readings.
WITH_USAGE = STORED.replace(
    b',"usage_fold":1}\n',
    b',"tokens":[10,2,300,0],"cost_usd":0.25,"model":"m-1","usage_records":3,"hook_tokens":[5,1,0,0],'
    b'"hook_cost_usd":0.5,"hook_records":1,"usage_fold":1}\n',
)


def test_a_checkpoint_with_usage_is_restored_and_written_back_byte_for_byte(harness: Path) -> None:
    """The usage totals survive the round trip through a session's state."""
    assert _restored(harness, WITH_USAGE) == WITH_USAGE


def test_a_checkpoint_without_the_newest_time_keeps_it_unknown(harness: Path) -> None:
    assert _restored(harness, EARLIER) == EARLIER


def test_a_codex_or_gemini_checkpoint_of_an_earlier_gz_ia_is_not_taken_for_its_usage() -> None:
    """An earlier gz-ia did not count the plain-key usage the Codex and Gemini CLI hooks stored: the
    checkpoints of their sessions are replayed past (the lines count anew), every other one is kept."""
    earlier = msgspec.json.decode(EARLIER.replace(b',"usage_fold":1', b""), type=Checkpoint)
    assert earlier.usage_complete  # a Claude Code session: nothing of it was left uncounted
    for agent in ("codex", "gemini-cli"):
        assert not msgspec.structs.replace(earlier, agent=agent).usage_complete
        assert msgspec.structs.replace(earlier, agent=agent, usage_fold=USAGE_FOLD).usage_complete


# Since `gz-ia session why` reads it: cycles begun, the first failure, quiet points, the stretch since.
WITH_HISTORY = STORED.replace(
    b',"usage_fold":1}\n',
    b',"usage_fold":1,"history":true,"cycles":21,"first_failed":["2026-12-01T10:30:00Z","edit","boom",false],'
    b'"quiet":[[40,20,12,0.25,3,6,0.5,1,"2026-12-01T10:00:00Z","2026-12-01T10:50:00Z",'
    b'"2026-12-01T10:01:00Z","2026-12-01T10:51:00Z",["read",["edit","c1"]]]],"quiet_step":2,'
    b'"begun_low":"2026-12-01T10:55:00Z","open_used":[["edit","c1"]]}\n',
)


def test_a_checkpoint_with_history_is_restored_and_written_back_byte_for_byte(harness: Path) -> None:
    assert _restored(harness, WITH_HISTORY) == WITH_HISTORY


def test_quiet_points_are_thinned_to_the_bound_and_count_what_came_before_them() -> None:
    """Cycles one after another: every FINISH is a quiet moment; past the bound every other point
    goes, the stretches they ended joined, and points are taken twice as far apart."""
    fold = SessionFold()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    cycles = 3 * MAX_QUIET_POINTS
    for number in range(cycles):
        for offset, stage in ((0, Stage.READ), (1, Stage.FINISH)):
            at = start + timedelta(seconds=2 * number + offset)
            attrs = {"gen_ai.usage.input_tokens": 10} if stage is Stage.FINISH else None
            fold.apply(Trace("step", stage, seq=2 * number + offset + 1, timestamp=at.isoformat(), attrs=attrs))
    rows = fold.quiet_list()
    assert rows is not None and len(rows) <= MAX_QUIET_POINTS
    points = [QuietPoint(*row) for row in rows]
    assert fold.quiet_step == 8  # thinned three times (at the 257th, 385th and 641st cycle)
    assert len(points) > MAX_QUIET_POINTS // 2
    low = start
    for point in points:
        assert (point.cycles, point.tokens, point.records) == (point.seq // 2, 10 * point.seq // 2, point.seq // 2)
        # Its stretch: the cycles begun since the point before, READ at even seconds.
        assert point.begun_low == low
        assert point.begun_high == start + timedelta(seconds=point.seq - 2)
        low = start + timedelta(seconds=point.seq)
    assert fold.cycles == cycles
