"""The per-session table of delivery watermarks is bounded and forgets the producers idle longest.

A session remembers the highest event number written for each producer (at most ``MAX_WATERMARKS``
of them), so that a resent event is acknowledged as a duplicate instead of being written twice. Past
the bound it must forget producers that stopped writing, never one that is still writing: such a
producer's resend after a reconnect would otherwise be written again.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from gz_ia.client.protocol import Batch, encode_frame
from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.ingest.validation import DecodedBatch, decode_batch
from gz_ia.collector.storage.names import state_name
from gz_ia.collector.storage.sessions import RootStore
from gz_ia.collector.storage.tally import MAX_WATERMARKS
from gz_ia.collector.storage.writer import Writer

_encoder = msgspec.msgpack.Encoder()
_SESSION = "s1"


def _read(number: int, action: str) -> bytes:
    """The body of a one-event batch: event ``number`` of its producer, READ of ``action``."""
    event = LogEvent(
        timestamp=datetime.now(UTC), session_id=_SESSION, action=action, stage=Stage.READ, status=Status.OK, agent="t"
    )
    return encode_frame(Batch(first=number, events=[msgspec.Raw(_encoder.encode(event))]))[4:]


def _fill(ingest: Ingest, store: RootStore) -> None:
    """Producer "early" writes second and keeps writing while one more than the bound of others write once.

    Its last write comes shortly before the table overflows: among the most recent, but it was
    inserted first after "idle".
    """
    ingest.apply(store, "idle", decode_batch(_read(1, "idle")))
    for n in range(MAX_WATERMARKS + 1):
        if n % 500 == 0 and n <= 4000:
            assert not ingest.apply(store, "early", decode_batch(_read(n + 1, f"early {n}"))).rejections
        assert not ingest.apply(store, f"p{n}", decode_batch(_read(1, f"p{n}"))).rejections
    ingest.writer.flush()


def _resend_is_duplicate(ingest: Ingest, store: RootStore, producer: str, number: int, action: str) -> bool:
    outcome = ingest.apply(store, producer, decode_batch(_read(number, action)))
    assert not outcome.rejections
    return outcome.duplicates == 1


def test_a_producer_that_keeps_writing_keeps_its_watermark(harness: Path) -> None:
    writer = Writer()
    store = writer.root(harness, owner=os.getuid())
    ingest = Ingest(writer)
    _fill(ingest, store)
    marks = store.sessions[_SESSION].marks
    assert len(marks) <= MAX_WATERMARKS
    assert "early" in marks
    assert "idle" not in marks
    # early's last event, resent after a reconnect, is a duplicate, not written again.
    assert _resend_is_duplicate(ingest, store, "early", 4001, "early 4000")
    writer.close()


@pytest.mark.parametrize("from_checkpoint", [True, False], ids=["from its checkpoint", "from the lines"])
def test_the_watermarks_rebuilt_after_a_restart_forget_the_same_producers(harness: Path, from_checkpoint: bool) -> None:
    """After a restart the table comes back in the same order of last writes: read from the checkpoint
    a clean stop writes, or, without one, rebuilt line by line in the file's order."""
    writer = Writer()
    _fill(Ingest(writer), writer.root(harness, owner=os.getuid()))
    writer.close()
    checkpoint = harness / "state" / state_name(_SESSION)
    lines = len((harness / "sessions" / f"{_SESSION}.events.jsonl").read_bytes().splitlines())
    assert msgspec.json.decode(checkpoint.read_bytes())["seq"] == lines
    if not from_checkpoint:
        checkpoint.unlink()

    restarted = Writer()
    store = restarted.root(harness, owner=os.getuid())
    ingest = Ingest(restarted)
    assert _resend_is_duplicate(ingest, store, "early", 4001, "early 4000")
    assert "idle" not in store.sessions[_SESSION].marks
    restarted.close()


def _cycle(cycle: str) -> DecodedBatch:
    """The READ and FINISH of one cycle: one item of an export, as a producer of its own stages it."""
    now = datetime.now(UTC)
    events: list[LogEvent | None] = [
        LogEvent(
            timestamp=now, session_id=_SESSION, action="Read", stage=stage, status=Status.OK, agent="t", cycle=cycle
        )
        for stage in (Stage.READ, Stage.FINISH)
    ]
    return DecodedBatch(1, True, events, {}, {})


def test_an_item_twice_in_one_export_and_in_the_next_is_written_once(harness: Path) -> None:
    """An export's items are staged in one pass, each under its own producer: the watermark of each
    is set before the next item, so a copy later in the same export is a duplicate, as is a resend."""
    writer = Writer()
    store = writer.root(harness, owner=os.getuid())
    ingest = Ingest(writer)
    first = ingest.apply_keyed(store, [("a", _cycle("c1")), ("b", _cycle("c2")), ("a", _cycle("c1"))])
    assert (first.duplicates, first.rejections) == (2, [])
    writer.flush()
    resent = ingest.apply_keyed(store, [("b", _cycle("c2")), ("c", _cycle("c3"))])
    assert (resent.duplicates, resent.rejections) == (2, [])
    writer.flush()
    lines = (harness / "sessions" / f"{_SESSION}.events.jsonl").read_bytes().splitlines()
    assert [msgspec.json.decode(line)["delivery"] for line in lines] == ["a:1", "a:2", "b:1", "b:2", "c:1", "c:2"]
    writer.close()
