"""The share processes of a sharded collector (``shards = n``): started, watched and stopped by the front.

Each share is a collector process (:mod:`.share_process`) on a private socket, serving the sessions
whose id hashes to it (:func:`gz_ia.client.protocol.owner_of`). The front (:mod:`.front`) hands each
of them the batches of its sessions, and is the only one to connect to them. They live in a private
directory the front makes (0700) beside its own socket (``.<socket name>.shares``), with the
front's configuration in ``config.json``, which they read again on SIGHUP (see :mod:`.wire`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.collector.config import CollectorConfig
from gz_ia.collector.errors import CollectorError
from gz_ia.collector.service.status import StatusUnavailable, query

from .wire import CONFIG_FILE, share_config, share_socket

__all__ = ["ShareFailed", "Shares", "restart_delay"]

log = logging.getLogger("gz_ia.collector")

_START_TIMEOUT: Final = 60.0
"""Seconds a share may take to start, repair what a crash left and answer: a root with many torn
files takes a while."""
_STOP_TIMEOUT: Final = 30.0
_RESTART_DELAY: Final = 1.0
"""Seconds before a share that exited is started again, doubled for each exit in a row that came
soon after its start (a share that crashes at once), up to ``_RESTART_DELAY_MAX``; a share killed
from outside after it served starts again after this delay every time."""
_RESTART_DELAY_MAX: Final = 30.0
_START_ATTEMPTS: Final = 5
"""Exits in a row while starting after which a share is taken as unable to start (the collector
exits): 31 s of restart delays, far more than any crash during a start needs."""
_STABLE_AFTER: Final = 60.0
"""A share that ran this long before it exited is restarted after the shortest delay again."""
_APPLY_TIMEOUT: Final = 10.0
"""Seconds a reload waits for every share to show the new configuration in its status."""
_UNSET: Final = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
"""Environment of the front's service manager that is the front's alone."""


class ShareFailed(CollectorError):
    """A share process did not start or answer."""


class Shares:
    """The ``count`` share processes of a sharded collector.

    Args:
        count: how many shares the sessions are divided into.
        config: the front's configuration, which every share runs with.
        near: the front's socket; the shares' private directory is created beside it.
        version: the collector's version, which the shares report.
    """

    def __init__(self, count: int, config: CollectorConfig, *, near: Path, version: str) -> None:
        self.count = count
        self.version = version
        # One per socket, made afresh: the front holds the socket (its lock, or systemd's), so
        # whatever is there was left by a front that died.
        self.directory = near.parent / f".{near.name}.shares"
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(mode=0o700)
        self.sockets = [share_socket(self.directory, share) for share in range(count)]
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self._ready = [False] * count
        self._started = [0.0] * count
        self._quick_exits = [0] * count
        self._stopping = False
        self.restarts = 0
        self.write_config(config)

    def write_config(self, config: CollectorConfig) -> None:
        """Write the configuration the shares read at start and on SIGHUP (atomically)."""
        staged = self.directory / (CONFIG_FILE + ".new")
        staged.write_bytes(msgspec.json.encode(config))
        staged.replace(self.directory / CONFIG_FILE)

    async def start(self) -> None:
        """Start every share and wait until each answers on its socket.

        The processes are started from the calling (main) thread: the kernel stops a share when
        the thread that started it ends (``PR_SET_PDEATHSIG``), and a pool thread may end any time.

        Raises:
            ShareFailed: a share exited or did not answer within a minute.
        """
        for share in range(self.count):
            self._spawn(share)
        for share in range(self.count):
            await self._start_one(share)

    async def _start_one(self, share: int) -> None:
        """Wait until ``share`` answers; one that exits meanwhile is restarted as :meth:`watch` would.

        Only a share that keeps exiting while it starts (``_START_ATTEMPTS`` times in a row: a
        broken installation, not a crash) or never answers fails the start.
        """
        while True:
            try:
                await asyncio.to_thread(self._wait_ready, share)
                return
            except ShareFailed as exc:
                if self._running(share) or self._quick_exits[share] + 1 >= _START_ATTEMPTS:
                    raise
                self.restarts += 1
                delay = self._restart_delay(share)
                log.error("%s; restarting it in %.0f s", exc, delay)
                await asyncio.sleep(delay)
                self._spawn(share)

    def _spawn(self, share: int) -> None:
        self._ready[share] = False
        self._started[share] = time.monotonic()
        environ = {key: value for key, value in os.environ.items() if key not in _UNSET}
        self.sockets[share].unlink(missing_ok=True)
        self._processes[share] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gz_ia.collector.daemon",
                "--share",
                str(self.directory),
                str(share),
                str(self.count),
                str(os.getpid()),
                self.version,
            ],
            env=environ,
            stdin=subprocess.DEVNULL,
        )

    def _wait_ready(self, share: int) -> None:
        process = self._processes[share]
        assert process is not None
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise ShareFailed(f"share {share} exited with status {process.returncode} while starting")
            try:
                query(self.sockets[share], timeout=1.0)
            except StatusUnavailable as exc:
                if time.monotonic() > deadline:
                    raise ShareFailed(f"share {share} did not answer within {_START_TIMEOUT:.0f} s: {exc}") from exc
                time.sleep(0.02)
            else:
                self._ready[share] = True
                return

    async def watch(self) -> None:
        """Restart any share that exits, until :meth:`stop`: the front's clients reconnect and resend."""
        while not self._stopping:
            await asyncio.sleep(0.2)
            for share, process in enumerate(self._processes):
                if self._stopping or process is None or process.poll() is None:
                    continue
                self.restarts += 1
                delay = self._restart_delay(share, killed=self._ready[share] and _killed(process.returncode))
                log.error("share %d exited with status %s; restarting it in %.0f s", share, process.returncode, delay)
                await asyncio.sleep(delay)
                if self._stopping:
                    return
                await self._restart(share)

    async def _restart(self, share: int) -> None:
        """Start ``share`` again and wait until it answers or exits (then :meth:`watch` sees it).

        A share that is slow to answer (repairing a large root) is waited for, never killed.
        """
        self._spawn(share)
        while not self._stopping:
            try:
                await asyncio.to_thread(self._wait_ready, share)
                return
            except ShareFailed as exc:
                if not self._running(share):
                    log.error("%s", exc)
                    return
                log.warning("%s; still waiting for it", exc)

    def _restart_delay(self, share: int, *, killed: bool = False) -> float:
        """How long to wait before starting ``share`` again, which just exited (see _RESTART_DELAY).

        ``killed``: it served, then a signal from outside ended it (an OOM kill, a person's ``kill``):
        nothing in it is broken, so it comes back after the shortest delay however often that happens.
        """
        if killed or time.monotonic() - self._started[share] >= _STABLE_AFTER:
            self._quick_exits[share] = 0
        delay = restart_delay(self._quick_exits[share])
        self._quick_exits[share] += 1
        return delay

    def down(self) -> list[int]:
        """The shares that do not serve now: exited, being restarted, or not yet answering."""
        return [share for share in range(self.count) if not self._ready[share] or not self._running(share)]

    def pids(self) -> list[int | None]:
        """Each share's process id, None for a share that is not running."""
        return [process.pid if process is not None and process.poll() is None else None for process in self._processes]

    def _running(self, share: int) -> bool:
        process = self._processes[share]
        return process is not None and process.poll() is None

    def alive(self) -> bool:
        """Whether every share process is running."""
        return all(self._running(share) for share in range(self.count))

    async def reload(self, config: CollectorConfig) -> list[int]:
        """Hand ``config`` to every share (SIGHUP) and wait until each running one shows it in its status.

        A share that is down reads it when it starts. Returns the shares that did not show it within
        ``_APPLY_TIMEOUT`` seconds (stalled, or refusing it: their log says why).
        """
        self.write_config(config)
        self.signal(signal.SIGHUP)
        deadline = time.monotonic() + _APPLY_TIMEOUT
        while True:
            lagging = await asyncio.to_thread(self._lagging, config)
            if not lagging or time.monotonic() > deadline:
                return lagging
            await asyncio.sleep(0.02)

    def _lagging(self, config: CollectorConfig) -> list[int]:
        lagging = []
        down = self.down()
        for share in range(self.count):
            if share in down:
                continue
            expected = msgspec.to_builtins(share_config(config, self.directory, share))
            try:
                running = query(self.sockets[share], timeout=1.0).get("config")
            except StatusUnavailable:
                running = None
            if running != expected:
                lagging.append(share)
        return lagging

    def signal(self, signum: int) -> None:
        """Send ``signum`` to every running share (SIGHUP: re-read ``config.json``)."""
        for process in self._processes:
            if process is not None and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signum)

    def stop(self) -> None:
        """Stop every share (each drains what it holds, as at SIGTERM) and remove the directory."""
        self._stopping = True
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_TIMEOUT
        for share, process in enumerate(self._processes):
            if process is None:
                continue
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("share %d did not stop within %.0f s; killing it", share, _STOP_TIMEOUT)
                process.kill()
                process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def _killed(returncode: int | None) -> bool:
    """Whether a share was ended by a signal sent from outside, not by a failure of its own."""
    return returncode is not None and -returncode in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def restart_delay(quick_exits: int) -> float:
    """Seconds before restarting a share after ``quick_exits`` exits in a row soon after its start."""
    return min(_RESTART_DELAY * 2.0**quick_exits, _RESTART_DELAY_MAX)
