"""Durable write passes: many files synced with one syncfs, file by file when it reports an error;
and the session summary that checkpoints carry."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from gz_ia.client.protocol import Batch, encode_frame
from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.ingest.validation import decode_batch
from gz_ia.collector.storage import _syncfs
from gz_ia.collector.storage.checkpoints import read_checkpoint
from gz_ia.collector.storage.names import state_name
from gz_ia.collector.storage.writer import Writer

_encoder = msgspec.msgpack.Encoder()
_BASE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

needs_syncfs = pytest.mark.skipif(not _syncfs.AVAILABLE, reason="syncfs(2) with error reporting needs Linux >= 5.8")


def _batch(first: int, events: list[LogEvent]) -> bytes:
    return encode_frame(Batch(first=first, events=[msgspec.Raw(_encoder.encode(e)) for e in events]))[4:]


def _event(session: str, stage: Stage, *, at: int = 0, status: Status = Status.OK) -> LogEvent:
    return LogEvent(
        timestamp=_BASE + timedelta(seconds=at),
        session_id=session,
        parent_session_id="parent-1",
        action="a",
        stage=stage,
        status=status,
        agent="agy",
        error="boom" if status is Status.FAILED else None,
    )


def _counting(calls: list[int], function: Callable[[int], None]) -> Callable[[int], None]:
    """Wrap a real system call so that the test sees which descriptors it was given."""

    def wrapper(fd: int) -> None:
        calls.append(fd)
        function(fd)

    return wrapper


def _stage_many(harness: Path, sessions: int) -> Writer:
    """A writer with one READ staged in each of ``sessions`` new sessions of ``harness``."""
    writer = Writer(max_open_files=4 * sessions)
    store = writer.root(harness, owner=os.getuid())
    batch = decode_batch(_batch(1, [_event(f"s{n}", Stage.READ) for n in range(sessions)]))
    assert not Ingest(writer).apply(store, "ab", batch).rejections
    return writer


@needs_syncfs
def test_a_pass_over_many_files_is_synced_with_one_syncfs(harness: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """100 files: one syncfs on the sessions directory (the real call), no per-file fdatasync, all acknowledged."""
    calls: list[int] = []
    monkeypatch.setattr(_syncfs, "syncfs", _counting(calls, _syncfs.syncfs))
    datasyncs: list[int] = []
    monkeypatch.setattr(os, "fdatasync", _counting(datasyncs, os.fdatasync))
    writer = _stage_many(harness, 100)
    written, failed, _ = writer.flush(durable=True)
    assert len(written) == 100
    assert failed == []
    assert len(calls) == 1
    assert datasyncs == []
    assert all((harness / "sessions" / f"s{n}.events.jsonl").stat().st_size > 0 for n in range(100))
    writer.close()


@needs_syncfs
def test_a_syncfs_error_falls_back_to_syncing_file_by_file(harness: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """syncfs reporting EIO (simulated: a real write-back error cannot be caused here) makes every file
    of that directory go through its own fdatasync; those that succeed are acknowledged."""

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "simulated write-back error")

    monkeypatch.setattr(_syncfs, "syncfs", failing)
    datasyncs: list[int] = []
    monkeypatch.setattr(os, "fdatasync", _counting(datasyncs, os.fdatasync))
    writer = _stage_many(harness, 80)
    written, failed, _ = writer.flush(durable=True)
    assert len(written) == 80
    assert failed == []
    assert len(datasyncs) == 80
    writer.close()


def test_a_few_files_are_synced_one_by_one(harness: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below the threshold no syncfs: each file gets its fdatasync."""
    monkeypatch.setattr(_syncfs, "syncfs", lambda _fd: pytest.fail("syncfs used for a small pass"))
    datasyncs: list[int] = []
    monkeypatch.setattr(os, "fdatasync", _counting(datasyncs, os.fdatasync))
    writer = _stage_many(harness, 5)
    written, failed, _ = writer.flush(durable=True)
    assert (len(written), failed, len(datasyncs)) == (5, [], 5)
    writer.close()


def test_files_closed_by_the_open_file_bound_during_a_pass_are_synced_too(
    harness: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more files in a durable pass than may be open, the ones closed again before the sync
    are synced through a new descriptor: none is acknowledged unsynced."""
    synced: set[int] = set()

    def fdatasync(fd: int) -> None:
        synced.add(os.fstat(fd).st_ino)
        real_fdatasync(fd)

    real_fdatasync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    writer = _stage_many(harness, 6)
    writer.max_open_files = 2
    written, failed, _ = writer.flush(durable=True)
    assert (len(written), failed) == (6, [])
    assert writer.open_files <= 2
    assert synced == {(harness / "sessions" / f"s{n}.events.jsonl").stat().st_ino for n in range(6)}
    writer.close()


def test_checkpoints_carry_the_summary_kept_while_staging(harness: Path) -> None:
    """first/last timestamps, parent, agent and the FAILED count reach the checkpoint, as the file has them."""
    writer = Writer()
    ingest = Ingest(writer)
    store = writer.root(harness, owner=os.getuid())
    events = [
        _event("s", Stage.READ, at=0),
        _event("s", Stage.FINISH, at=5, status=Status.FAILED),
        _event("s", Stage.READ, at=9),
    ]
    ingest.apply(store, "ab", decode_batch(_batch(1, events)))
    writer.flush()
    ingest.apply(store, "ab", decode_batch(_batch(4, [_event("s", Stage.FINISH, at=12, status=Status.FAILED)])))
    writer.flush()
    writer.close()
    checkpoint = read_checkpoint(os.open(harness / "state", os.O_RDONLY), state_name("s"))
    assert checkpoint is not None
    lines = [msgspec.json.decode(line) for line in (harness / "sessions" / "s.events.jsonl").read_bytes().splitlines()]
    assert checkpoint.first_time == lines[0]["timestamp"] == "2026-03-01T12:00:00Z"
    assert checkpoint.last_time == lines[-1]["timestamp"] == "2026-03-01T12:00:12Z"
    assert checkpoint.failures == 2
    assert (checkpoint.parent, checkpoint.agent) == ("parent-1", "agy")
