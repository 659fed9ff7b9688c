"""What old data is deleted: archive count and age per session, a disk budget per root, idle sessions.

Retention runs in the writer's worker thread after each rotation (for that session, then the root's
budget) and on demand (``gz-ia gc``). It only ever deletes files whose names the collector generates
(:mod:`.names`): archives ``<id>.events.<n>.jsonl[.gz]`` and ``rejects.<n>.jsonl[.gz]``, and, when
a whole idle session is collected, that session's active file, torn file and checkpoint. Anything
else in the directories (a user's notes, a planted symlink, a directory) is left alone; a
non-regular file with a generated name is not deleted either.

* ``max_archives``: a session (and the rejects file) keeps at most this many archives, newest kept.
* ``max_age_days``: archives whose mtime (the time the segment was closed; compression keeps it) is
  older are deleted. Age never decides *order*: segment numbers do.
* ``max_root_bytes``: while everything the collector generated under a root is larger, archives are
  deleted, those of the least recently active session first (oldest segment first), then the next
  session's. Active files are never deleted by the budget.
* ``max_held_archives``: archives an exporter has not sent yet (:mod:`.export_holds`) are spared
  from ``max_archives`` and ``max_age_days``, at most this many per session (the oldest beyond it
  go); the root budget ignores holds.
* :func:`collect_idle` (``gz-ia gc --older-than``): a session whose last write (newest mtime among its
  active file and archives) is older than the threshold is removed entirely, open actions or not: a
  session silent for that long has no live writer, and keeping abandoned cycles forever would defeat
  the budget. The checkpoint goes last, so a concurrent reader sees the files vanish oldest first.
  Run by a collector (:mod:`gz_ia.collector.service.gc_report`), its ``keep`` veto spares every session the
  writer holds live, whatever the mtimes say.
* :func:`disk_usage` (``gz-ia disk-usage``, ``gzia_root_size_bytes``): the same inventory, measured.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from gz_ia.collector.config import RetentionConfig

from .export_holds import read_holds
from .names import (
    REJECTS_STEM,
    TORN_SUFFIX,
    active_name,
    archive_name,
    is_rejects_file,
    is_rejects_state,
    parse_archive_name,
    parse_rejects_archive_name,
    rejects_archive_name,
    session_id_of,
    session_id_of_state,
    state_name,
    torn_name,
)
from .roots import RootDirs, list_names

__all__ = [
    "IDLE_RECHECK",
    "MIN_IDLE_AGE",
    "Deletion",
    "RetentionPolicy",
    "RetentionReport",
    "RootUsage",
    "SessionUsage",
    "apply_retention",
    "collect_idle",
    "disk_usage",
    "enforce_session",
]

IDLE_RECHECK: Final = 60.0
"""Before writing to a file idle longer than this, the writer checks (under a shared ``flock``) that
``gz-ia gc`` has not removed it; fresher files are written without the check."""
MIN_IDLE_AGE: Final = 10 * IDLE_RECHECK
"""The least idle time after which ``gz-ia gc`` may remove a whole session: well past
:data:`IDLE_RECHECK`, so that the writer always checks a file gc may remove."""

_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Deletion:
    """One file retention removed (or, in a dry run, would remove)."""

    directory: str
    """``sessions``, ``state`` or ``.`` (the root)."""
    name: str
    size: int
    reason: str
    """``max_archives``, ``max_age``, ``max_root_bytes`` or ``idle``."""


@dataclass(slots=True)
class RetentionReport:
    """What one retention pass did."""

    deleted: list[Deletion] = field(default_factory=list)
    sessions_removed: list[str] = field(default_factory=list)

    @property
    def files(self) -> int:
        """Number of files removed."""
        return len(self.deleted)

    @property
    def bytes(self) -> int:
        """Bytes removed."""
        return sum(item.size for item in self.deleted)


class RetentionPolicy:
    """The ``[retention]`` limits; 0 means no limit.

    Args:
        config: ``[retention]`` of the collector configuration.
    """

    __slots__ = ("max_age_seconds", "max_archives", "max_held_archives", "max_root_bytes")

    def __init__(self, config: RetentionConfig) -> None:
        self.max_archives = config.max_archives
        self.max_held_archives = config.max_held_archives
        self.max_age_seconds = config.max_age_days * _DAY
        self.max_root_bytes = config.max_root_bytes

    @property
    def active(self) -> bool:
        """Whether any limit is set."""
        return bool(self.max_archives or self.max_age_seconds or self.max_root_bytes)

    def tightened(self, *, max_root_bytes: int = 0, max_age_seconds: float = 0.0) -> RetentionPolicy:
        """This policy with a budget and an archive age at most these (0: keep this policy's):
        ``gz-ia gc --vacuum-size`` and ``--vacuum-time``."""
        tight = RetentionPolicy(RetentionConfig(max_archives=self.max_archives))
        tight.max_root_bytes = min(filter(None, (self.max_root_bytes, max_root_bytes)), default=0)
        tight.max_age_seconds = min(filter(None, (self.max_age_seconds, max_age_seconds)), default=0.0)
        return tight


@dataclass(slots=True)
class _File:
    directory: str
    dir_fd: int
    name: str
    size: int
    mtime: float


@dataclass(slots=True)
class _Group:
    """One session (or the rejects file): its archives by segment number, and its other files."""

    archives: dict[int, list[_File]] = field(default_factory=dict)
    others: list[_File] = field(default_factory=list)

    @property
    def last_write(self) -> float:
        times = [item.mtime for item in self.others if item.directory != "state"]
        times += [item.mtime for files in self.archives.values() for item in files]
        return max(times, default=0.0)


def _regular(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def _inventory(dirs: RootDirs, only: str | None = None) -> dict[str | None, _Group]:
    """Group every generated file under the root by session (None: the rejects files, of every share)."""
    groups: dict[str | None, _Group] = {}

    def add(key: str | None, directory: str, dir_fd: int, name: str, segment: int | None) -> None:
        info = _regular(dir_fd, name)
        if info is None:
            return
        item = _File(directory, dir_fd, name, info.st_size, info.st_mtime)
        group = groups.setdefault(key, _Group())
        if segment is None:
            group.others.append(item)
        else:
            group.archives.setdefault(segment, []).append(item)

    for name in list_names(dirs.sessions_fd):
        archive = parse_archive_name(name)
        if archive is not None:
            if only is None or archive[0] == only:
                add(archive[0], "sessions", dirs.sessions_fd, name, archive[1])
            continue
        session_id = session_id_of(name)
        if session_id is None and name.endswith(TORN_SUFFIX):
            session_id = name[: -len(TORN_SUFFIX)]
            if torn_name(session_id) != name:
                session_id = None
        if session_id is not None and (only is None or session_id == only):
            add(session_id, "sessions", dirs.sessions_fd, name, None)
    if dirs.state_fd is not None:
        for name in list_names(dirs.state_fd):
            session_id = session_id_of_state(name)
            if session_id is not None and (only is None or session_id == only):
                add(session_id, "state", dirs.state_fd, name, None)
    if only is None:
        for name in list_names(dirs.root_fd):
            rejects = parse_rejects_archive_name(name)
            if rejects is not None:
                add(None, ".", dirs.root_fd, name, rejects[0])
            elif is_rejects_file(name):
                add(None, ".", dirs.root_fd, name, None)
        if dirs.state_fd is not None:
            for name in list_names(dirs.state_fd):
                if is_rejects_state(name):
                    add(None, "state", dirs.state_fd, name, None)
    return groups


def _delete(item: _File, reason: str, report: RetentionReport, *, dry_run: bool) -> None:
    if not dry_run:
        try:
            os.unlink(item.name, dir_fd=item.dir_fd)
        except FileNotFoundError:
            return  # compressed or removed meanwhile
    report.deleted.append(Deletion(item.directory, item.name, item.size, reason))


def _trim_group(
    group: _Group,
    policy: RetentionPolicy,
    now: float,
    report: RetentionReport,
    *,
    dry_run: bool,
    held_from: int | None = None,
) -> None:
    numbers = sorted(group.archives)
    doomed: dict[int, str] = {}
    if policy.max_archives and len(numbers) > policy.max_archives:
        for number in numbers[: len(numbers) - policy.max_archives]:
            doomed[number] = "max_archives"
    if policy.max_age_seconds:
        limit = now - policy.max_age_seconds
        for number in numbers:
            if number not in doomed and max(item.mtime for item in group.archives[number]) < limit:
                doomed[number] = "max_age"
    if held_from is not None and policy.max_held_archives:
        held = [number for number in sorted(doomed) if number >= held_from]
        for number in held[-policy.max_held_archives :]:  # an exporter still needs them
            del doomed[number]
    for number in sorted(doomed):  # oldest first
        for item in group.archives.pop(number):
            _delete(item, doomed[number], report, dry_run=dry_run)


def _enforce_budget(
    groups: dict[str | None, _Group], policy: RetentionPolicy, report: RetentionReport, *, dry_run: bool
) -> None:
    total = sum(item.size for group in groups.values() for item in group.others)
    total += sum(item.size for group in groups.values() for files in group.archives.values() for item in files)
    if total <= policy.max_root_bytes:
        return
    for group in sorted(groups.values(), key=lambda group: group.last_write):
        for number in sorted(group.archives):
            if total <= policy.max_root_bytes:
                return
            for item in group.archives.pop(number):
                _delete(item, "max_root_bytes", report, dry_run=dry_run)
                total -= item.size


def enforce_session(
    dirs: RootDirs,
    session_id: str | None,
    newest: int,
    policy: RetentionPolicy,
    *,
    now: float,
    rejects_stem: str = REJECTS_STEM,
) -> RetentionReport:
    """Apply the per-session limits to one session (None: the rejects file) right after a rotation.

    Archives are found by probing numbers downward from ``newest`` (the segment just archived), so
    this costs a few ``stat`` calls, not a directory listing. The root budget, which needs the whole
    inventory, is applied only when it is set.
    """
    report = RetentionReport()
    if not policy.active:
        return report
    if policy.max_archives or policy.max_age_seconds:
        group = _Group()
        dir_fd = dirs.sessions_fd if session_id is not None else dirs.root_fd
        directory = "sessions" if session_id is not None else "."
        number = newest
        missing = 0
        while number >= 1 and missing < 2:  # tolerate one hole (a segment deleted by hand)
            found = False
            for compressed in (False, True):
                if session_id is not None:
                    name = archive_name(session_id, number, compressed=compressed)
                else:
                    name = rejects_archive_name(number, compressed=compressed, stem=rejects_stem)
                info = _regular(dir_fd, name)
                if info is not None:
                    found = True
                    group.archives.setdefault(number, []).append(
                        _File(directory, dir_fd, name, info.st_size, info.st_mtime)
                    )
            missing = 0 if found else missing + 1
            number -= 1
        held_from = read_holds(dirs).get(session_id) if session_id is not None else None
        _trim_group(group, policy, now, report, dry_run=False, held_from=held_from)
    if policy.max_root_bytes:
        _enforce_budget(_inventory(dirs), policy, report, dry_run=False)
    return report


def apply_retention(
    dirs: RootDirs,
    policy: RetentionPolicy,
    *,
    now: float,
    dry_run: bool = False,
    owns: Callable[[str | None], bool] | None = None,
    budget: bool = True,
) -> RetentionReport:
    """Apply every limit to every session and the rejects file of a root (``gz-ia gc``).

    Args:
        owns: only trim the archives of these sessions (None: the rejects files), for a share of a
            sharded collector; None: all of them.
        budget: also apply ``max_root_bytes``, over the whole root (one share of a sharded
            collector does: archives are never written, so any process may delete them).
    """
    report = RetentionReport()
    groups = _inventory(dirs)
    holds = read_holds(dirs)
    for key, group in groups.items():
        if owns is None or owns(key):
            held_from = holds.get(key) if key is not None else None
            _trim_group(group, policy, now, report, dry_run=dry_run, held_from=held_from)
    if budget and policy.max_root_bytes:
        _enforce_budget(groups, policy, report, dry_run=dry_run)
    return report


@dataclass(slots=True)
class SessionUsage:
    """The bytes one session takes under a root (sizes, as ``max_root_bytes`` counts them)."""

    active_bytes: int = 0
    archived_bytes: int = 0
    archives: int = 0
    other_bytes: int = 0
    """Torn fragments and the checkpoint."""
    last_write: float = 0.0

    @property
    def bytes(self) -> int:
        """Everything the session takes."""
        return self.active_bytes + self.archived_bytes + self.other_bytes


@dataclass(slots=True)
class RootUsage:
    """What the files the collector generated under a root take (``gz-ia disk-usage``)."""

    sessions: dict[str, SessionUsage] = field(default_factory=dict)
    rejects_bytes: int = 0
    files: int = 0

    @property
    def bytes(self) -> int:
        """Everything under the root that retention manages, the budget's measure."""
        return self.rejects_bytes + sum(usage.bytes for usage in self.sessions.values())


def disk_usage(dirs: RootDirs) -> RootUsage:
    """Measure every generated file under a root, by session (one listing of each directory)."""
    usage = RootUsage()
    for key, group in _inventory(dirs).items():
        archived = [item for files in group.archives.values() for item in files]
        usage.files += len(archived) + len(group.others)
        if key is None:
            usage.rejects_bytes += sum(item.size for item in (*archived, *group.others))
            continue
        session = usage.sessions[key] = SessionUsage(last_write=group.last_write, archives=len(group.archives))
        session.archived_bytes = sum(item.size for item in archived)
        for item in group.others:
            if item.name == active_name(key):
                session.active_bytes += item.size
            else:
                session.other_bytes += item.size
    return usage


def collect_idle(
    dirs: RootDirs,
    older_than: float,
    *,
    now: float,
    dry_run: bool = False,
    keep: Callable[[str], bool] | None = None,
) -> RetentionReport:
    """Remove every session whose last write is older than ``older_than`` seconds, entirely.

    Args:
        dirs: the open root.
        older_than: idle threshold in seconds.
        now: the current time (injected, so tests need no sleeping).
        dry_run: report what would be removed without removing anything.
        keep: optional veto, called with each candidate session id.
    """
    report = RetentionReport()
    limit = now - older_than
    for session_id, group in sorted(_inventory(dirs).items(), key=lambda item: item[0] or ""):
        if session_id is None or group.last_write >= limit or (keep is not None and keep(session_id)):
            continue
        with _still_idle(dirs, session_id, limit) as idle:
            if not idle:
                continue
            for number in sorted(group.archives):
                for item in group.archives[number]:
                    _delete(item, "idle", report, dry_run=dry_run)
            order = {active_name(session_id): 0, torn_name(session_id): 1, state_name(session_id): 2}
            for item in sorted(group.others, key=lambda item: order.get(item.name, 3)):
                with contextlib.suppress(OSError):
                    _delete(item, "idle", report, dry_run=dry_run)
        report.sessions_removed.append(session_id)
    return report


@contextlib.contextmanager
def _still_idle(dirs: RootDirs, session_id: str, limit: float) -> Iterator[bool]:
    """Hold the session's active file under an exclusive ``flock`` while it is removed.

    Yields False when the collector is writing to it right now (it holds a shared lock from its
    last check to its write: see ``Writer._check_unlinked``) or wrote to it since the inventory.
    """
    try:
        fd = os.open(active_name(session_id), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs.sessions_fd)
    except OSError:
        yield True  # no active file: nothing is being appended to
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            idle = False  # the collector is between its check and its write
        else:
            idle = os.fstat(fd).st_mtime < limit
        yield idle
    finally:
        os.close(fd)
