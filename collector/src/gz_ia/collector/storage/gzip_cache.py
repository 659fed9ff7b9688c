"""Gzip archives read in place, a span at a time, and kept in a small cache shared by every reader
in the process.

A reader asks for a few KiB at an offset of the decompressed archive: the line at a cursor, the
first line of each archive (a ``--seq`` or a cursor looking for its segment), the lines before an
offset (``-n``). Decompressing the whole archive into memory for that cost a segment's size (64 MiB
by default) per archive held, for as long as a long-lived reader (the MCP server, an exporter, a
follower across a day of rotations) held it. An :class:`Archive` keeps instead the decompressor's
state at the start of some of the spans of :data:`SPAN` bytes it has passed (about 40 KiB each:
zlib's 32 KiB window and its state), at most :data:`POINTS` of them whatever the archive's size,
and the one span it decompressed last: reading at an offset inflates from the nearest state before
it (a span at the default segment size, four at 256 MiB); reading forward inflates each span once.
The compressed bytes stay on disk, read with ``pread`` through the archive's own descriptor.

The cache keeps the two archives used last (a page or a poll that spans two), keyed by the file's
identity (device, inode, size, mtime), so a replaced file is never served stale.
"""

from __future__ import annotations

import errno
import gzip
import os
import threading
import weakref
import zlib
from collections import OrderedDict
from typing import Final

__all__ = ["POINTS", "SPAN", "Archive", "cached", "decompressed"]

_KEEP: Final = 2
"""Archives kept: the one being read and the one before it (a page or a poll that spans both)."""
SPAN: Final = 1 << 20
"""Decompressed bytes between two kept decompressor states, and the most one read inflates to reach
its offset."""
POINTS: Final = 64
"""Decompressor states kept per archive at most (about 2.5 MiB): a bigger archive keeps one every
few spans."""
_INPUT: Final = 1 << 16
"""Compressed bytes read at a time."""
_MAGIC: Final = b"\x1f\x8b"

_cache: OrderedDict[tuple[int, int, int, int], Archive] = OrderedDict()
_lock = threading.Lock()


class Archive:
    """The decompressed content of a single-member gzip archive, read at any offset in bounded memory.

    ``len()`` is the size its trailer records (the writer seals one member, smaller than 4 GiB);
    slicing returns bytes as slicing the decompressed content would (never past its end).
    """

    __slots__ = ("__weakref__", "_fd", "_lock", "_points", "_span", "_span_data", "_stride", "name", "size")

    def __init__(self, fd: int, info: os.stat_result, name: str = "") -> None:
        self.name = name
        if info.st_size < 18 or os.pread(fd, 2, 0) != _MAGIC:
            raise gzip.BadGzipFile("not a gzip archive")
        own = os.dup(fd)
        weakref.finalize(self, os.close, own)
        self._fd = own
        self.size = int.from_bytes(os.pread(own, 4, info.st_size - 4), "little")
        self._points: list[tuple[int, zlib._Decompress]] = [(0, zlib.decompressobj(16 + zlib.MAX_WBITS))]
        """Per ``stride`` spans passed: the offset of the next compressed byte, and the decompressor's state."""
        self._stride = max(1, -(-self.size // SPAN // POINTS))
        self._span = -1
        self._span_data = b""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: slice) -> bytes:
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError("an archive is sliced with step 1")
        return self.read(start, stop - start)

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` decompressed bytes at ``offset``.

        Raises:
            OSError: the file cannot be read, or its compressed bytes inflated (``EIO``, naming the
                archive and what is wrong).
        """
        end = min(self.size, offset + length)
        parts: list[bytes] = []
        with self._lock:
            while offset < end:
                index = offset // SPAN
                data = self._get(index)
                piece = data[offset - index * SPAN : end - index * SPAN]
                if not piece:
                    raise self._damaged("it ends before the size its trailer records")
                parts.append(piece)
                offset += len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _get(self, index: int) -> bytes:
        if index == self._span:
            return self._span_data
        stride = self._stride
        kept = min(index // stride, len(self._points) - 1)
        position, state = self._points[kept]
        at = kept * stride
        decompressor = state.copy()
        while True:
            data, position = self._inflate(decompressor, position)
            if len(data) == SPAN and (at + 1) == len(self._points) * stride:
                self._points.append((position, decompressor.copy()))
            if at == index or len(data) < SPAN:
                break
            at += 1
        self._span, self._span_data = at, data
        return data if at == index else b""

    def _inflate(self, decompressor: zlib._Decompress, position: int) -> tuple[bytes, int]:
        """The next span (less only at the end), and the offset of the next compressed byte."""
        parts: list[bytes] = []
        produced = 0
        try:
            while produced < SPAN and not decompressor.eof:
                given = os.pread(self._fd, _INPUT, position)
                if not given:
                    raise self._damaged("its compressed bytes end before their end marker")
                piece = decompressor.decompress(given, SPAN - produced)
                position += len(given) - len(decompressor.unconsumed_tail) - len(decompressor.unused_data)
                parts.append(piece)
                produced += len(piece)
        except zlib.error as exc:
            raise self._damaged(str(exc)) from exc
        return b"".join(parts), position

    def _damaged(self, what: str) -> OSError:
        return OSError(errno.EIO, f"{self.name}: {what}" if self.name else what)


def decompressed(fd: int, info: os.stat_result, name: str = "") -> Archive:
    """Return the content of the gzip archive ``name`` open as ``fd`` (``info`` its ``fstat``), read lazily.

    Raises:
        OSError: the archive is unreadable or not gzip (damage inside is raised by its reads).
    """
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    with _lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    archive = Archive(fd, info, name)
    with _lock:
        _cache[key] = archive
        while len(_cache) > _KEEP:
            _cache.popitem(last=False)
    return archive


def cached() -> int:
    """Return how many archives the process keeps now."""
    with _lock:
        return len(_cache)
