"""Adopting the disk spools of clients that died before they could deliver.

A client spills events to ``<spool dir>/<producer>.<n>.spool`` while the collector is unreachable
and holds ``<producer>.lock`` while it lives. A spool whose lock is free belongs to a dead process.
Each segment's header names the root its events go to and the collector socket they were sent to
(older clients name none). A collector adopts a segment only when it is entitled to it: meant for
one of its own sockets, for a socket where no collector answers any more (the collector moved), or
for none; and only once it holds the root's lock (:mod:`..storage.root_lock`), so a root another
collector serves is left to that one. It ingests the events under the dead producer's id (so
anything already written is recognised as a duplicate), in the order of their producer numbers, in
batches within the protocol's limits, writes them, and only then deletes the segments. A crash in
between only means the next adoption finds the same events again and drops them as duplicates.

A segment that can never be adopted (unreadable, holding an event larger than a frame, or meant for
a root that is refused for a reason that will not change) is moved into ``<spool dir>/quarantine/``
with a ``.reason`` file beside it, counted and listed by ``gz-ia status``: it never holds up the
others, and nothing in it is deleted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client import trust
from gz_ia.client.protocol import (
    MAX_BATCH_EVENTS,
    MAX_FRAME,
    Batch,
)
from gz_ia.client.spool import SpoolRecord, orphaned_spools, read_segment
from gz_ia.collector.errors import CollectorError
from gz_ia.collector.ingest.validation import decode_batch
from gz_ia.collector.metrics import Metrics
from gz_ia.collector.storage.root_lock import RootLocked
from gz_ia.collector.storage.roots import LayoutError, transient_cause
from gz_ia.collector.storage.sessions import RootStore

from .intake import Intake

__all__ = [
    "QUARANTINE_DIR",
    "Adoption",
    "Deliver",
    "NotNow",
    "Unadoptable",
    "adopt_each",
    "adopt_spools",
    "batch_bodies",
    "count_adoption",
    "entitled",
    "quarantined_spools",
]

log = logging.getLogger("gz_ia.collector")

QUARANTINE_DIR: Final = "quarantine"
_REASON_SUFFIX: Final = ".reason"
_BATCH_BYTES: Final = MAX_FRAME - 1024
"""Encoded events per adoption batch: the batch's envelope around them fits in what is left of a frame."""


class NotNow(CollectorError):
    """A spool cannot be delivered now (a failed write, a root another collector serves): retried later."""


class Unadoptable(CollectorError):
    """A spool can never be delivered as it is: it is quarantined."""


class Adoption:
    """What one round of adoption did: events delivered, spool files adopted and quarantined."""

    def __init__(self) -> None:
        self.events = 0
        self.adopted = 0
        self.quarantined = 0


Deliver = Callable[[str, str, list[SpoolRecord]], int]
"""Deliver one producer's records for one root, ordered by number; return how many were answered.
Raises :class:`NotNow` or :class:`Unadoptable`."""


def adopt_spools(
    directory: Path,
    intake: Intake,
    *,
    uid: int,
    sockets: list[str],
    open_root: Callable[[Path], RootStore],
) -> Adoption:
    """Ingest every orphaned spool under ``directory`` this collector is entitled to (see the module).

    Only spool files owned by ``uid`` are read; ``sockets`` are this collector's; ``open_root``
    returns a root's store once this collector holds its lock (raising
    :class:`~..storage.root_lock.RootLocked` otherwise). Each root's part is written at once
    through ``intake`` (:meth:`.intake.Intake.write_now`), with the collector's durability,
    before the spool is deleted.

    A producer's events are written in the order of their numbers, not of its segments: at exit a
    client spools its unanswered window, older numbers, after what it spilled while waiting, and
    applied segment by segment those would follow higher numbers of the same session and be taken
    for duplicates. So each root's part of a spool is read whole first (it is bounded by the
    client's ``max_spool_bytes``), and nothing of it is deleted until all of it is written.
    """

    def deliver(producer: str, root_path: str, records: list[SpoolRecord]) -> int:
        bodies = batch_bodies(records)
        try:
            root = open_root(Path(root_path))
        except RootLocked as exc:
            raise NotNow(str(exc)) from exc
        except LayoutError as exc:
            if transient_cause(exc) is not None:
                raise NotNow(str(exc)) from exc
            raise Unadoptable(str(exc)) from exc
        except OSError as exc:
            raise NotNow(f"cannot open root {root_path!r}: {exc}") from exc
        outcomes = intake.write_now(root, producer, [decode_batch(body) for body in bodies])
        if outcomes is None:
            raise NotNow("its events could not be written")
        return sum(outcome.count for outcome in outcomes)

    return adopt_each(directory, uid, entitled(sockets), deliver)


def count_adoption(metrics: Metrics, done: Adoption) -> None:
    """Count what a round of adoption did (events, and spool files by outcome)."""
    if done.events:
        metrics.spool_adopted.inc(done.events)
    if done.adopted:
        metrics.spool_files.labels("adopted").inc(done.adopted)
    if done.quarantined:
        metrics.spool_files.labels("quarantined").inc(done.quarantined)


def quarantined_spools(directory: Path) -> list[dict[str, str]]:
    """The spool files and hook drops moved aside under ``directory``, each with why (for ``gz-ia status``)."""
    quarantine = directory / QUARANTINE_DIR
    try:
        paths = sorted(path for path in quarantine.iterdir() if path.name.endswith((".spool", ".drop")))
    except OSError:
        return []
    listed = []
    for path in paths:
        try:
            reason = path.with_name(path.name + _REASON_SUFFIX).read_text(errors="replace").strip()
        except OSError:
            reason = ""
        listed.append({"path": str(path), "reason": reason})
    return listed


