"""Decompressed gzip archives, kept in a small cache shared by every reader in the process.

A follower or a paging reader opens the same archive again and again; decompressing it each time
would cost far more than keeping its bytes. The cache is keyed by the file's identity (device,
inode, size, mtime), so a replaced file is never served stale, and bounded in total bytes.
"""

from __future__ import annotations

import gzip
import os
import threading
from collections import OrderedDict
from typing import Final

__all__ = ["decompressed"]

_CACHE_BYTES: Final = 256 << 20

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
        total = sum(len(value) for value in _cache.values())
        while total > _CACHE_BYTES and len(_cache) > 1:
            _, dropped = _cache.popitem(last=False)
            total -= len(dropped)
    return data
