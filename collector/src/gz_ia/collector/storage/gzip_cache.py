"""Decompressed gzip archives, kept in a small cache shared by every reader in the process.

A follower or a paging reader opens the same archive again and again (a page per view, a poll per
rotation); decompressing it each time would cost far more than keeping its bytes. A reader works on
one archive at a time, and crosses from one to the next: the cache keeps the two archives used last,
so a long-lived reader (the MCP server, an exporter, a follower across a day of rotations) holds at
most two segments' worth, however many it has read. The cache is keyed by the file's identity
(device, inode, size, mtime), so a replaced file is never served stale.
"""

from __future__ import annotations

import gzip
import os
import threading
from collections import OrderedDict
from typing import Final

__all__ = ["cached", "decompressed"]

_KEEP: Final = 2
"""Archives kept: the one being read and the one before it (a page or a poll that spans both)."""

_cache: OrderedDict[tuple[int, int, int, int], bytes] = OrderedDict()
_lock = threading.Lock()


def decompressed(fd: int, info: os.stat_result) -> bytes:
    """Return the content of the gzip archive open as ``fd`` (``info`` its ``fstat``).

    Raises:
        OSError, EOFError, zlib.error: the archive is unreadable or corrupt.
    """
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    with _lock:
        cached = _cache.get(key)
        if cached is not None:
            _cache.move_to_end(key)
            return cached
    with os.fdopen(os.dup(fd), "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as file:
        data = file.read()
    with _lock:
        _cache[key] = data
        while len(_cache) > _KEEP:
            _cache.popitem(last=False)
    return data


def cached() -> int:
    """Return how many decompressed archives the process keeps now."""
    with _lock:
        return len(_cache)