class _Part:
    """One root's share of a dead producer's spool: its records (each number once) and segment files."""

    def __init__(self, socket_path: str) -> None:
        self.socket = socket_path
        self.numbered: dict[int, SpoolRecord] = {}
        self.paths: list[Path] = []

    def ordered(self) -> list[SpoolRecord]:
        return [self.numbered[number] for number in sorted(self.numbered)]


def adopt_each(directory: Path, uid: int, entitled: Callable[[str], bool], deliver: Deliver) -> Adoption:
    """Adopt each orphaned spool (see :func:`_adopt_one`); one that fails never stops the others."""
    done = Adoption()
    for producer, lock_fd, segments in orphaned_spools(directory):
        try:
            _adopt_one(directory, producer, segments, uid, entitled, deliver, done)
        except Exception:  # a bug on one spool must not keep every later one waiting
            log.exception("cannot adopt the spool of %s; will retry", producer)
        finally:
            os.close(lock_fd)
    if done.events:
        log.info("adopted %d spooled events of clients that exited before delivering them", done.events)
    return done


def _adopt_one(
    directory: Path,
    producer: str,
    segments: list[Path],
    uid: int,
    entitled: Callable[[str], bool],
    deliver: Deliver,
    done: Adoption,
) -> None:
    """Deliver, quarantine or leave each root's part of one dead producer's spool."""
    parts: dict[str, _Part] = {}
    left = False
    """Something stays for later (or is not this collector's): the producer's lock file too."""
    for path in segments:
        try:
            if os.stat(path, follow_symlinks=False).st_uid != uid:
                left = True
                continue
            header, records = read_segment(path)
        except msgspec.DecodeError as exc:
            if _quarantine(directory, path, f"unreadable: {exc}"):
                done.quarantined += 1
            else:
                left = True
            continue
        except OSError as exc:
            log.warning("cannot adopt spool %s yet: %s; will retry", path, exc)
            return  # a segment missing from its root's part would have its numbers taken as written
        part = parts.setdefault(header.root, _Part(header.socket))
        part.paths.append(path)
        for record in records:
            part.numbered.setdefault(record.pseq, record)  # a resent window may repeat a spooled event
    for root, part in parts.items():
        if not entitled(part.socket):
            left = True
            continue
        try:
            count = deliver(producer, root, part.ordered())
        except NotNow as exc:
            log.warning("cannot adopt the spool of %s into %s yet: %s; will retry", producer, root, exc)
            left = True
            continue
        except Unadoptable as exc:
            moved = sum(_quarantine(directory, path, f"cannot be adopted into {root}: {exc}") for path in part.paths)
            done.quarantined += moved
            left = left or moved < len(part.paths)
            continue
        done.events += count
        done.adopted += len(part.paths)
        for path in part.paths:
            path.unlink(missing_ok=True)
    if not left:
        with contextlib.suppress(OSError):
            (directory / f"{producer}.lock").unlink()


def _quarantine(directory: Path, path: Path, reason: str) -> bool:
    """Move a spool file that can never be adopted into the quarantine directory, saying why;
    False when it cannot be moved now (it stays, and is tried again next round)."""
    quarantine = directory / QUARANTINE_DIR
    try:
        quarantine.mkdir(mode=0o700, exist_ok=True)
        target = quarantine / path.name
        number = 1
        while target.exists():
            target = quarantine / f"{path.stem}.{number}{path.suffix}"
            number += 1
        target.with_name(target.name + _REASON_SUFFIX).write_text(reason + "\n")
        path.rename(target)
    except OSError as exc:
        log.error("cannot quarantine spool %s (%s): %s; will retry", path, reason, exc)
        return False
    log.error("spool %s cannot be adopted: %s; moved to %s", path, reason, target)
    return True


def entitled(sockets: list[str]) -> Callable[[str], bool]:
    """Whether this collector (listening on ``sockets``) may adopt a spool meant for a socket."""
    ours = {os.path.realpath(path) for path in sockets}
    answers: dict[str, bool] = {}

    def entitled(meant_for: str) -> bool:
        if not meant_for or os.path.realpath(meant_for) in ours:
            return True
        if meant_for not in answers:
            answers[meant_for] = _answers(meant_for)
            if answers[meant_for]:
                log.debug("leaving spools meant for %s to the collector there", meant_for)
        return not answers[meant_for]

    return entitled


def _answers(path: str) -> bool:
    """Whether a collector listens on the socket ``path`` (a full accept queue counts as one)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            trust.connect(probe, path)  # another user's listener is no collector of ours
        except BlockingIOError:
            return True
        except OSError:
            return False
    return True


def batch_bodies(records: list[SpoolRecord]) -> list[bytes]:
    """Batch bodies of the records, in order: runs of consecutive numbers, each within the limits
    of one frame (bytes and events).

    Raises:
        Unadoptable: an event is larger than a frame can carry.
    """
    bodies: list[bytes] = []
    run: list[SpoolRecord] = []
    size = 0
    for record in records:
        length = len(record.body)
        if length > _BATCH_BYTES:
            raise Unadoptable(f"event {record.pseq} of session {record.session_id!r} is {length} bytes, over a frame")
        if run and (record.pseq != run[-1].pseq + 1 or len(run) >= MAX_BATCH_EVENTS or size + length > _BATCH_BYTES):
            bodies.append(_batch_body(run))
            run, size = [], 0
        run.append(record)
        size += length
    if run:
        bodies.append(_batch_body(run))
    return bodies


def _batch_body(run: list[SpoolRecord]) -> bytes:
    return msgspec.msgpack.encode(Batch(first=run[0].pseq, events=[record.body for record in run]))
