"""The collector's own log lines, with sd-daemon priorities when stderr is the journal.

Under systemd, stderr is a stream to journald, which reads a ``<N>`` prefix on each line as that
line's priority (sd-daemon(3)); without it every line is stored at the unit's default level and
``journalctl -p err`` finds nothing. systemd sets ``JOURNAL_STREAM`` to the ``device:inode`` of that
stream, so the prefix is added only when stderr still is it (not when a child's stderr was
redirected to a file or a terminal).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Final, TextIO

__all__ = ["configure_logging", "stderr_is_journal"]

_PRIORITIES: Final = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def stderr_is_journal(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` (stderr) is the journal stream systemd named in ``JOURNAL_STREAM``."""
    environ = os.environ if environ is None else environ
    stream = sys.stderr if stream is None else stream
    device, _, inode = environ.get("JOURNAL_STREAM", "").partition(":")
    if not device.isdigit() or not inode.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) == (int(device), int(inode))


class JournalFormatter(logging.Formatter):
    """Prefix each line with its sd-daemon priority (``<3>`` error, ``<4>`` warning, ``<6>`` info...)."""

    def format(self, record: logging.LogRecord) -> str:
        priority = _PRIORITIES.get(record.levelno)
        if priority is None:
            priority = next((p for level, p in sorted(_PRIORITIES.items()) if record.levelno <= level), 2)
        text = super().format(record)
        # A multi-line message (a traceback) keeps its priority on every line journald splits off.
        return "\n".join(f"<{priority}>{line}" for line in text.split("\n"))


def configure_logging(name: str, level: str) -> None:
    """Log to stderr as ``<name>: LEVEL message``, with priorities when stderr is the journal."""
    handler = logging.StreamHandler(sys.stderr)
    fmt = f"{name}: %(levelname)s %(message)s"
    handler.setFormatter(JournalFormatter(fmt) if stderr_is_journal() else logging.Formatter(fmt))
    logging.basicConfig(level=level.upper(), handlers=[handler])
