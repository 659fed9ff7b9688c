"""What a running ``gz-ia export otel`` tells ``gz-ia status``: one small JSON file per exporter process.

The exporter is a process of its own, so the collector's status cannot know whether the backend
takes what it is sent. Each exporter writes ``<state dir>/exporters/<pid>.json`` when it starts and
whenever a signal's state changes (refused, accepted again), and removes it when it stops;
:func:`running_exporters` reads the files of the processes still alive. Standard library and msgspec
only: ``gz-ia status`` reads it without the ``[otel]`` extra.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Final

import msgspec

__all__ = ["EXPORTERS_DIR", "ExporterReport", "SignalReport", "StatusFile", "running_exporters"]

EXPORTERS_DIR: Final = "exporters"


class SignalReport(msgspec.Struct, kw_only=True):
    """One signal of one exporter: where it goes and how the backend takes it."""

    signal: str
    endpoint: str
    state: str
    """``ok``, ``refused`` (an error answer, or nobody listens) or ``no answer`` (timed out)."""
    answer: str = ""
    """What the backend answered while failing, e.g. ``HTTP 405 Method Not Allowed``."""
    since: float | None = None
    """When the signal started failing (seconds since the epoch)."""


class ExporterReport(msgspec.Struct, kw_only=True):
    """The status file of one running exporter."""

    pid: int
    updated: float
    roots: list[str]
    signals: list[SignalReport]


_encoder: Final = msgspec.json.Encoder()


class StatusFile:
    """The status file of this exporter process, replaced atomically on each write."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / EXPORTERS_DIR / f"{os.getpid()}.json"

    def write(self, roots: list[str], signals: list[SignalReport]) -> None:
        """Replace the file; a status that cannot be written never stops the export."""
        report = ExporterReport(pid=os.getpid(), updated=time.time(), roots=roots, signals=signals)
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, _encoder.encode(report))
            finally:
                os.close(fd)
            os.replace(temporary, self.path)

    def remove(self) -> None:
        """Remove the file when the exporter stops."""
        with contextlib.suppress(OSError):
            self.path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_exporters(state_dir: Path) -> list[ExporterReport]:
    """The reports of the exporters that are still running with positions under ``state_dir``."""
    reports = []
    try:
        paths = sorted((state_dir / EXPORTERS_DIR).glob("*.json"))
    except OSError:  # not ours to read (status run by another user): no exporter to report
        return []
    for path in paths:
        try:
            report = msgspec.json.decode(path.read_bytes(), type=ExporterReport)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            continue
        if _alive(report.pid):
            reports.append(report)
    return reports
