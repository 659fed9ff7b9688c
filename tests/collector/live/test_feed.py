"""The writer's feed numbers every written line of a root, whether anyone subscribed yet or not."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from gz_ia.client import build_event
from gz_ia.client.protocol import Batch, encode_frame
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.ingest.validation import decode_batch
from gz_ia.collector.live import Hub
from gz_ia.collector.live.feed import WrittenFeed, source_of
from gz_ia.collector.storage.writer import Writer

_encoder = msgspec.msgpack.Encoder()


def _batch(first: int, session_id: str, actions: list[str]) -> bytes:
    events = [
        msgspec.Raw(_encoder.encode(build_event(session_id=session_id, action=action, stage="READ", agent="t")))
        for action in actions
    ]
    return encode_frame(Batch(first=first, events=events))[4:]


def test_lines_written_before_a_subscriber_are_numbered_one_each(tmp_path: Path) -> None:
    """Passes written with no subscriber advance the root's numbering by exactly the lines they
    wrote (counted as the writer joined them), so the first subscriber's frames follow on."""
    hub = Hub(epoch="e1")
    writer = Writer(background=False, on_written=WrittenFeed(hub))
    root = tmp_path / ".harness"
    root.mkdir()
    store = writer.root(root, owner=os.getuid())
    ingest = Ingest(writer)
    ingest.apply(store, "p1", decode_batch(_batch(1, "a", ["one", "two", "three"])))
    ingest.apply(store, "p2", decode_batch(_batch(1, "b", ["four", "five"])))
    writer.flush()
    ingest.apply(store, "p1", decode_batch(_batch(4, "a", ["six"])))
    writer.flush()
    source = source_of(root)
    assert not hub.buffering
    assert hub.rings[source].newest_seq == 6

    subscription = hub.subscribe(source)
    ingest.apply(store, "p2", decode_batch(_batch(3, "b", ["seven", "eight"])))
    writer.flush()
    frames = subscription.take()
    assert [frame.seq for frame in frames] == [7, 8]  # type: ignore[union-attr]
    assert [msgspec.json.decode(frame.line)["action"] for frame in frames] == ["seven", "eight"]  # type: ignore[union-attr]
