"""Deliver a few events from a short-lived process, in order, exactly once, or spool them.

``gz-ia session log`` and ``gz-ia hook claude-code`` run once per event and exit. They cannot keep
the thin client's background thread alive until a collector comes back, so each call delivers its
events synchronously and, when no collector answers, leaves them in the client spool for a
collector to adopt (at its start, then every 30 s).

A :class:`Ledger` keeps what makes that safe across calls, one small JSON file per key (a session
id, or a Claude Code session) under ``<spool dir>/ledgers/``, locked with ``flock`` while a call
uses it:

- a producer id of its own and the next producer number, so that an event spooled after a timeout
  and then adopted is recognised as already written (the collector's per-producer watermark);
- whether events of this key are still in the spool: while they are, later events are spooled
  too, so a collector never sees a FINISH before the READ that opened its cycle;
- a small ``data`` map its owner may use (the hook keeps its tool calls' start times there).

A lost ledger only costs a new producer id: numbering starts again under a name never used before.
Only the standard library, msgspec and ``gz_ia.client`` are imported (no click, no asyncio), so
that a call costs little more than the interpreter's start.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import hashlib
import os
import socket
import time
from pathlib import Path
from typing import Any, Final

import msgspec

from gz_ia.client._spool import SPOOL_VERSION, SpoolHeader, SpoolRecord, frame_record
from gz_ia.client.protocol import (
    PROTOCOL_VERSION,
    Batch,
    Error,
    FrameReader,
    FrameTooLarge,
    Hello,
    RejectReason,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
)
from gz_ia.client.schema import LogEvent

__all__ = ["Delivery", "Ledger", "Outcome"]

LEDGER_DIR: Final = "ledgers"
LEDGER_MAX_AGE: Final = 7 * 86_400
"""Seconds after its last use past which a ledger with nothing spooled is removed."""
_encoder: Final = msgspec.msgpack.Encoder()
# Refusals that a later attempt cannot turn into a delivery: spooling them would only defer them.
_PERMANENT: Final = frozenset(
    {RejectReason.ROOT_NOT_ALLOWED, RejectReason.PERMISSION_DENIED, RejectReason.UNSUPPORTED_VERSION}
)


class Outcome(enum.StrEnum):
    """What became of the events of one :meth:`Ledger.deliver` call."""

    ACCEPTED = "accepted"
    """The collector answered; each event is written, or rejected with its reason."""
    SPOOLED = "spooled"
    """No collector answered in time: the events are in the spool, written when one adopts it."""
    REFUSED = "refused"
    """The collector refused the connection itself (root not allowed, permission, version)."""
    LOST = "lost"
    """No collector answered and the spool could not be written."""


class Delivery(msgspec.Struct, frozen=True):
    """The answer for a list of events: the outcome, and per event its seq or rejection."""

    outcome: Outcome
    seqs: list[int] = []
    """Per event: its ``seq``, ``-1`` if already written, ``0`` if rejected (ACCEPTED only)."""
    rejected: dict[int, tuple[str, str]] = {}
    """Index of each rejected event: (reason, detail)."""
    detail: str = ""
    """Why the events were spooled, refused or lost."""
    spool: str = ""
    """The spool directory, when spooled."""


class _State(msgspec.Struct, kw_only=True):
    producer: str
    next: int = 1
    data: dict[str, Any] = {}


def ledger_directory(spool_dir: Path) -> Path:
    """Where ledgers live: beside the spool segments, out of the way of spool adoption."""
    return spool_dir / LEDGER_DIR


class Ledger:
    """One key's delivery state, locked while it is open (use as a context manager).

    Args:
        key: what orders the events: calls with one key deliver in the order they take the lock.
        spool_dir: the client spool directory (``gz_ia.client.env.default_spool_dir()``).
        socket_path: the collector socket.
        root: the session root named in the handshake.
    """

    def __init__(self, key: str, *, spool_dir: Path, socket_path: Path, root: Path) -> None:
        self.spool_dir = spool_dir
        self.socket_path = socket_path
        self.root = root
        name = hashlib.sha256(key.encode()).hexdigest()[:32]
        self.path = ledger_directory(spool_dir) / f"{name}.json"
        self._fd = -1
        self._state = _State(producer=os.urandom(16).hex())  # not secrets: its import costs a call
        self._fresh = True

    @property
    def data(self) -> dict[str, Any]:
        """The owner's own map, saved with the ledger (keep it small: it is read on every call)."""
        return self._state.data

    @property
    def producer(self) -> str:
        """The producer id this key's events are sent and spooled under."""
        return self._state.producer

    def __enter__(self) -> Ledger:
        directory = self.path.parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        raw = os.pread(self._fd, 1 << 20, 0)
        if raw:
            with contextlib.suppress(msgspec.DecodeError):  # torn by a crash: start under a new producer
                self._state = msgspec.json.decode(raw, type=_State)
                self._fresh = False
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        try:
            if kind is None:  # a failed call changes nothing
                body = msgspec.json.encode(self._state)
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, body, 0)
        finally:
            os.close(self._fd)
            self._fd = -1
        if self._fresh:
            self._fresh = False
            _forget_old_ledgers(self.path.parent, keep=self.path)

    def remove(self) -> None:
        """Forget this key once nothing of it is spooled (its session ended); the lock stays held."""
        if not self._spooled_segments():
            self.path.unlink(missing_ok=True)

    def deliver(self, events: list[LogEvent], *, timeout: float) -> Delivery:
        """Send ``events`` as one batch and wait up to ``timeout`` seconds for the verdict; spool them
        if no collector answers, or if earlier events of this key are still in the spool."""
        first = self._state.next
        self._state.next += len(events)
        bodies = [_encoder.encode(event) for event in events]
        if self._spooled_segments():
            return self._spool(first, events, bodies, "earlier events of this session are still in the spool")
        try:
            return self._send(first, bodies, timeout)
        except (OSError, _NoAnswer) as exc:
            return self._spool(first, events, bodies, _describe(exc))
        except (FrameTooLarge, msgspec.DecodeError) as exc:  # something else listens on the socket
            return self._spool(first, events, bodies, f"the socket's peer does not speak gz-ia's protocol ({exc})")

    def _send(self, first: int, bodies: list[bytes], timeout: float) -> Delivery:
        deadline = time.monotonic() + timeout
        hello = Hello(proto=PROTOCOL_VERSION, producer=self.producer, pid=os.getpid(), root=str(self.root))
        batch = Batch(first=first, events=[msgspec.Raw(body) for body in bodies], verdicts=True)
        reader = FrameReader()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(timeout)
            sock.connect(str(self.socket_path))
            sock.sendall(encode_frame(hello) + encode_frame(batch))
            while True:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                data = sock.recv(1 << 16)
                if not data:
                    raise _NoAnswer("the collector closed the connection")
                for body in reader.feed(data):
                    message = collector_message_decoder.decode(body)
                    if isinstance(message, Welcome):
                        continue
                    if isinstance(message, Error):
                        if message.reason in _PERMANENT:
                            return Delivery(Outcome.REFUSED, detail=f"{message.reason}: {message.detail}")
                        raise _NoAnswer(f"{message.reason}: {message.detail}")
                    if isinstance(message, Verdicts):
                        rejected = {item.index: (str(item.reason), item.detail) for item in message.rejected}
                        seqs = list(message.seqs) or [0] * len(bodies)
                        return Delivery(Outcome.ACCEPTED, seqs=seqs, rejected=rejected)

    def _spooled_segments(self) -> list[Path]:
        try:
            names = os.listdir(self.spool_dir)
        except OSError:
            return []
        prefix = self.producer + "."
        return sorted(self.spool_dir / name for name in names if name.startswith(prefix) and name.endswith(".spool"))

    def _spool(self, first: int, events: list[LogEvent], bodies: list[bytes], why: str) -> Delivery:
        """Write the events as a new segment of this producer's spool, under its lock."""
        directory = self.spool_dir
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            lock_fd = _lock_spool(directory / f"{self.producer}.lock")
            try:
                segments = self._spooled_segments()
                number = int(segments[-1].name.split(".")[1]) + 1 if segments else 1
                header = SpoolHeader(
                    version=SPOOL_VERSION,
                    producer=self.producer,
                    root=str(self.root),
                    socket=os.path.abspath(self.socket_path),
                )
                data = frame_record(header) + b"".join(
                    frame_record(SpoolRecord(pseq=first + index, session_id=event.session_id, body=msgspec.Raw(body)))
                    for index, (event, body) in enumerate(zip(events, bodies, strict=True))
                )
                path = directory / f"{self.producer}.{number:06d}.spool"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            finally:
                os.close(lock_fd)
        except OSError as exc:
            return Delivery(Outcome.LOST, detail=f"{why}; cannot spool to {directory}: {exc}")
        return Delivery(Outcome.SPOOLED, detail=why, spool=str(directory))


class _NoAnswer(Exception):
    """The collector was reached but gave no verdict."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no verdict from the collector in time"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.ECONNREFUSED):
        return "no collector is listening"
    return str(exc)


def _lock_spool(path: Path) -> int:
    """Lock a producer's spool lock file, the one in the directory now (adoption unlinks it when done).

    Raises:
        OSError: the lock cannot be taken within a few seconds, or the file cannot be made.
    """
    deadline = time.monotonic() + 5.0
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a collector is adopting this spool right now
            os.close(fd)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
            continue
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)  # adopted and unlinked while we waited: lock the new file


def _forget_old_ledgers(directory: Path, *, keep: Path) -> None:
    """Remove ledgers unused for :data:`LEDGER_MAX_AGE` (run when a new key appears, so rarely)."""
    cutoff = time.time() - LEDGER_MAX_AGE
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if entry.path == str(keep) or not entry.name.endswith(".json"):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
