"""Whether the collector can do its job, derived from what it observes: ``healthy`` in ``gz-ia status``.

A root whose writes fail (a full disk, a removed or read-only root, an I/O error) makes the collector
unhealthy, with the reason, until a write to that root succeeds again. Clients resend what was not
acknowledged every few seconds, so a fault that lasts keeps failing; a root that no client has tried
to write for ``FORGET_AFTER`` seconds (its workspace deleted, its agents gone) stops counting.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["FORGET_AFTER", "Health", "Problem"]

FORGET_AFTER: Final = 120.0

_EXPLAINED = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EIO: "an I/O error",
    errno.ENOENT: "the root was removed",
    errno.EACCES: "permission denied",
}


@dataclass(slots=True)
class Problem:
    """One root the collector cannot write: the last error, since when, how many failures."""

    root: Path
    error: str
    """The errno name (``ENOSPC``) or ``other``."""
    detail: str
    since: float
    last: float
    failures: int = 1

    def sentence(self, now: float) -> str:
        """The problem as ``gz-ia status`` says it."""
        return (
            f"cannot write root {self.root}: {self.detail} ({self.failures} failed write(s), "
            f"the first {max(0.0, now - self.since):.0f} s ago); unacknowledged events stay with their clients"
        )


class Health:
    """Write failures by root, cleared by the next successful write to that root.

    Args:
        clock: wall clock for "since when" (injected by tests).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._problems: dict[Path, Problem] = {}

    @property
    def failing(self) -> bool:
        """Whether any root has an outstanding failure (cheap: checked after every write pass)."""
        return bool(self._problems)

    def failed(self, root: Path, exc: OSError) -> None:
        """Note a failed write (or sync, or root preparation) under ``root``."""
        problem = self._problems.get(root)
        name = errno.errorcode.get(exc.errno or 0, "other")
        detail = _EXPLAINED.get(exc.errno or 0, "") or (exc.strerror or str(exc))
        detail = f"{detail} ({name})" if name != "other" else detail
        if problem is None:
            now = self._clock()
            self._problems[root] = Problem(root, name, detail, now, now)
        else:
            problem.last = self._clock()
            problem.failures += 1
            problem.error = name
            problem.detail = detail

    def wrote(self, roots: Iterable[Path]) -> None:
        """Note that writes to ``roots`` succeeded: their failures are over."""
        for root in roots:
            self._problems.pop(root, None)

    def problems(self) -> list[Problem]:
        """Outstanding problems: those of roots that failed within the last ``FORGET_AFTER`` seconds."""
        limit = self._clock() - FORGET_AFTER
        for root in [root for root, problem in self._problems.items() if problem.last < limit]:
            del self._problems[root]
        return list(self._problems.values())

    def report(self) -> tuple[bool, list[str]]:
        """``(healthy, reasons)`` for the status report."""
        now = self._clock()
        reasons = [problem.sentence(now) for problem in self.problems()]
        return not reasons, reasons
