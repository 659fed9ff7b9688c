"""Opening a session root, and reaching the files below it without following symlinks.

Every path below a root is opened relative to a directory file descriptor with ``O_NOFOLLOW``: a
symlink planted anywhere under the root is refused (``ELOOP``), never followed out of it. The root's
``layout.json`` names its layout version (a newer one is refused, not misread) and its epoch, a
random id that tells it from a root rebuilt at the same path.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import Final

from gz_ia.client.env import HARNESS_DIR
from gz_ia.collector.errors import CollectorError

from .names import LAYOUT_FILE, LAYOUT_VERSION, SESSIONS_DIR, STATE_DIR, is_rejects_file, parse_rejects_archive_name

__all__ = [
    "LayoutError",
    "LayoutTooNew",
    "RootDirs",
    "list_names",
    "open_root",
    "transient_cause",
    "write_file_atomically",
]

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TRANSIENT_ERRNOS: Final = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EAGAIN})


class LayoutError(CollectorError):
    """A root cannot be used: missing, not a directory, a symlink, someone else's, or too new."""


class LayoutTooNew(LayoutError):
    """The root was written by a newer gz-ia with a storage layout this one does not know.

    Attributes:
        version: the root's layout version.
    """

    def __init__(self, message: str, version: object) -> None:
        super().__init__(message)
        self.version = version


def transient_cause(exc: BaseException) -> OSError | None:
    """The error behind ``exc`` (itself, or a :class:`LayoutError`'s cause) when it is a fault of the
    disk that clears (full, read-only, failing): the root's events wait and come back, they are not
    refused for good. None otherwise."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__
    return cause if isinstance(cause, OSError) and cause.errno in _TRANSIENT_ERRNOS else None


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


def _check_unclaimed(root_fd: int, path: Path) -> None:
    """Refuse to make a root of a directory that holds other things: a home, ``/etc`` or a project
    named as the root by mistake would get ``sessions/`` and ``state/`` written into it. A
    ``.harness`` (made for gz-ia, as a client makes it) and an empty directory become roots; so does
    one holding only gz-ia's own names (a root made before roots had a layout file)."""
    if path.name == HARNESS_DIR:
        return
    foreign = sorted(name for name in os.listdir(root_fd) if not _is_own_name(name))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise LayoutError(
            f"root {str(path)!r} holds other files ({shown}) and is not a gz-ia root: "
            f"name an empty directory or a {HARNESS_DIR} directory as the root"
        )


def _is_own_name(name: str) -> bool:
    return (
        name in (SESSIONS_DIR, STATE_DIR)
        or is_rejects_file(name)
        or parse_rejects_archive_name(name) is not None
        or name.startswith(f".{LAYOUT_FILE}.")  # a layout file whose writer was killed before its rename
    )


def _check_layout(root_fd: int, path: Path, *, create: bool) -> str:
    """Check the root's layout version and return its epoch ("" when it has none)."""
    try:
        fd = os.open(LAYOUT_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
    except FileNotFoundError:
        if not create:
            return ""
        _check_unclaimed(root_fd, path)
        # The epoch tells this root from a root rebuilt at the same path: cursors carry it.
        epoch = os.urandom(8).hex()  # as secrets.token_hex, without its imports
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
