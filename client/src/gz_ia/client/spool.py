"""The disk spool's format: events kept on disk while the collector stays away too long.

Public because two distributions share it: the client's sender writes spools, and the collector
(adoption, one-shot delivery) reads and writes the same files. docs/protocol.md describes it.

When the in-memory queue is full the sender spills its oldest events here instead of dropping them.
A spool belongs to one producer and holds numbered segments::

    <spool dir>/<producer>.lock              flock held while the producing process lives
    <spool dir>/<producer>.<n:06d>.spool     header record, then one record per event

Every record is a 4-byte big-endian length and a MessagePack body. Events get their producer number
(``pseq``) when spilled, so a resend from the spool is recognised by the collector like any other
resend, whether the client delivers it after reconnecting or the collector adopts the spool of a
client that died (its lock is free). The header names the root the events go to and (from version 2)
the collector socket they were meant for, so that only a collector entitled to them adopts them; a
version 1 header, without a socket, still reads (``socket`` is empty). Past ``max_bytes`` the oldest
segment is deleted and its events are counted as dropped, per session, so that the loss can be reported.

Every event is redacted (:func:`.redaction.spool_redactor`) as its record is made: a secret the
collector would never store must not wait for it on disk either.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec

from .redaction import spool_redactor

__all__ = [
    "SPOOL_VERSION",
    "Spool",
    "SpoolHeader",
    "SpoolRecord",
    "frame_record",
    "orphaned_spools",
    "read_segment",
]

SPOOL_VERSION: Final = 2
SEGMENT_BYTES: Final = 1 << 20
_LENGTH: Final = struct.Struct(">I")


class SpoolHeader(msgspec.Struct, tag="spool", kw_only=True):
    """First record of a segment: whose events these are and where they go."""

    version: int
    producer: str
    root: str
    socket: str = ""
    """The collector's socket the events were sent to (absolute); empty in version 1 spools."""


class SpoolRecord(msgspec.Struct, array_like=True):
    """One spilled event: its producer number, its session and its encoded LogEvent."""

    pseq: int
    session_id: str
    body: msgspec.Raw


_encoder: Final = msgspec.msgpack.Encoder()
_header_decoder: Final = msgspec.msgpack.Decoder(SpoolHeader)
_record_decoder: Final = msgspec.msgpack.Decoder(SpoolRecord)


_any_decoder: Final = msgspec.msgpack.Decoder()


def frame_record(message: SpoolHeader | SpoolRecord) -> bytes:
    """One record of a segment as written: its length, then its MessagePack body (an event's
    free text redacted)."""
    if isinstance(message, SpoolRecord):
        message = _redacted(message)
    body = _encoder.encode(message)
    return _LENGTH.pack(len(body)) + body


def _redacted(record: SpoolRecord) -> SpoolRecord:
    """``record`` with its event's free text redacted (itself when clean, or not an event's map)."""
    redactor = spool_redactor()
    if redactor is None:
        return record
    try:
        fields = _any_decoder.decode(record.body)
    except msgspec.DecodeError:
        return record  # not an event: the collector rejects it, and keeps it in the rejects file redacted
    if not isinstance(fields, dict):
        return record
    changed = redactor.fields(fields)
    if changed is None:
        return record
    return SpoolRecord(record.pseq, record.session_id, msgspec.Raw(_encoder.encode(changed)))


def read_segment(path: Path) -> tuple[SpoolHeader, list[SpoolRecord]]:
    """Read one segment; a torn last record (a crash mid-append) is ignored.

    Raises:
        OSError: the file cannot be read.
        msgspec.DecodeError: not a spool segment: no spool header, or not a regular file.
    """
    # Never through a symlink, and never waiting on a FIFO put under a segment's name.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise msgspec.DecodeError(f"{path} is not a regular file")
        with open(fd, "rb", closefd=False) as source:
            data = source.read()
    finally:
        os.close(fd)
    records: list[SpoolRecord] = []
    header: SpoolHeader | None = None
    offset = 0
    while offset + 4 <= len(data):
        (size,) = _LENGTH.unpack_from(data, offset)
        end = offset + 4 + size
        if end > len(data):
            break
        body = data[offset + 4 : end]
        if header is None:
            header = _header_decoder.decode(body)
        else:
            try:
                records.append(_record_decoder.decode(body))
            except msgspec.DecodeError:
                break
        offset = end
    if header is None:
        raise msgspec.DecodeError(f"{path} has no spool header")
    return header, records


