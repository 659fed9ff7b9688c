"""How the writer opens the files it appends to and repairs."""

from __future__ import annotations

import os
from typing import Final

__all__ = ["FILE_FLAGS", "REPAIR_FLAGS"]

FILE_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""O_NONBLOCK: a FIFO put under a session file's name would otherwise hold the writer, and with it
every session, in ``open`` until something reads it (a regular file writes the same either way)."""
REPAIR_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""An active file opened to cut its torn tail: never through a symlink, never waiting on a FIFO."""
