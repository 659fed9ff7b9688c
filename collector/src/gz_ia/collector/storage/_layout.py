"""Where things live under a session root, and how to open them without following symlinks.

A root is a workspace's ``.harness`` directory::

    <root>/layout.json                          {"layout": 1, "epoch": "..."}: layout version, root id
    <root>/sessions/<id>.events.jsonl           the active segment of a session
    <root>/sessions/<id>.events.<n>.jsonl[.gz]  archived segment n (6+ digits, n = 1, 2, ...)
    <root>/sessions/<id>.events.torn            torn fragments cut off at recovery
    <root>/state/<id>.session.json              the session's checkpoint (never data)
    <root>/state/rejects.state.json             the rejects file's checkpoint
    <root>/rejects.jsonl                        refused events, each with its reason
    <root>/rejects.<n>.jsonl[.gz]               archived rejects segment n
    <root>/rejects-<k>.jsonl, ...               the same, of share k of a sharded collector (k >= 1)

Segments are numbered per session, monotonically: the active file is always the highest number, and
rotation renames it to its archive name (never copies). Order is always the number, never an mtime.
A checkpoint records the state (``seq``, open actions, delivery watermarks, summary) at a position
``(segment, offset)``, so that recovery and ``gz-ia sessions`` scan only what follows that position.
Nothing in ``state/`` is ever read as events, and retention deletes only names listed above.

Every path below a root is opened relative to a directory file descriptor with ``O_NOFOLLOW``: a
symlink planted anywhere under the root is refused (``ELOOP``), never followed out of it. Names are
only ever built from validated session ids (:func:`gz_ia.client.schema.is_safe_session_id`).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import re
import secrets
import stat
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import Stage, is_safe_session_id

__all__ = [
    "ACTIVE_SUFFIX",
    "LAYOUT_FILE",
    "LAYOUT_VERSION",
    "REJECTS_FILE",
    "SESSIONS_DIR",
    "STATE_DIR",
    "Checkpoint",
    "LayoutError",
    "LayoutTooNew",
    "OpenCycles",
    "RootDirs",
    "Segment",
    "SegmentUnreadable",
    "SessionFold",
    "Trace",
    "active_name",
    "archive_name",
    "list_names",
    "open_root",
    "parse_archive_name",
    "session_id_of",
    "transient_cause",
]

LAYOUT_VERSION: Final = 1
LAYOUT_FILE: Final = "layout.json"
SESSIONS_DIR: Final = "sessions"
REJECTS_FILE: Final = "rejects.jsonl"
ACTIVE_SUFFIX: Final = ".events.jsonl"
TORN_SUFFIX: Final = ".events.torn"
STATE_DIR: Final = "state"
STATE_SUFFIX: Final = ".session.json"
REJECTS_STATE: Final = "rejects.state.json"
REJECTS_STEM: Final = "rejects"
MAX_WATERMARKS: Final = 4096

_ARCHIVE: Final = re.compile(r"\.events\.([0-9]{6,})\.jsonl(\.gz)?\Z")
_REJECTS_ARCHIVE: Final = re.compile(r"\Arejects(?:-[0-9]+)?\.([0-9]{6,})\.jsonl(\.gz)?\Z")
_REJECTS_FILE: Final = re.compile(r"\Arejects(?:-[0-9]+)?\.jsonl\Z")
_REJECTS_STATE: Final = re.compile(r"\Arejects(?:-[0-9]+)?\.state\.json\Z")
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LayoutError(Exception):
    """A root cannot be used: missing, not a directory, a symlink, someone else's, or too new."""


_TRANSIENT_ERRNOS: Final = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EAGAIN})


