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

A call costs little more than the interpreter's start: events are plain dicts (:func:`plain_event`),
sent with the few MessagePack frames of :mod:`._msgpack`, and the ledger is read and written with
:mod:`._plain_json`; a spooled segment is packed the same way (:func:`spool_segment`). Each Batch holds the
events of one session (a sharded collector routes a batch by its session).
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from gz_ia.client import trust
from gz_ia.client.limits import MAX_FRAME, PROTOCOL_VERSION, fits
from gz_ia.collector.errors import CollectorError
from gz_ia.collector.oneshot import _plain_json
from gz_ia.collector.oneshot._msgpack import Raw, Timestamp, pack, unpack

try:  # the C digest itself: hashlib would load OpenSSL first
    from _sha256 import sha256  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.12 renamed it
    from hashlib import sha256

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = [
    "SPOOL_VERSION",
    "Delivery",
    "Ledger",
    "Outcome",
    "batch_frame",
    "hello_frame",
    "plain_event",
    "reply",
    "spool_segment",
]

LEDGER_DIR: Final = "ledgers"
LEDGER_MAX_AGE: Final = 7 * 86_400
"""Seconds after its last use past which a ledger with nothing spooled is removed."""

# Refusals that a later attempt cannot turn into a delivery: spooling them would only defer them.
_PERMANENT: Final = frozenset({"root_not_allowed", "permission_denied", "unsupported_version"})


class Outcome:
    """What became of the events of one :meth:`Ledger.deliver` call."""

    ACCEPTED: Final = "accepted"
    """The collector answered; each event is written, or rejected with its reason."""
    SPOOLED: Final = "spooled"
    """No collector answered in time: the events are in the spool, written when one adopts it."""
    REFUSED: Final = "refused"
    """The collector refused the connection itself (root not allowed, permission, version)."""
    LOST: Final = "lost"
    """No collector answered and the spool could not be written."""


class Delivery:
    """The answer for a list of events: the outcome, and per event its seq or rejection."""

    __slots__ = ("detail", "outcome", "rejected", "seqs", "spool")

    def __init__(
        self,
        outcome: str,
        *,
        seqs: list[int] | None = None,
        rejected: dict[int, tuple[str, str]] | None = None,
        detail: str = "",
        spool: str = "",
    ) -> None:
        self.outcome = outcome
        self.seqs = seqs or []
        """Per event: its ``seq``, ``-1`` if already written, ``0`` if rejected (ACCEPTED only)."""
        self.rejected = rejected or {}
        """Index of each rejected event: (reason, detail)."""
        self.detail = detail
        """Why the events were spooled, refused or lost."""
        self.spool = spool
        """The spool directory, when spooled."""


_FIELDS: Final = ("parent_session_id", "action", "stage", "status", "agent", "role", "duration_ms", "error")


