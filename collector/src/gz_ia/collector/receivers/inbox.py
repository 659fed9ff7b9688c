"""The hook inbox, taken by the collector: each drop logged as ``gz-ia hook claude-code`` logs it.

The drops (:mod:`gz_ia.collector.integrations.claude_code.inbox_drop`) are taken on a thread of
their own, in the order their hooks ran, as a client of the collector's own socket: the path a
command hook takes (its session ledger, its spool when the socket does not answer), so a sharded
collector takes them as a single one does. A drop is removed only once its events are written or
spooled; one taken again after a crash is recognised by its name in the session's ledger and logs
nothing twice. A drop that can never be logged is moved into the spool's quarantine with its reason,
where ``gz-ia status`` lists it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from gz_ia.client import env
from gz_ia.collector.integrations.claude_code.command_hook import log_payload
from gz_ia.collector.integrations.claude_code.inbox_drop import DROP_SUFFIX, Drop, DropDamaged, inbox_dir, read_drop
from gz_ia.collector.service.adoption import QUARANTINE_DIR

if TYPE_CHECKING:
    from gz_ia.collector.metrics import Metrics

__all__ = ["HookInbox"]

log = logging.getLogger("gz_ia.collector")

POLL_INTERVAL: Final = 0.05
"""Seconds between looks at an empty inbox: a drop waits at most this long (a look at an empty
directory costs a few microseconds)."""


class HookInbox:
    """The thread that takes the drops of ``<spool dir>/hooks/`` and logs them through ``socket_path``.

    Args:
        spool_dir: the spool directory the hooks write under (the collector's own).
        socket_path: the collector's socket, used where a drop names none.
        metrics: where ``gzia_hook_drops_total`` is counted.
    """

    def __init__(self, spool_dir: str, socket_path: str, metrics: Metrics) -> None:
        self.spool_dir = spool_dir
        self.socket_path = socket_path
        self.metrics = metrics
        self.inbox = inbox_dir(spool_dir)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gz-ia-hook-inbox", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop after the drop in hand (the rest wait for the next start)."""
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.take_all()
            except Exception:  # a bug: keep the collector, retry at the next look
                log.exception("the hook inbox could not be read; will retry")
            self._stop.wait(POLL_INTERVAL)

    def take_all(self) -> int:
        """Log every complete drop in the order their hooks ran; return how many were taken."""
        taken = 0
        for path in self._waiting():
            if self._stop.is_set():
                break
            try:
                drop = read_drop(path, time.time())
            except FileNotFoundError:
                continue
            except (DropDamaged, OSError) as exc:
                self._quarantine(path, str(exc))
                continue
            if drop is None:  # still being written: it and what came after wait for the next look
                break
            self._log(path, drop)
            taken += 1
        return taken

    def _waiting(self) -> list[Path]:
        """The drops in the inbox, oldest first (by when their hook wrote them)."""
        found: list[tuple[int, str]] = []
        with os.scandir(self.inbox) as entries:
            for entry in entries:
                if entry.name.endswith(DROP_SUFFIX) and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(FileNotFoundError):
                        found.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
        found.sort()
        return [self.inbox / name for _, name in found]

    def _log(self, path: Path, drop: Drop) -> None:
        log_payload(
            drop.payload,
            socket_path=drop.socket or self.socket_path,
            root=_root_of(drop),
            spool_dir=self.spool_dir,
            ran_ns=drop.written_ns,
            once=f"{path.name}@{drop.written_ns}",
        )
        path.unlink(missing_ok=True)
        self.metrics.hook_drops.labels("logged").inc()

    def _quarantine(self, path: Path, reason: str) -> None:
        quarantine = Path(self.spool_dir) / QUARANTINE_DIR
        log.warning("hook drop %s cannot be logged (%s): kept in %s", path.name, reason, quarantine)
        try:
            quarantine.mkdir(mode=0o700, exist_ok=True)
            target = quarantine / f"hook-{path.name}"
            path.rename(target)
            target.with_name(target.name + ".reason").write_text(reason + "\n")
        except OSError as exc:
            log.error("hook drop %s could not be quarantined (%s): removed", path.name, exc)
            path.unlink(missing_ok=True)
        self.metrics.hook_drops.labels("quarantined").inc()


def _root_of(drop: Drop) -> str:
    """The root the hook's environment names, else the nearest ``.harness`` of the payload's ``cwd``,
    else the default root: as the hook would have found it (never the collector's own environment)."""
    if drop.root:
        return env.absolute(drop.root)
    try:
        payload = msgspec.json.decode(drop.payload)
    except msgspec.DecodeError:
        payload = None
    cwd = payload.get("cwd") if isinstance(payload, dict) else None
    found = env.harness_above(cwd) if isinstance(cwd, str) and os.path.isabs(cwd) else None
    return found or str(env.default_root())