def transient_cause(exc: BaseException) -> OSError | None:
    """The error behind ``exc`` (itself, or a :class:`LayoutError`'s cause) when it is a fault of the
    disk that clears (full, read-only, failing): the root's events wait and come back, they are not
    refused for good. None otherwise."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__
    return cause if isinstance(cause, OSError) and cause.errno in _TRANSIENT_ERRNOS else None


class LayoutTooNew(LayoutError):
    """The root was written by a newer gz-ia with a storage layout this one does not know.

    Attributes:
        version: the root's layout version.
    """

    def __init__(self, message: str, version: object) -> None:
        super().__init__(message)
        self.version = version


def active_name(session_id: str) -> str:
    """Return the active segment's file name for a validated session id."""
    if not is_safe_session_id(session_id):
        raise ValueError(f"unsafe session id {session_id!r}")
    return session_id + ACTIVE_SUFFIX


def torn_name(session_id: str) -> str:
    """Return the name of the file that keeps torn fragments repaired out of a session."""
    return session_id + TORN_SUFFIX


def session_id_of(file_name: str) -> str | None:
    """Return the session id of an active segment's file name, or None for any other file."""
    if not file_name.endswith(ACTIVE_SUFFIX):
        return None
    session_id = file_name[: -len(ACTIVE_SUFFIX)]
    return session_id if is_safe_session_id(session_id) else None


def archive_name(session_id: str, segment: int, *, compressed: bool = False) -> str:
    """Return the file name of a session's archived segment ``segment`` (``<id>.events.000042.jsonl``)."""
    if not is_safe_session_id(session_id):
        raise ValueError(f"unsafe session id {session_id!r}")
    if segment < 1:
        raise ValueError("segment numbers start at 1")
    return f"{session_id}.events.{segment:06d}.jsonl" + (".gz" if compressed else "")


def parse_archive_name(file_name: str) -> tuple[str, int, bool] | None:
    """Return ``(session id, segment, compressed)`` of an archive's file name, or None for any other file."""
    match = _ARCHIVE.search(file_name)
    if match is None:
        return None
    session_id = file_name[: match.start()]
    if not is_safe_session_id(session_id):
        return None
    return session_id, int(match.group(1)), match.group(2) is not None


def rejects_archive_name(segment: int, *, compressed: bool = False, stem: str = REJECTS_STEM) -> str:
    """Return the file name of the rejects file's archived segment ``segment``."""
    return f"{stem}.{segment:06d}.jsonl" + (".gz" if compressed else "")


def is_rejects_file(file_name: str) -> bool:
    """Tell whether ``file_name`` is an active rejects file (any share's)."""
    return _REJECTS_FILE.match(file_name) is not None


def is_rejects_state(file_name: str) -> bool:
    """Tell whether ``file_name`` is a rejects file's checkpoint (any share's)."""
    return _REJECTS_STATE.match(file_name) is not None


def parse_rejects_archive_name(file_name: str) -> tuple[int, bool] | None:
    """Return ``(segment, compressed)`` of a rejects archive's file name (any share's), or None."""
    match = _REJECTS_ARCHIVE.match(file_name)
    return None if match is None else (int(match.group(1)), match.group(2) is not None)


def state_name(session_id: str) -> str:
    """Return the checkpoint's file name (in ``state/``) of a validated session id."""
    if not is_safe_session_id(session_id):
        raise ValueError(f"unsafe session id {session_id!r}")
    return session_id + STATE_SUFFIX


def session_id_of_state(file_name: str) -> str | None:
    """Return the session id of a checkpoint's file name, or None for any other file."""
    if not file_name.endswith(STATE_SUFFIX):
        return None
    session_id = file_name[: -len(STATE_SUFFIX)]
    return session_id if is_safe_session_id(session_id) else None


