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
from collections.abc import Callable
from pathlib import Path

import msgspec

from gz_ia.client._spool import SpoolRecord, orphaned_spools, read_segment
from gz_ia.client.protocol import MAX_BATCH_EVENTS, Batch, encode_frame

from .ingest import BatchOutcome, Ingest
from .storage._layout import LayoutError
from .storage.writer import Writer
from .validation import decode_batch

__all__ = ["adopt_spools"]

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
    """
    adopted = 0
    for producer, lock_fd, segments in orphaned_spools(directory):
        try:
            adopted += _adopt(
                directory, producer, segments, ingest, writer, uid=uid, durable=durable, on_outcome=on_outcome
            )
        finally:
            os.close(lock_fd)
    if adopted:
        log.info("adopted %d spooled events of clients that exited before delivering them", adopted)
    return adopted


def _adopt(
    directory: Path,
    producer: str,
    segments: list[Path],
    ingest: Ingest,
    writer: Writer,
    *,
    uid: int,
    durable: bool,
    on_outcome: Callable[[BatchOutcome], None],
) -> int:
    """Write one dead producer's spooled events in the order of their numbers, then delete them.

    Segment order is not that order: at exit a client spools its unanswered window, older numbers,
    after the events it spilled while waiting. Applied segment by segment, those older numbers would
    follow higher ones of the same session and be taken for duplicates. So every segment is read
    first (a spool is bounded by the client's ``max_spool_bytes``), and nothing is deleted until all
    of it is written.
    """
    readable: list[Path] = []
    by_root: dict[str, dict[int, SpoolRecord]] = {}
    complete = True
    for path in segments:
        try:
            if os.stat(path, follow_symlinks=False).st_uid != uid:
                complete = False
                continue
            header, records = read_segment(path)
        except msgspec.DecodeError as exc:
            log.warning("cannot adopt spool %s: %s", path, exc)
            complete = False
            continue
        except OSError as exc:
            log.warning("cannot adopt spool %s yet: %s; will retry", path, exc)
            return 0
        readable.append(path)
        numbered = by_root.setdefault(header.root, {})
        for record in records:
            numbered.setdefault(record.pseq, record)  # a resent window may repeat a spooled event
    adopted = 0
    for root_path, numbered in by_root.items():
        try:
            root = writer.root(Path(root_path), owner=uid)
        except (OSError, LayoutError) as exc:
            log.warning("cannot adopt the spool of %s into %s yet: %s; will retry", producer, root_path, exc)
            return adopted
        ordered = [numbered[number] for number in sorted(numbered)]
        outcomes = []
        for run in _runs(ordered):
            frame = encode_frame(Batch(first=run[0].pseq, events=[record.body for record in run]))
            outcomes.append(ingest.apply(root, producer, decode_batch(frame[4:])))
        _, failed, _ = writer.flush(durable=durable)
        if failed or not all(outcome.intact() for outcome in outcomes):
            log.warning("cannot write the spooled events of %s yet; will retry", producer)
            return adopted
        for outcome in outcomes:
            on_outcome(outcome)
            adopted += outcome.count
    for path in readable:
        path.unlink(missing_ok=True)
    if complete:
        with contextlib.suppress(OSError):
            (directory / f"{producer}.lock").unlink()
    return adopted
