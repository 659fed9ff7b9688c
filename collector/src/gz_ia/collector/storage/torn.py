"""Cutting a torn last line (a crash or a truncation in the middle of a line) off an active file.

The fragment is kept in ``<id>.events.torn``, never lost, and the file ends on a whole line again,
so that the next append starts a line of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from .flags import FILE_FLAGS
from .names import torn_name

__all__ = ["OnTorn", "repair_torn_tail"]

_SCAN_CHUNK: Final = 1 << 20

OnTorn = Callable[[int], None] | None
"""Called with the number of bytes cut off when a torn line is repaired."""


def repair_torn_tail(dir_fd: int, session_id: str, fd: int, size: int, on_torn: OnTorn) -> int:
    """Cut a last line without its newline off into the torn file; return the good size."""
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:
        start = max(0, end - _SCAN_CHUNK)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    fragment = os.pread(fd, size - end, end)
    torn = os.open(torn_name(session_id), FILE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        os.write(torn, fragment + b"\n")
        os.fsync(torn)
    finally:
        os.close(torn)
    os.ftruncate(fd, end)
    if on_torn is not None:
        on_torn(len(fragment))
    return end
