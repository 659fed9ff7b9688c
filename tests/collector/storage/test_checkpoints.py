"""A session's checkpoint on disk: what an earlier gz-ia wrote is restored, and written back the same."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from gz_ia.collector.storage.checkpoints import USAGE_FOLD, Checkpoint, encode_checkpoint
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