class RootDirs:
    """Open directory descriptors of one root, its ``sessions`` and its ``state`` directories.

    ``state_fd`` is None when a reader opens a root whose ``state/`` does not exist (yet).
    """

    __slots__ = ("epoch", "path", "root_fd", "sessions_fd", "state_fd", "uid")

    def __init__(
        self, path: Path, root_fd: int, sessions_fd: int, uid: int, state_fd: int | None = None, epoch: str = ""
    ) -> None:
        self.path = path
        self.root_fd = root_fd
        self.sessions_fd = sessions_fd
        self.state_fd = state_fd
        self.uid = uid
        self.epoch = epoch
        """The root's random id from ``layout.json`` ("" for a root made before roots had one)."""

    def close(self) -> None:
        """Close every descriptor."""
        for fd in (self.state_fd, self.sessions_fd, self.root_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def __enter__(self) -> RootDirs:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def open_root(path: Path, *, owner: int | None, create: bool = True) -> RootDirs:
    """Open ``path`` as a session root, creating ``sessions/`` and ``layout.json`` if needed.

    Args:
        path: absolute path of the ``.harness`` directory.
        owner: required owner uid (the connecting peer), or None to skip the check (readers).
        create: create the sessions directory and layout file when missing.

    Raises:
        LayoutError: the root is unusable; the message says why.
    """
    if not path.is_absolute():
        raise LayoutError(f"root {str(path)!r} is not an absolute path")
    try:
        root_fd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        # O_NOFOLLOW|O_DIRECTORY on a symlink fails with ELOOP or ENOTDIR depending on the target.
        reason = "is a symlink" if exc.errno == errno.ELOOP or path.is_symlink() else (exc.strerror or str(exc)).lower()
        raise LayoutError(f"cannot open root {str(path)!r}: {reason}") from exc
    try:
        info = os.fstat(root_fd)
        if owner is not None and info.st_uid != owner:
            raise LayoutError(f"root {str(path)!r} belongs to uid {info.st_uid}, not to the sender (uid {owner})")
        epoch = _check_layout(root_fd, path, create=create)
        if create:
            for directory in (SESSIONS_DIR, STATE_DIR):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(directory, 0o700, dir_fd=root_fd)
        try:
            sessions_fd = os.open(SESSIONS_DIR, _DIR_FLAGS, dir_fd=root_fd)
        except OSError as exc:
            raise LayoutError(f"cannot open {str(path / SESSIONS_DIR)!r}: {exc.strerror or exc}") from exc
        try:
            state_fd: int | None = os.open(STATE_DIR, _DIR_FLAGS, dir_fd=root_fd)
        except OSError as exc:
            if create or exc.errno != errno.ENOENT:
                os.close(sessions_fd)
                raise LayoutError(f"cannot open {str(path / STATE_DIR)!r}: {exc.strerror or exc}") from exc
            state_fd = None
    except BaseException:
        os.close(root_fd)
        raise
    return RootDirs(path, root_fd, sessions_fd, info.st_uid, state_fd, epoch)


def _check_layout(root_fd: int, path: Path, *, create: bool) -> str:
    """Check the root's layout version and return its epoch ("" when it has none)."""
    try:
        fd = os.open(LAYOUT_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except FileNotFoundError:
        if not create:
            return ""
        # The epoch tells this root from a root rebuilt at the same path: cursors carry it.
        epoch = secrets.token_hex(8)
        write_file_atomically(
            root_fd, LAYOUT_FILE, json.dumps({"layout": LAYOUT_VERSION, "epoch": epoch}).encode() + b"\n"
        )
        return epoch
    except OSError as exc:
        raise LayoutError(f"cannot read {str(path / LAYOUT_FILE)!r}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as file:
        data = file.read(4096)
    try:
        content = json.loads(data)
        version = content["layout"]
    except (ValueError, KeyError, TypeError) as exc:
        raise LayoutError(f"{str(path / LAYOUT_FILE)!r} is not a gz-ia layout file") from exc
    if not isinstance(version, int) or version > LAYOUT_VERSION:
        raise LayoutTooNew(
            f"root {str(path)!r} uses storage layout {version!r}, newer than this gz-ia knows "
            f"({LAYOUT_VERSION}): upgrade gz-ia to read or write it",
            version,
        )
    epoch = content.get("epoch", "")
    return epoch if isinstance(epoch, str) else ""


def write_file_atomically(dir_fd: int, name: str, data: bytes, *, durable: bool = True) -> None:
    """Replace ``name`` in ``dir_fd`` with ``data``: temporary file, fsync (when durable), rename.

    Checkpoints pass ``durable=False``: they only save recovery work, a lost or damaged one is
    rebuilt from the segments, and an fsync per session would cost the event loop dearly.
    """
    temporary = f".{name}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        try:
            os.write(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def list_names(dir_fd: int) -> list[str]:
    """The names in the directory ``dir_fd``, read through a descriptor of their own.

    ``os.listdir(dir_fd)`` reads through a duplicate that shares ``dir_fd``'s position, so two
    listings of one root's directory at once (the loop repairing it, the storage worker measuring
    it) would each see part of it, or nothing.
    """
    fd = os.open(".", _DIR_FLAGS, dir_fd=dir_fd)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def is_regular(dir_fd: int, name: str) -> bool:
    """Tell whether ``name`` is a regular file (not a symlink, not a directory)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode)


# --- checkpoints -------------------------------------------------------------------------------------


class Checkpoint(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a session's lines up to ``(segment, offset)`` amount to; ``state/<id>.session.json``.

    ``segment`` is the active segment's number at the time of writing and ``offset`` how many of its
    bytes the state covers (0 right after a rotation). Written atomically (temporary file + rename) at
    every rotation, when the collector closes the file, and at most every few seconds while the
    session is written to. Timestamps are kept as stored (RFC 3339 text).
    """

    layout: int = LAYOUT_VERSION
    segment: int = 1
    offset: int = 0
    seq: int = 0
    segment_seq: int = 0
    """``seq`` of the last event before the active segment (for the event-count limit)."""
    started: float = 0.0
    """When the active segment was started (collector clock), for daily rotation."""
    open_actions: dict[str, Stage] = {}
    """Open cycles of events that name no ``cycle``: action → open stage."""
    open_cycles: list[tuple[str, str, Stage]] = []
    """Open cycles of events that name one: ``[action, cycle, open stage]``."""
    marks: dict[str, int] = {}
    failures: int = 0
    first_time: str = ""
    last_time: str = ""
    parent: str = ""
    agent: str = ""
    newest_time: str = ""
    """The greatest event timestamp covered: timestamps are the agents' and may go backwards, so
    ``last_time`` does not bound them. Readers skip a session whose newest event is older than
    ``--since``. Empty when unknown (no event yet, or a checkpoint of an earlier gz-ia)."""


_checkpoint_encoder: Final = msgspec.json.Encoder()
_checkpoint_decoder: Final = msgspec.json.Decoder(Checkpoint)


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """Return the checkpoint's file content."""
    return _checkpoint_encoder.encode(checkpoint) + b"\n"


def read_checkpoint(state_fd: int | None, name: str) -> Checkpoint | None:
    """Return the checkpoint stored as ``name`` in ``state/``; None when missing or unusable.

    A damaged checkpoint (a crash on a filesystem that lost its data) is treated as absent: the
    caller rebuilds from the segments, which stay the source of truth.
    """
    if state_fd is None:
        return None
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=state_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > 1 << 24:
            return None
        data = os.read(fd, info.st_size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        checkpoint = _checkpoint_decoder.decode(data)
    except msgspec.DecodeError:
        return None
    if checkpoint.layout > LAYOUT_VERSION or checkpoint.segment < 1 or checkpoint.offset < 0:
        return None
    return checkpoint


OpenCycles = dict[str | tuple[str, str], Stage]
"""A session's open cycles: the action, or ``(action, cycle)`` for events naming their cycle → open stage."""


def stored_cycles(open_cycles: OpenCycles) -> tuple[dict[str, Stage], list[tuple[str, str, Stage]]]:
    """Split open cycles into a checkpoint's ``open_actions`` and ``open_cycles`` (JSON keys are strings)."""
    plain: dict[str, Stage] = {}
    named: list[tuple[str, str, Stage]] = []
    for key, stage in open_cycles.items():
        if isinstance(key, str):
            plain[key] = stage
        else:
            named.append((key[0], key[1], stage))
    return plain, named


def loaded_cycles(checkpoint: Checkpoint) -> OpenCycles:
    """A checkpoint's open cycles, keyed as :func:`stored_cycles` took them apart."""
    cycles: OpenCycles = {}
    cycles.update(checkpoint.open_actions)
    for action, cycle, stage in checkpoint.open_cycles:
        cycles[action, cycle] = stage
    return cycles


class Trace(msgspec.Struct, gc=False):
    """The part of a stored line that recovery and session summaries need."""

    action: str
    stage: Stage
    cycle: str | None = None
    seq: int = 0
    delivery: str | None = None
    status: str = "OK"
    timestamp: str = ""
    parent_session_id: str | None = None
    agent: str = ""


trace_decoder: Final = msgspec.json.Decoder(Trace)


class SessionFold:
    """State rebuilt from a checkpoint and the lines after it: seq, open cycles, watermarks, summary."""

    __slots__ = (
        "agent",
        "failures",
        "first_time",
        "last_time",
        "marks",
        "newest_time",
        "open_actions",
        "parent",
        "seq",
    )

    def __init__(self, checkpoint: Checkpoint | None = None) -> None:
        self.seq = 0
        self.open_actions: OpenCycles = {}
        self.marks: dict[str, int] = {}
        self.failures = 0
        self.first_time = ""
        self.last_time = ""
        self.parent = ""
        self.agent = ""
        self.newest_time: str | None = ""
        """The greatest timestamp folded; None when unknown for good (a checkpoint without it)."""
        if checkpoint is not None:
            self.seq = checkpoint.seq
            self.open_actions = loaded_cycles(checkpoint)
            self.marks = dict(checkpoint.marks)
            self.failures = checkpoint.failures
            self.first_time = checkpoint.first_time
            self.last_time = checkpoint.last_time
            self.parent = checkpoint.parent
            self.agent = checkpoint.agent
            self.newest_time = checkpoint.newest_time if checkpoint.newest_time or not checkpoint.seq else None

    def apply(self, trace: Trace) -> None:
        """Fold one line into the state."""
        self.seq = max(self.seq, trace.seq)
        key = trace.action if trace.cycle is None else (trace.action, trace.cycle)
        if trace.stage is Stage.FINISH:
            self.open_actions.pop(key, None)
        else:
            self.open_actions[key] = trace.stage
        if trace.delivery:
            producer, _, number = trace.delivery.rpartition(":")
            if number.isdigit():
                note_delivery(self.marks, producer, int(number))
        if trace.status == "FAILED":
            self.failures += 1
        if not self.first_time:
            self.first_time = trace.timestamp
            self.parent = trace.parent_session_id or ""
            self.agent = trace.agent
        self.last_time = trace.timestamp or self.last_time
        if self.newest_time is not None and trace.timestamp and later(trace.timestamp, self.newest_time):
            self.newest_time = trace.timestamp


def later(stamp: str, than: str) -> bool:
    """Tell whether RFC 3339 time ``stamp`` is after ``than`` ("" is before everything; text that
    does not parse is never later)."""
    try:
        moment = datetime.fromisoformat(stamp)
        return not than or moment > datetime.fromisoformat(than)
    except ValueError:
        return False


def note_delivery(marks: dict[str, int], producer: str, number: int) -> None:
    """Record that ``producer``'s event ``number`` is stored (bounded table of watermarks).

    The table is kept in the order of each producer's last write (re-setting a key would leave it
    where it was first inserted), so past the bound it forgets the producers idle longest, never
    one that keeps writing.
    """
    if len(marks) > 1:
        marks.pop(producer, None)
    marks[producer] = number
    if len(marks) > MAX_WATERMARKS:
        # A resend from a producer forgotten here, after this many newer producers wrote to the
        # session, is the only case that could be taken as new instead of as a duplicate.
        for stale in list(marks)[: MAX_WATERMARKS // 2]:
            del marks[stale]


def scan_traces(segment: Segment, start: int = 0) -> Iterator[Trace]:
    """Yield the trace of every complete, decodable line of ``segment`` from byte ``start``."""
    offset = start
    end = segment.size
    carry = b""
    while offset < end:
        chunk = carry + segment.read(offset, min(SCAN_CHUNK, end - offset))
        if len(chunk) == len(carry):
            break
        offset += len(chunk) - len(carry)
        cut = chunk.rfind(b"\n") + 1
        carry = chunk[cut:]
        lines = chunk[:cut]
        if not lines:
            continue
        try:
            yield from trace_decoder.decode_lines(lines)
        except msgspec.DecodeError:
            for line in lines.splitlines():
                with contextlib.suppress(msgspec.DecodeError):
                    yield trace_decoder.decode(line)


# --- segments ----------------------------------------------------------------------------------------

SCAN_CHUNK: Final = 1 << 20
_GZ_CACHE_BYTES: Final = 256 << 20


class SegmentUnreadable(Exception):
    """A segment exists but cannot be read (not a regular file, a symlink, corrupt compression...)."""


class Segment:
    """The bytes of one segment: a plain file read with ``pread``, or a decompressed gzip archive.

    ``size`` is fixed when the segment is opened: bytes appended later (to the active segment) are
    seen by the next opening, never half.
    """

    __slots__ = ("active", "data", "fd", "ino", "number", "size")

    def __init__(self, number: int, *, fd: int | None, data: bytes | None, size: int, ino: int, active: bool) -> None:
        self.number = number
        self.fd = fd
        self.data = data
        self.size = size
        self.ino = ino
        self.active = active

    def read(self, offset: int, length: int) -> bytes:
        """Return up to ``length`` bytes at ``offset`` (never past ``size``)."""
        length = max(0, min(length, self.size - offset))
        if length == 0:
            return b""
        if self.data is not None:
            return self.data[offset : offset + length]
        assert self.fd is not None
        try:
            return os.pread(self.fd, length, offset)
        except OSError as exc:
            raise SegmentUnreadable(f"segment {self.number}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        """Release the file descriptor."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


_gz_cache: OrderedDict[tuple[int, int, int, int], bytes] = OrderedDict()
_gz_lock = threading.Lock()


def _decompressed(fd: int, info: os.stat_result) -> bytes:
    """Return a gzip archive's content, from a small cache keyed by the file's identity."""
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    with _gz_lock:
        cached = _gz_cache.get(key)
        if cached is not None:
            _gz_cache.move_to_end(key)
            return cached
    with os.fdopen(os.dup(fd), "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as file:
        data = file.read()
    with _gz_lock:
        _gz_cache[key] = data
        total = sum(len(value) for value in _gz_cache.values())
        while total > _GZ_CACHE_BYTES and len(_gz_cache) > 1:
            _, dropped = _gz_cache.popitem(last=False)
            total -= len(dropped)
    return data


def _open_regular(dir_fd: int, name: str) -> tuple[int, os.stat_result]:
    """Open ``name`` read-only without following symlinks; refuse anything but a regular file."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, "missing", name) from exc
        reason = "a symlink (refused)" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise SegmentUnreadable(f"{name}: {reason}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise SegmentUnreadable(f"{name}: not a regular file")
    return fd, info


def open_archive(dir_fd: int, name_of: Callable[[bool], str], number: int) -> Segment:
    """Open archived segment ``number``, plain or compressed, whichever exists.

    While an archive is being compressed both names exist for a moment, with the same content; the
    plain one is preferred and, if it disappears in between, the compressed one is used.

    Raises:
        FileNotFoundError: no such segment (never written, or removed by retention).
        SegmentUnreadable: it exists but cannot be read.
    """
    for compressed in (False, True, False):
        try:
            fd, info = _open_regular(dir_fd, name_of(compressed))
        except FileNotFoundError:
            continue
        if not compressed:
            return Segment(number, fd=fd, data=None, size=info.st_size, ino=info.st_ino, active=False)
        try:
            data = _decompressed(fd, info)
        except (OSError, EOFError, zlib.error) as exc:
            raise SegmentUnreadable(f"{name_of(True)}: {exc}") from exc
        finally:
            os.close(fd)
        return Segment(number, fd=None, data=data, size=len(data), ino=info.st_ino, active=False)
    raise FileNotFoundError(errno.ENOENT, "no such segment", name_of(False))


def segment_exists(dir_fd: int, name_of: Callable[[bool], str]) -> bool:
    """Tell whether an archive exists under either name (as anything: a directory in its place counts)."""
    for compressed in (False, True):
        try:
            os.stat(name_of(compressed), dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            return True
        return True
    return False


def session_archive(session_id: str, number: int) -> Callable[[bool], str]:
    """Return a ``compressed -> file name`` function of one archived segment of a session."""
    # The id was validated when the caller got it; only the format is applied here (hot in listings).
    plain = f"{session_id}.events.{number:06d}.jsonl"
    packed = plain + ".gz"
    return lambda compressed: packed if compressed else plain


def rejects_archive(number: int, stem: str = REJECTS_STEM) -> Callable[[bool], str]:
    """Return a ``compressed -> file name`` function of one archived rejects segment."""
    return lambda compressed: rejects_archive_name(number, compressed=compressed, stem=stem)


def locate_active(sessions_fd: int, session_id: str, hint: int) -> tuple[int, Segment | None, bool]:
    """Return ``(number, segment, unreadable)`` of a session's active segment (``session_id`` validated).

    ``segment`` is the open active file (None when there is none, or it cannot be read, in which case
    ``unreadable`` is true). ``hint`` is the checkpoint's segment number (1 without one). The writer
    renames the active file to its archive name before it writes the checkpoint, so archives at or
    above the hint mean the checkpoint lags behind: the active number is one past the highest. Opening
    the active name races with a rotation, so the archive check is repeated after opening it.
    """
    number = max(1, hint)
    for _attempt in range(100):
        while segment_exists(sessions_fd, session_archive(session_id, number)):
            number += 1
        try:
            fd, info = _open_regular(sessions_fd, session_id + ACTIVE_SUFFIX)
        except FileNotFoundError:
            if segment_exists(sessions_fd, session_archive(session_id, number)):
                continue  # rotated in between: look again
            return number, None, False
        except SegmentUnreadable:
            return number, None, True
        if not segment_exists(sessions_fd, session_archive(session_id, number)):
            return number, Segment(number, fd=fd, data=None, size=info.st_size, ino=info.st_ino, active=True), False
        os.close(fd)  # renamed to archive `number` while we opened it: look again
    raise SegmentUnreadable(f"{session_id}: the active segment keeps rotating; try again")


def replay_session(
    sessions_fd: int,
    session_id: str,
    checkpoint: Checkpoint | None,
    number: int,
    active: Segment | None,
) -> tuple[SessionFold, int, bool]:
    """Rebuild a session's state: the checkpoint plus every line after its position.

    Args:
        sessions_fd: the ``sessions`` directory.
        session_id: the session.
        checkpoint: its checkpoint, or None.
        number: the active segment's number.
        active: the open active segment (None when there is none).

    Returns:
        ``(fold, segment_seq, complete)``: the state, the ``seq`` before the active segment, and
        whether every segment needed could be read. Without a usable checkpoint (missing, damaged,
        or ahead of the files after a crash) every retained segment is replayed.
    """
    active_size = active.size if active is not None else 0
    usable = checkpoint is not None and (
        checkpoint.segment < number or (checkpoint.segment == number and checkpoint.offset <= active_size)
    )
    complete = True
    if checkpoint is not None and usable:
        first, offset = checkpoint.segment, checkpoint.offset
        fold = SessionFold(checkpoint)
    else:
        complete = checkpoint is None
        first, offset = number, 0
        while first > 1 and segment_exists(sessions_fd, session_archive(session_id, first - 1)):
            first -= 1
        fold = SessionFold()
    for segment_number in range(first, number):
        try:
            segment = open_archive(sessions_fd, session_archive(session_id, segment_number), segment_number)
        except (FileNotFoundError, SegmentUnreadable):
            complete = False
            continue
        try:
            for trace in scan_traces(segment, offset if segment_number == first else 0):
                fold.apply(trace)
        except SegmentUnreadable:
            complete = False
        finally:
            segment.close()
    segment_seq = fold.seq
    if active is not None:
        try:
            for trace in scan_traces(active, offset if first == number else 0):
                fold.apply(trace)
        except SegmentUnreadable:
            complete = False
    return fold, segment_seq, complete
