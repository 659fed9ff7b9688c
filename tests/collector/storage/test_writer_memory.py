"""Many sessions keep memory flat: idle session state is released and rebuilt from the files."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from gz_ia.client.protocol import Batch, encode_frame
from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.ingest.validation import decode_batch
from gz_ia.collector.storage.writer import Writer

_encoder = msgspec.msgpack.Encoder()
_CYCLE = (Stage.READ, Stage.PENDING, Stage.FINISH)


def _batch(first: int, events: list[tuple[str, Stage]]) -> bytes:
    now = datetime.now(UTC)
    bodies = [
        msgspec.Raw(
            _encoder.encode(LogEvent(timestamp=now, session_id=s, action="a", stage=st, status=Status.OK, agent="agy"))
        )
        for s, st in events
    ]
    return encode_frame(Batch(first=first, events=bodies))[4:]


def test_idle_sessions_are_released_and_come_back_with_their_state(harness: Path) -> None:
    """Past max_idle_sessions the oldest idle states leave memory; their next event continues seq and rules."""
    writer = Writer(max_idle_sessions=10)
    ingest = Ingest(writer)
    store = writer.root(harness, owner=os.getuid())
    first = 1
    for n in range(60):
        events = [(f"s{n}", Stage.READ), (f"s{n}", Stage.FINISH)]
        outcome = ingest.apply(store, "ab", decode_batch(_batch(first, events)))
        first += 2
        assert not outcome.rejections
        writer.flush()
    assert len(store.sessions) <= 10 + 10 // 8 + 1
    assert "s0" not in store.sessions
    # s0 comes back: seq continues at 3, and FINISH without an open cycle is still refused.
    outcome = ingest.apply(store, "ab", decode_batch(_batch(first, [("s0", Stage.FINISH), ("s0", Stage.READ)])))
    writer.flush()
    assert [r.reason.value for r in outcome.rejections] == ["finish_without_start"]
    lines = (harness / "sessions" / "s0.events.jsonl").read_text().splitlines()
    assert [msgspec.json.decode(line)["seq"] for line in lines] == [1, 2, 3]
    # A resend of an event written before the release is still recognised as a duplicate.
    again = ingest.apply(store, "ab", decode_batch(_batch(1, [("s0", Stage.READ), ("s0", Stage.FINISH)])))
    assert again.duplicates == 2
    writer.close()


def test_the_backlog_can_be_read_from_another_thread_while_the_loop_stages(harness: Path) -> None:
    """``pending_bytes`` backs the ``gzia_backlog_bytes`` gauge, read by the metrics server's thread
    while the event loop adds sessions to the dirty set: it must never see the set change under it
    (nor must the session gauges, read the same way).

    The sessions are opened and written first, so that staging makes no system call: the two
    threads then take turns only at Python's switch interval, which lands inside a read of the set.
    """
    writer = Writer()
    ingest = Ingest(writer)
    store = writer.root(harness, owner=os.getuid())
    groups = [[f"s{group}-{k}" for k in range(8)] for group in range(100)]
    errors: list[BaseException] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            try:
                assert writer.pending_bytes >= 0
                assert writer.sessions_active <= writer.sessions_known == 800
            except BaseException as exc:  # reported by the assertion below, on the test's thread
                errors.append(exc)
                return

    scraper = threading.Thread(target=scrape)
    first = 1
    try:
        for round_ in range(11):
            for sessions in groups:
                batch = _batch(first, [(session, _CYCLE[round_ % 3]) for session in sessions])
                assert not ingest.apply(store, "ab", decode_batch(batch)).rejections
                first += len(sessions)
            if round_ == 0:
                writer.flush()
                scraper.start()
            else:
                writer.take()  # detached and dropped: the dirty set starts empty again
            if errors:
                break
    finally:
        done.set()
        if scraper.is_alive():
            scraper.join()
        writer.close()
    assert errors == []