class Spool:
    """The spool of one producer (see the module docstring).

    Args:
        directory: the spool directory (created 0700).
        producer: the producer id owning the spool.
        root: the session root the events go to.
        max_bytes: bound on the spool's size; past it the oldest segment is dropped.
        socket: the collector's socket the events were meant for, recorded in each segment.
    """

    def __init__(self, directory: Path, producer: str, root: str, *, max_bytes: int, socket: str = "") -> None:
        self.directory = directory
        self.producer = producer
        self.root = root
        self.socket = os.path.abspath(socket) if socket else ""
        self.max_bytes = max_bytes
        self._lock_fd: int | None = None
        self._segments: list[Path] = []
        self._current: Path | None = None
        self._current_size = 0
        self._next_segment = 1
        self.bytes = 0

    @property
    def empty(self) -> bool:
        """Whether nothing is spooled."""
        return not self._segments

    def _ensure_lock(self) -> None:
        if self._lock_fd is not None:
            return
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.directory / f"{self.producer}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._lock_fd = fd

    def append(self, records: list[SpoolRecord]) -> dict[str, int]:
        """Spill ``records`` to disk; return per-session counts of events dropped to stay in bounds.

        Raises:
            OSError: the spool cannot be written (the caller then drops and counts instead).
        """
        self._ensure_lock()
        dropped: dict[str, int] = {}
        data = b"".join(frame_record(record) for record in records)
        # Small spools get small segments, so that dropping the oldest one loses little.
        segment_bytes = min(SEGMENT_BYTES, max(4096, self.max_bytes // 8))
        if self._current is None or self._current_size >= segment_bytes:
            self._current = self.directory / f"{self.producer}.{self._next_segment:06d}.spool"
            self._next_segment += 1
            header = frame_record(
                SpoolHeader(version=SPOOL_VERSION, producer=self.producer, root=self.root, socket=self.socket)
            )
            data = header + data
            self._segments.append(self._current)
            self._current_size = 0
        fd = os.open(self._current, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self._current_size += len(data)
        self.bytes += len(data)
        while self.bytes > self.max_bytes and len(self._segments) > 1:
            for session_id, count in self._drop_oldest().items():
                dropped[session_id] = dropped.get(session_id, 0) + count
        return dropped

    def _drop_oldest(self) -> dict[str, int]:
        oldest = self._segments.pop(0)
        counts: dict[str, int] = {}
        with contextlib.suppress(OSError, msgspec.DecodeError):
            _, records = read_segment(oldest)
            for record in records:
                counts[record.session_id] = counts.get(record.session_id, 0) + 1
        self._remove(oldest)
        return counts

    def _remove(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            self.bytes -= path.stat().st_size
            path.unlink()
        if path == self._current:
            self._current = None
            self._current_size = 0

    def take_oldest(self) -> tuple[Path, list[SpoolRecord]] | None:
        """Return the oldest segment's records for sending; it stays on disk until :meth:`release`."""
        while self._segments:
            path = self._segments[0]
            try:
                _, records = read_segment(path)
            except (OSError, msgspec.DecodeError):
                self._segments.pop(0)
                self._remove(path)
                continue
            self._segments.pop(0)
            if path == self._current:
                self._current = None
                self._current_size = 0
            return path, records
        return None

    def release(self, path: Path) -> None:
        """Delete a segment whose events were all acknowledged."""
        with contextlib.suppress(OSError):
            self.bytes -= path.stat().st_size
            path.unlink()

    def close(self) -> None:
        """Release the lock; remove the lock file when nothing is left to adopt."""
        if self._lock_fd is None:
            return
        if not self._segments and not any(self.directory.glob(f"{self.producer}.*.spool")):
            with contextlib.suppress(OSError):
                (self.directory / f"{self.producer}.lock").unlink()
        os.close(self._lock_fd)
        self._lock_fd = None

    def forget_after_fork(self) -> None:
        """In a forked child: the parent owns the lock and the files."""
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
        self._lock_fd = None


def orphaned_spools(directory: Path) -> Iterator[tuple[str, int, list[Path]]]:
    """Yield ``(producer, lock fd, segments)`` for each spool whose producer died (lock free).

    The caller owns the returned lock fd (held, so the producer cannot come back meanwhile) and
    closes it after adopting the segments.
    """
    if not directory.is_dir():
        return
    for lock in sorted(directory.glob("*.lock")):
        producer = lock.name[: -len(".lock")]
        try:
            fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        segments = sorted(directory.glob(f"{producer}.*.spool"))
        yield producer, fd, segments