def plain_event(
    *,
    session_id: str,
    action: str,
    stage: str,
    agent: str,
    status: str = "OK",
    parent_session_id: str | None = None,
    role: str | None = None,
    duration_ms: int | None = None,
    error: str | None = None,
    attrs: dict[str, Any] | None = None,
    cycle: str | None = None,
    timestamp_ns: int | None = None,
    root_session_id: str | None = None,
) -> dict[str, object]:
    """A LogEvent as a dict in its fields' order, unset fields left out: packed, it is the same bytes
    as msgspec packs the ``LogEvent`` built by ``gz_ia.client.build_event`` from the same arguments.

    As there, the time is now (to the microsecond) unless given, free-text fields past their limits
    are cut and marked, and FAILED needs an error; the collector checks everything else.

    Raises:
        ValueError: FAILED without an error.
    """
    if status == "FAILED" and not error:
        raise ValueError("status FAILED requires a non-empty error")
    if not fits(action, agent, role, error, attrs):
        from gz_ia.client.schema import fit_fields

        action, agent, role, error, attrs = fit_fields(action, agent, role, error, attrs)
    nanoseconds = time.time_ns() if timestamp_ns is None else timestamp_ns
    event: dict[str, object] = {"timestamp": Timestamp(nanoseconds // 1000 * 1000), "session_id": session_id}
    values = (parent_session_id, action, stage, status, agent, role, duration_ms, error)
    for name, value in zip(_FIELDS, values, strict=True):
        if value is not None:
            event[name] = value
    if attrs is not None:
        event["attrs"] = attrs
    if cycle is not None:
        event["cycle"] = cycle
    if root_session_id is not None:
        event["root_session_id"] = root_session_id
    return event


def ledger_directory(spool_dir: str | os.PathLike[str]) -> str:
    """Where ledgers live: beside the spool segments, out of the way of spool adoption."""
    return f"{os.fspath(spool_dir)}/{LEDGER_DIR}"


class Ledger:
    """One key's delivery state, locked while it is open (use as a context manager).

    Args:
        key: what orders the events: calls with one key deliver in the order they take the lock.
        spool_dir: the client spool directory (``gz_ia.client.env.default_spool_dir()``).
        socket_path: the collector socket.
        root: the session root named in the handshake.
    """

    def __init__(
        self,
        key: str,
        *,
        spool_dir: str | os.PathLike[str],
        socket_path: str | os.PathLike[str],
        root: str | os.PathLike[str],
    ) -> None:
        self.spool_dir = os.fspath(spool_dir)
        self.socket_path = os.fspath(socket_path)
        self.root = os.fspath(root)
        self.path = f"{ledger_directory(self.spool_dir)}/{sha256(key.encode()).hexdigest()[:32]}.json"
        self._fd = -1
        self.producer = os.urandom(16).hex()
        """The producer id this key's events are sent and spooled under."""
        self.next = 1
        self.data: dict[str, Any] = {}
        """The owner's own map, saved with the ledger (keep it small: it is read on every call)."""
        self._fresh = True

    def __enter__(self) -> Ledger:
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            self._fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError:  # the first ledger of this spool directory
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            self._fd = os.open(self.path, flags, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        raw = os.pread(self._fd, 1 << 20, 0)
        if raw:
            self._load(raw)
        return self

    def _load(self, raw: bytes) -> None:
        try:
            state = _plain_json.loads(raw)
        except ValueError:  # torn by a crash: start under a new producer
            return
        if not isinstance(state, dict):
            return
        producer, number, data = state.get("producer"), state.get("next", 1), state.get("data", {})
        if isinstance(producer, str) and type(number) is int and isinstance(data, dict):
            self.producer, self.next, self.data = producer, number, data
            self._fresh = False

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        try:
            if kind is None:  # a failed call changes nothing
                state = {"producer": self.producer, "next": self.next, "data": self.data}
                body = _plain_json.dumps(state).encode()
                os.pwrite(self._fd, body, 0)
                os.ftruncate(self._fd, len(body))
        finally:
            os.close(self._fd)
            self._fd = -1
        if self._fresh:
            self._fresh = False
            _forget_old_ledgers(os.path.dirname(self.path), keep=self.path)

    def remove(self) -> None:
        """Forget this key once nothing of it is spooled (its session ended); the lock stays held."""
        if not self._spooled_segments():
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def deliver(self, events: list[dict[str, object]], *, timeout: float) -> Delivery:
        """Send ``events`` (:func:`plain_event`) and wait up to ``timeout`` seconds for the verdicts;
        spool them if no collector answers, or if earlier events of this key are still in the spool.

        Raises:
            TypeError: an event holds a value MessagePack cannot carry.
        """
        first = self.next
        self.next += len(events)
        bodies = [pack(event) for event in events]
        sessions = [str(event["session_id"]) for event in events]
        if self._spooled_segments():
            return self._spool(first, sessions, bodies, "earlier events of this session are still in the spool")
        try:
            return self._send(first, sessions, bodies, timeout)
        except (OSError, _NoAnswer) as exc:
            return self._spool(first, sessions, bodies, _describe(exc))
        except (ValueError, TypeError) as exc:  # something else listens on the socket
            return self._spool(first, sessions, bodies, f"the socket's peer does not speak gz-ia's protocol ({exc})")

    def _send(self, first: int, sessions: list[str], bodies: list[bytes], timeout: float) -> Delivery:
        import _socket  # socket.py would import enum, selectors and more for the same calls

        deadline = time.monotonic() + timeout
        try:  # as the client does: the collector opens a root, a sender makes it
            os.makedirs(self.root, mode=0o700, exist_ok=True)
        except OSError:
            pass  # the collector's answer says what is wrong with it
        frames = [hello_frame(self.producer, self.root)]
        runs = _runs(sessions)
        frames += [batch_frame(first + start, bodies[start:end]) for start, end in runs]
        seqs: list[int] = []
        rejected: dict[int, tuple[str, str]] = {}
        answered = 0  # batches answered; the collector answers them in order
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(timeout)
            trust.connect(sock, self.socket_path)  # nothing, not even the Hello, to another user's socket
            sock.sendall(b"".join(frames))
            buffer = b""
            while answered < len(runs):
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                data = sock.recv(1 << 16)
                if not data:
                    raise _NoAnswer("the collector closed the connection")
                buffer += data
                while len(buffer) >= 4 and answered < len(runs):
                    size = int.from_bytes(buffer[:4], "big")
                    if size > MAX_FRAME:
                        raise ValueError(f"frame body of {size} bytes exceeds the {MAX_FRAME}-byte limit")
                    if len(buffer) < 4 + size:
                        break
                    message, buffer = reply(buffer[4 : 4 + size]), buffer[4 + size :]
                    if message["type"] == "error":
                        reason, detail = str(message.get("reason")), str(message.get("detail"))
                        if reason in _PERMANENT:
                            return Delivery(Outcome.REFUSED, detail=f"{reason}: {detail}")
                        raise _NoAnswer(f"{reason}: {detail}")
                    if message["type"] == "verdicts":
                        start, end = runs[answered]
                        answered += 1
                        for index, reason, detail in message.get("rejected") or ():
                            rejected[start + int(index)] = (str(reason), str(detail))
                        seqs.extend(int(seq) for seq in message.get("seqs") or [0] * (end - start))
        finally:
            sock.close()
        return Delivery(Outcome.ACCEPTED, seqs=seqs, rejected=rejected)

    def _spooled_segments(self) -> list[str]:
        try:
            names = os.listdir(self.spool_dir)
        except OSError:
            return []
        prefix = self.producer + "."
        return sorted(name for name in names if name.startswith(prefix) and name.endswith(".spool"))

    def _spool(self, first: int, sessions: list[str], bodies: list[bytes], why: str) -> Delivery:
        """Write the events as a new segment of this producer's spool, under its lock.

        The records are packed here (:func:`spool_segment`), as ``gz_ia.client.spool`` frames them:
        importing msgspec and the client's spool module would cost a call that finds no collector
        more than the rest of its work.
        """
        directory = self.spool_dir
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            lock_fd = _lock_spool(f"{directory}/{self.producer}.lock")
            try:
                segments = self._spooled_segments()
                number = int(segments[-1].split(".")[1]) + 1 if segments else 1
                data = spool_segment(
                    self.producer, self.root, os.path.abspath(self.socket_path), first, sessions, bodies
                )
                path = f"{directory}/{self.producer}.{number:06d}.spool"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            finally:
                os.close(lock_fd)
        except OSError as exc:
            return Delivery(Outcome.LOST, detail=f"{why}; cannot spool to {directory}: {exc}")
        return Delivery(Outcome.SPOOLED, detail=why, spool=directory)


SPOOL_VERSION: Final = 2
"""``gz_ia.client.spool.SPOOL_VERSION``, the version of the segments :func:`spool_segment` writes
(a test holds the two equal)."""


def spool_segment(producer: str, root: str, socket: str, first: int, sessions: list[str], bodies: list[bytes]) -> bytes:
    """A whole spool segment, byte for byte as ``gz_ia.client.spool.frame_record`` writes its header
    (``SpoolHeader``) and records (``SpoolRecord``: producer number, session, the packed event)."""
    header = pack({"type": "spool", "version": SPOOL_VERSION, "producer": producer, "root": root, "socket": socket})
    records = [_length(header)]
    for index, (session, body) in enumerate(zip(sessions, bodies, strict=True)):
        records.append(_length(pack([first + index, session, Raw(body)])))
    return b"".join(records)


def _length(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


class _NoAnswer(CollectorError):
    """The collector was reached but gave no verdict."""


def hello_frame(producer: str, root: str) -> bytes:
    """This process's Hello frame, as ``protocol.encode_frame(Hello(...))`` writes it."""
    hello = {"type": "hello", "proto": PROTOCOL_VERSION, "producer": producer, "pid": os.getpid(), "root": root,
             "program": "", "routes": False}  # fmt: skip
    return _frame(pack(hello))


def batch_frame(first: int, bodies: list[bytes]) -> bytes:
    """A Batch frame asking for verdicts, as ``protocol.encode_frame(Batch(...))`` writes it."""
    return _frame(pack({"type": "batch", "first": first, "events": [Raw(body) for body in bodies], "verdicts": True}))


def reply(body: bytes) -> dict[str, Any]:
    """A Welcome, Verdicts or Error frame body, as the dict ``msgspec.to_builtins`` makes of it.

    Raises:
        ValueError: not MessagePack, or not one of these replies.
    """
    message = unpack(body)
    if not isinstance(message, dict) or message.get("type") not in ("welcome", "verdicts", "error"):
        raise ValueError(f"unexpected reply {str(message)[:100]}")
    return message


def _frame(body: bytes) -> bytes:
    if len(body) > MAX_FRAME:
        raise ValueError(f"frame body of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
    return len(body).to_bytes(4, "big") + body


def _runs(sessions: list[str]) -> list[tuple[int, int]]:
    """The [start, end) ranges of consecutive events of one session: one Batch each."""
    runs: list[tuple[int, int]] = []
    start = 0
    for index in range(1, len(sessions) + 1):
        if index == len(sessions) or sessions[index] != sessions[start]:
            runs.append((start, index))
            start = index
    return runs


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no verdict from the collector in time"
    if isinstance(exc, OSError) and exc.errno in (errno.ENOENT, errno.ECONNREFUSED):
        return "no collector is listening"
    return str(exc)


def _lock_spool(path: str) -> int:
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
        try:
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # adopted and unlinked while we waited: lock the new file


def _forget_old_ledgers(directory: str, *, keep: str) -> None:
    """Remove ledgers unused for :data:`LEDGER_MAX_AGE` (run when a new key appears, so rarely)."""
    cutoff = time.time() - LEDGER_MAX_AGE
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.path == keep or not entry.name.endswith(".json"):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
        except OSError:
            continue
