"""Where things live under a session root, and how to open them without following symlinks.

A root is a workspace's ``.harness`` directory::

    <root>/layout.json                      {"layout": 1}: the storage layout version
    <root>/sessions/<id>.events.jsonl       the active segment of a session
    <root>/rejects.jsonl                    refused events, each with its reason

Every path below a root is opened relative to a directory file descriptor with ``O_NOFOLLOW``: a
symlink planted anywhere under the root is refused (``ELOOP``), never followed out of it. Names are
only ever built from validated session ids (:func:`gz_ia.client.schema.is_safe_session_id`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import Final

from gz_ia.client.schema import is_safe_session_id

__all__ = [
    "ACTIVE_SUFFIX",
    "LAYOUT_FILE",
    "LAYOUT_VERSION",
    "REJECTS_FILE",
    "SESSIONS_DIR",
    "LayoutError",
    "RootDirs",
    "active_name",
    "open_root",
    "session_id_of",
]

LAYOUT_VERSION: Final = 1
LAYOUT_FILE: Final = "layout.json"
SESSIONS_DIR: Final = "sessions"
REJECTS_FILE: Final = "rejects.jsonl"
ACTIVE_SUFFIX: Final = ".events.jsonl"
TORN_SUFFIX: Final = ".events.torn"

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LayoutError(Exception):
    """A root cannot be used: missing, not a directory, a symlink, someone else's, or too new."""


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


class RootDirs:
    """Open directory descriptors of one root and its ``sessions`` directory."""

    __slots__ = ("path", "root_fd", "sessions_fd", "uid")

    def __init__(self, path: Path, root_fd: int, sessions_fd: int, uid: int) -> None:
        self.path = path
        self.root_fd = root_fd
        self.sessions_fd = sessions_fd
        self.uid = uid

    def close(self) -> None:
        """Close both descriptors."""
        for fd in (self.sessions_fd, self.root_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


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
        reason = "is a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc)).lower()
        raise LayoutError(f"cannot open root {str(path)!r}: {reason}") from exc
    try:
        info = os.fstat(root_fd)
        if owner is not None and info.st_uid != owner:
            raise LayoutError(f"root {str(path)!r} belongs to uid {info.st_uid}, not to the sender (uid {owner})")
        _check_layout(root_fd, path, create=create)
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(SESSIONS_DIR, 0o700, dir_fd=root_fd)
        try:
            sessions_fd = os.open(SESSIONS_DIR, _DIR_FLAGS, dir_fd=root_fd)
        except OSError as exc:
            raise LayoutError(f"cannot open {str(path / SESSIONS_DIR)!r}: {exc.strerror or exc}") from exc
    except BaseException:
        os.close(root_fd)
        raise
    return RootDirs(path, root_fd, sessions_fd, info.st_uid)


def _check_layout(root_fd: int, path: Path, *, create: bool) -> None:
    try:
        fd = os.open(LAYOUT_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except FileNotFoundError:
        if create:
            write_file_atomically(root_fd, LAYOUT_FILE, json.dumps({"layout": LAYOUT_VERSION}).encode() + b"\n")
        return
    except OSError as exc:
        raise LayoutError(f"cannot read {str(path / LAYOUT_FILE)!r}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as file:
        data = file.read(4096)
    try:
        version = json.loads(data)["layout"]
    except (ValueError, KeyError, TypeError) as exc:
        raise LayoutError(f"{str(path / LAYOUT_FILE)!r} is not a gz-ia layout file") from exc
    if not isinstance(version, int) or version > LAYOUT_VERSION:
        raise LayoutError(
            f"root {str(path)!r} uses storage layout {version!r}, newer than this gz-ia knows "
            f"({LAYOUT_VERSION}): upgrade gz-ia to read or write it"
        )


def write_file_atomically(dir_fd: int, name: str, data: bytes) -> None:
    """Replace ``name`` in ``dir_fd`` with ``data``: temporary file, fsync, rename."""
    temporary = f".{name}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def is_regular(dir_fd: int, name: str) -> bool:
    """Tell whether ``name`` is a regular file (not a symlink, not a directory)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode)
