"""Adopting the disk spools of clients that died before they could deliver.

A client spills events to ``<spool dir>/<producer>.<n>.spool`` while the collector is unreachable
and holds ``<producer>.lock`` while it lives. A spool whose lock is free belongs to a dead process:
the collector ingests its events under the dead producer's id (so anything already written is
recognised as a duplicate), in the order of their producer numbers, writes them, and only then
deletes the segments. A crash in between
only means the next adoption finds the same events again and drops them as duplicates.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

import msgspec

from gz_ia.client._spool import SpoolRecord, orphaned_spools, read_segment
from gz_ia.client.protocol import (
    MAX_BATCH_EVENTS,
    PROTOCOL_VERSION,
    Batch,
    Error,
    FrameReader,
    FrameTooLarge,
    Hello,
    Verdicts,
    collector_message_decoder,
    encode_frame,
)

from .ingest import BatchOutcome, Ingest
from .storage._layout import LayoutError
from .storage.writer import Writer
from .validation import decode_batch

__all__ = ["adopt_spools", "adopt_spools_through"]

log = logging.getLogger("gz_ia.collector")


def _runs(records: list[SpoolRecord]) -> list[list[SpoolRecord]]:
    """Split records into runs of consecutive producer numbers (one batch each)."""
    runs: list[list[SpoolRecord]] = []
    for record in records:
        if runs and record.pseq == runs[-1][-1].pseq + 1 and len(runs[-1]) < MAX_BATCH_EVENTS:
            runs[-1].append(record)
        else:
            runs.append([record])
    return runs


def adopt_spools(
    directory: Path,
    ingest: Ingest,
    writer: Writer,
    *,
    uid: int,
    durable: bool,
    on_outcome: Callable[[BatchOutcome], None],
) -> int:
    """Ingest and remove every orphaned spool under ``directory``; return the events adopted.

    Only spool files owned by ``uid`` are read; ``durable`` syncs what is written before the spool
    is deleted. ``on_outcome`` receives each batch's outcome once it is written (for metrics).

    A producer's events are written in the order of their numbers, not of its segments: at exit a
    client spools its unanswered window, older numbers, after what it spilled while waiting, and
    applied segment by segment those would follow higher numbers of the same session and be taken
    for duplicates. So the whole spool is read first (it is bounded by the client's
    ``max_spool_bytes``), and nothing of it is deleted until all of it is written.
    """

    def deliver(producer: str, spool: _Spool) -> int | None:
        outcomes = []
        for root_path, records in spool.by_root.items():
            try:
                root = writer.root(Path(root_path), owner=uid)
            except (OSError, LayoutError) as exc:
                log.warning("cannot adopt the spool of %s into %s yet: %s; will retry", producer, root_path, exc)
                return None
            outcomes += [ingest.apply(root, producer, decode_batch(frame[4:])) for frame in _batch_frames(records)]
        # Every root could be opened: write the lot, then answer for it.
        _, failed, _ = writer.flush(durable=durable)
        if failed or not all(outcome.intact() for outcome in outcomes):
            log.warning("cannot write the spooled events of %s yet; will retry", producer)
            return None
        for outcome in outcomes:
            on_outcome(outcome)
        return sum(outcome.count for outcome in outcomes)

    return _adopt_each(directory, uid, deliver)


def adopt_spools_through(socket_path: Path, directory: Path, *, uid: int, timeout: float = 60.0) -> int:
    """Deliver every orphaned spool under ``directory`` as a client of the collector on ``socket_path``.

    This is adoption in a sharded collector, whose front holds no sessions: it sends each dead
    producer's events, under that producer's id and numbers, through its own socket like any client
    (one connection per root, batches in the order of their numbers), and deletes the spool only
    once every batch has its verdicts. Runs in a thread: the front's loop serves the connection.
    """

    def deliver(producer: str, spool: _Spool) -> int | None:
        try:
            return sum(
                _send_spool(socket_path, producer, root_path, records, timeout)
                for root_path, records in spool.by_root.items()
            )
        except (OSError, FrameTooLarge, msgspec.DecodeError, _NotDelivered) as exc:
            log.warning("cannot adopt the spool of %s yet: %s; will retry", producer, exc)
            return None

    return _adopt_each(directory, uid, deliver)


def _adopt_each(directory: Path, uid: int, deliver: Callable[[str, _Spool], int | None]) -> int:
    """Read each orphaned spool, ``deliver`` it (None: not now), and delete it once delivered."""
    adopted = 0
    for producer, lock_fd, segments in orphaned_spools(directory):
        try:
            spool = _read_spool(segments, uid)
            if spool is None:
                continue
            delivered = deliver(producer, spool)
            if delivered is None:
                continue
            adopted += delivered
            spool.remove(directory, producer)
        finally:
            os.close(lock_fd)
    if adopted:
        log.info("adopted %d spooled events of clients that exited before delivering them", adopted)
    return adopted


class _NotDelivered(Exception):
    """The collector answered a spooled batch with an error."""


def _send_spool(socket_path: Path, producer: str, root: str, numbered: dict[int, SpoolRecord], timeout: float) -> int:
    """Send one root's spooled events; return how many were answered (written, duplicate or rejected)."""
    frames = _batch_frames(numbered)
    reader = FrameReader()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(socket_path))
        sock.sendall(encode_frame(Hello(proto=PROTOCOL_VERSION, producer=producer, pid=0, root=root)))
        for frame in frames:
            sock.sendall(frame)
        replies = 0
        answered = 0
        while replies < len(frames) + 1:
            data = sock.recv(1 << 16)
            if not data:
                raise _NotDelivered("the collector closed the connection")
            for body in reader.feed(data):
                message = collector_message_decoder.decode(body)
                if isinstance(message, Error):
                    raise _NotDelivered(f"{message.reason}: {message.detail}")
                replies += 1
                if isinstance(message, Verdicts):
                    answered += message.count
    return answered


class _Spool:
    """What could be read of one dead producer's spool: its records by root, each event once."""

    def __init__(self) -> None:
        self.by_root: dict[str, dict[int, SpoolRecord]] = {}
        self.read: list[Path] = []
        self.complete = True
        """False when a segment was skipped (someone else's, or not a spool): the lock stays."""

    def remove(self, directory: Path, producer: str) -> None:
        """Delete the segments read (their events are written), and the lock if nothing is left."""
        for path in self.read:
            path.unlink(missing_ok=True)
        if self.complete:
            with contextlib.suppress(OSError):
                (directory / f"{producer}.lock").unlink()


def _read_spool(segments: list[Path], uid: int) -> _Spool | None:
    """Read every segment owned by ``uid``; None when one cannot be read now (retried later)."""
    spool = _Spool()
    for path in segments:
        try:
            if os.stat(path, follow_symlinks=False).st_uid != uid:
                spool.complete = False
                continue
            header, records = read_segment(path)
        except msgspec.DecodeError as exc:
            log.warning("cannot adopt spool %s: %s", path, exc)
            spool.complete = False
            continue
        except OSError as exc:
            log.warning("cannot adopt spool %s yet: %s; will retry", path, exc)
            return None
        spool.read.append(path)
        numbered = spool.by_root.setdefault(header.root, {})
        for record in records:
            numbered.setdefault(record.pseq, record)  # a resent window may repeat a spooled event
    return spool


def _batch_frames(numbered: dict[int, SpoolRecord]) -> list[bytes]:
    """The records in the order of their numbers, as Batch frames of consecutive numbers."""
    ordered = [numbered[number] for number in sorted(numbered)]
    return [encode_frame(Batch(first=run[0].pseq, events=[record.body for record in run])) for run in _runs(ordered)]
