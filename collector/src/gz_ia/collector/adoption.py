"""Adopting the disk spools of clients that died before they could deliver.

A client spills events to ``<spool dir>/<producer>.<n>.spool`` while the collector is unreachable
and holds ``<producer>.lock`` while it lives. A spool whose lock is free belongs to a dead process:
the collector ingests its events under the dead producer's id (so anything already written is
recognised as a duplicate), writes them, and only then deletes the segments. A crash in between
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
            complete = True
            for path in segments:
                try:
                    if os.stat(path, follow_symlinks=False).st_uid != uid:
                        complete = False
                        continue
                    header, records = read_segment(path)
                    root = writer.root(Path(header.root), owner=uid)
                except msgspec.DecodeError as exc:
                    log.warning("cannot adopt spool %s: %s", path, exc)
                    complete = False
                    continue
                except (OSError, LayoutError) as exc:
                    log.warning("cannot adopt spool %s yet: %s; will retry", path, exc)
                    complete = False
                    break  # the later segments wait: they must not be written before this one
                outcomes = []
                for run in _runs(records):
                    frame = encode_frame(Batch(first=run[0].pseq, events=[record.body for record in run]))
                    outcomes.append(ingest.apply(root, producer, decode_batch(frame[4:])))
                _, failed, _ = writer.flush(durable=durable)
                if failed or not all(outcome.intact() for outcome in outcomes):
                    # Stop at this segment: written before it, the later ones would raise the
                    # sessions' watermarks past its events, whose retry would then be duplicates.
                    log.warning("cannot write the events of spool %s yet; will retry", path)
                    complete = False
                    break
                for outcome in outcomes:
                    on_outcome(outcome)
                    adopted += outcome.count
                path.unlink(missing_ok=True)
            if complete:
                with contextlib.suppress(OSError):
                    (directory / f"{producer}.lock").unlink()
        finally:
            os.close(lock_fd)
    if adopted:
        log.info("adopted %d spooled events of clients that exited before delivering them", adopted)
    return adopted
