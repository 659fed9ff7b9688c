"""Finishing at start-up what a kill left half done with archives, so each is in exactly one file.

Compression writes the ``.gz`` beside the plain archive and unlinks the plain one last
(:func:`.rotation.compress_archive`); a kill in between leaves both, and a kill before compression
began leaves a plain archive nothing queues again. ``gz-ia`` reads each segment once either way, but
anything that reads the directory (``zcat`` plus ``cat``, a log shipper) would count those lines
twice. So the process that repairs a root at start also settles its archives: a ``.gz`` whose seal
holds wins and the plain copy goes; a ``.gz`` that does not match is removed and the plain archive,
the complete copy, is compressed again (when compression is on); a lone plain archive is compressed;
temporary files of processes no longer running are removed.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
import re
import zlib
from collections.abc import Callable
from typing import Final

from .archive_seal import seal_holds
from .names import parse_archive_name, parse_rejects_archive_name
from .roots import RootDirs, list_names
from .rotation import compress_archive

__all__ = ["TidyReport", "tidy_archives"]

log = logging.getLogger("gz_ia.collector")

_TEMPORARY: Final = re.compile(r"\A\..+\.jsonl\.gz(?:\.(?P<pid>[0-9]+))?\.tmp\Z")


class TidyReport:
    """What :func:`tidy_archives` did under one root."""

    __slots__ = ("compressed", "plain_removed", "temporaries_removed")

    def __init__(self) -> None:
        self.plain_removed = 0
        """Plain copies removed beside their compressed archive."""
        self.compressed = 0
        """Plain archives compressed (left uncompressed by a kill)."""
        self.temporaries_removed = 0

    def __bool__(self) -> bool:
        return bool(self.plain_removed or self.compressed or self.temporaries_removed)


def tidy_archives(dirs: RootDirs, *, compress: bool) -> TidyReport:
    """Leave one copy of each archive of a root (sessions and rejects files); see the module doc."""
    report = TidyReport()
    _tidy(dirs.sessions_fd, compress, report, rejects=False)
    _tidy(dirs.root_fd, compress, report, rejects=True)
    return report


def _is_plain_archive(name: str, *, rejects: bool) -> bool:
    if rejects:
        parsed_rejects = parse_rejects_archive_name(name)
        return parsed_rejects is not None and not parsed_rejects[1]
    parsed = parse_archive_name(name)
    return parsed is not None and not parsed[2]


def _tidy(dir_fd: int, compress: bool, report: TidyReport, *, rejects: bool) -> None:
    names = set(list_names(dir_fd))
    for name in sorted(names):
        temporary = _TEMPORARY.match(name)
        if temporary is not None:
            if not _running(temporary["pid"]):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dir_fd)
                    report.temporaries_removed += 1
            continue
        if not _is_plain_archive(name, rejects=rejects):
            continue
        packed = name + ".gz"
        try:
            if packed in names:
                if _same(dir_fd, name, packed):
                    os.unlink(name, dir_fd=dir_fd)
                    report.plain_removed += 1
                    continue
                log.warning("%s does not match the plain archive beside it; compressing that one again", packed)
                os.unlink(packed, dir_fd=dir_fd)
            if compress:
                compress_archive(dir_fd, _names(name, packed))
                report.compressed += 1
        except FileNotFoundError:
            continue  # removed by retention or finished by another process meanwhile
        except OSError as exc:
            log.error("cannot settle archive %s: %s", name, exc)


def _names(plain: str, packed: str) -> Callable[[bool], str]:
    return lambda compressed: packed if compressed else plain


def _same(dir_fd: int, plain: str, packed: str) -> bool:
    """Whether the compressed archive is a whole copy of the plain one: its seal holds (or, for one
    of an earlier gz-ia, which carries none, its content is the same)."""
    sealed = seal_holds(dir_fd, packed)
    if sealed is not None:
        return sealed  # made from the plain archive, which never changes once archived
    try:
        fd = os.open(packed, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as raw, gzip.GzipFile(fileobj=raw) as unpacked:
            content = unpacked.read()
        fd = os.open(plain, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as original:
            return content == original.read()
    except (OSError, EOFError, zlib.error):
        return False


def _running(pid: str | None) -> bool:
    """Whether the process that named a temporary file still runs (None: an older name, no pid)."""
    if pid is None:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
