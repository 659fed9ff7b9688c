"""``syncfs(2)``: make every file written on a filesystem durable with one call.

A durable write pass over thousands of sessions would otherwise cost one ``fdatasync`` per file,
each its own journal commit and device flush. ``syncfs`` commits them all at once. Python's ``os``
module does not offer it, so it is called through ``ctypes`` (which releases the GIL meanwhile).

It is used only where it reports write-back errors: Linux 5.8 and later return them from ``syncfs``
for the file descriptor it is given. On older kernels, or without the call, :data:`AVAILABLE` is
false and the caller syncs file by file.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Callable
from typing import Final

__all__ = ["AVAILABLE", "syncfs"]


def _kernel_reports_errors() -> bool:
    if sys.platform != "linux":
        return False
    try:
        major, minor = (int(part) for part in platform.release().split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


def _load() -> Callable[[int], int] | None:
    if not _kernel_reports_errors():
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_syncfs: Final = _load()
AVAILABLE: Final = _syncfs is not None
"""True where :func:`syncfs` can be relied on to report write-back errors."""


def syncfs(fd: int) -> None:
    """Commit every dirty file of the filesystem holding ``fd`` to stable storage.

    Raises:
        OSError: a write-back error on that filesystem since ``fd`` last reported one (the caller
            then syncs its files one by one to learn which), or the call is not available.
    """
    if _syncfs is None:
        raise OSError("syncfs(2) is not available here")
    if _syncfs(fd) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
