"""A failed write never lets a producer's events be answered as delivered without being on disk.

A session's watermark takes every producer number up to the highest one written as delivered, so
a producer's events must reach each session in order, and a duplicate may be answered only while
its original is still there. These tests run a real :class:`Collector` in this process, on a real
Unix socket, with raw protocol frames, and hold its write pass at a gate to make it fail (ENOSPC) at
the exact moment that matters. A real full disk hits that moment only by chance; the fault test
``tests/integration/test_faults.py::test_full_disk_holds_events_until_space_returns`` does that
with a real process on a real full tmpfs. This is the one place where the writer's system calls
are replaced: no real disk fails on demand between two given frames. The same gate shows when the
collector stops and resumes reading around a held pass (its global backpressure).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import socket
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import msgspec
import pytest
import uvloop

from gz_ia.client.protocol import (
    Batch,
    CollectorMessage,
    Error,
    FrameReader,
    RejectReason,
    Verdicts,
    collector_message_decoder,
    encode_frame,
)
from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.collector.service import write_passes
from gz_ia.collector.service.connection import Connection
from gz_ia.collector.service.server import Collector
from gz_ia.collector.storage.open_files import AppendFile
from gz_ia.collector.storage.writer import FlushJob
from gz_ia.collector.testing import RunningCollector, running_collector, until

_SESSION = "s1"
_msgpack = msgspec.msgpack.Encoder()


def _event(action: str, session: str) -> msgspec.Raw:
    event = LogEvent(
        timestamp=datetime.now(UTC), session_id=session, action=action, stage=Stage.READ, status=Status.OK, agent="t"
    )
    return msgspec.Raw(_msgpack.encode(event))


class Peer:
    """One client connection speaking the raw protocol (a plain socket: after the collector closes,
    what it sent before is still read, as the real client reads it)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.frames = FrameReader()
        self.received: list[CollectorMessage] = []

    async def send(self, first: int, *actions: str, session: str = _SESSION) -> None:
        """Send one batch; a connection the collector has closed takes nothing, as for the client."""
        events = [_event(action, session) for action in actions]
        frame = encode_frame(Batch(first=first, events=events, verdicts=True))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await asyncio.get_running_loop().sock_sendall(self.sock, frame)

    async def next(self) -> CollectorMessage | None:
        """The next reply, or None once the collector has closed the connection."""
        while not self.received:
            try:
                data = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(self.sock, 1 << 16), 10)
            except ConnectionResetError:  # closed with our last batch unread
                data = b""
            if not data:
                return None
            self.received += [collector_message_decoder.decode(body) for body in self.frames.feed(data)]
        return self.received.pop(0)

    async def rest(self) -> list[CollectorMessage]:
        """Every reply until the collector closes the connection."""
        replies = []
        while (message := await self.next()) is not None:
            replies.append(message)
        return replies


class HeldPass:
    """One write pass to hold at a gate; ``fail``: then it fails every file in it (ENOSPC)."""

    def __init__(self, *, fail: bool) -> None:
        self.fail = fail
        self.entered = threading.Event()
        self.gate = threading.Event()


class ControlledWrites:
    """Stands in for ``Writer.write``: the passes planned in ``held`` are held (and maybe failed) in
    turn; every other pass writes for real. ``calls`` records each call's file count and thread."""

    def __init__(self, write: Callable[..., Any]) -> None:
        self.write = write
        self.held: list[HeldPass] = []
        self.calls: list[tuple[int, bool]] = []
        """``(files, on the main thread)`` of every call."""
        self.hook: Callable[[], None] | None = None
        """Called at the start of every call (after recording it)."""

    def hold(self, *, fail: bool) -> HeldPass:
        """Hold the next pass not planned yet."""
        held = HeldPass(fail=fail)
        self.held.append(held)
        return held

    def __call__(
        self, job: FlushJob, *, durable: bool
    ) -> tuple[list[tuple[AppendFile, bytes]], list[tuple[AppendFile, OSError]]]:
        self.calls.append((len(job.items), threading.current_thread() is threading.main_thread()))
        if self.hook is not None:
            self.hook()
        if not self.held:
            return self.write(job, durable=durable)  # type: ignore[no-any-return]
        held = self.held.pop(0)
        held.entered.set()
        held.gate.wait(10)
        if not held.fail:
            return self.write(job, durable=durable)  # type: ignore[no-any-return]
        full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return [], [(target, full) for target, _data in job.items]


class Lab:
    """A collector served on uvloop in this process (``gz_ia.collector.testing``), its write pass
    under control, and its clients."""

    def __init__(self, base: Path, *, durability: Literal["os", "fsync"] = "fsync") -> None:
        self.base = base
        self.root = base / ".harness"
        # Durable passes always run in the worker thread, where the gate can hold them.
        self.durability = durability
        self._running: RunningCollector | None = None
        self._writes: ControlledWrites | None = None

    @property
    def collector(self) -> Collector:
        assert self._running is not None, "the collector runs only inside run()"
        return self._running.collector

    @property
    def writes(self) -> ControlledWrites:
        assert self._writes is not None, "the collector runs only inside run()"
        return self._writes

    @property
    def session_file(self) -> Path:
        return self.root / "sessions" / f"{_SESSION}.events.jsonl"

    async def connect(self, producer: str) -> Peer:
        """A connection that has said hello as ``producer``."""
        assert self._running is not None
        welcomed = await self._running.connect(producer)
        return Peer(welcomed.sock)

    def run(self, scenario: Callable[[Lab], Awaitable[None]]) -> None:
        async def main() -> None:
            async with running_collector(self.base, durability=self.durability) as running:
                self._running = running
                self._writes = ControlledWrites(running.collector.writer.write)
                running.collector.writer.write = self._writes  # type: ignore[method-assign]
                try:
                    await scenario(self)
                finally:
                    for held in self._writes.held:
                        held.gate.set()

        uvloop.run(main())


@pytest.fixture(name="lab")
def _lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lab:
    monkeypatch.setenv("GZ_IA_STATE_DIR", str(tmp_path / "state"))
    return Lab(tmp_path)


def _deliveries(path: Path) -> list[tuple[str, str]]:
    return [(line["delivery"], line["action"]) for line in map(json.loads, path.read_text().splitlines())]


def test_a_producer_whose_staged_batch_was_lost_sends_nothing_more_until_it_reconnects(lab: Lab) -> None:
    """Producer bb's batch is staged into s1 while a pass that fails for s1 is in flight. Its
    connection is closed with that failure at once: a later batch read on it would be written into
    s1 first, and the lost one, resent, would be answered as a duplicate and never written."""

    async def scenario(lab: Lab) -> None:
        collector = lab.collector
        other, peer, third = await lab.connect("aa"), await lab.connect("bb"), await lab.connect("dd")
        failing = lab.writes.hold(fail=True)
        await other.send(1, "aa-1")  # its pass is held, then fails for s1
        await until(failing.entered.is_set)
        await peer.send(1, "bb-1")  # staged in s1 while that pass is in flight: lost with it
        await third.send(1, "dd-1", session="s2")  # something for the next pass to write
        await until(lambda: len(collector.passes._replies) == 2)
        following = lab.writes.hold(fail=False)
        failing.gate.set()
        await until(following.entered.is_set)
        failure = await other.next()
        assert isinstance(failure, Error) and failure.reason is RejectReason.WRITE_FAILED
        # Sent before bb learns that bb-1 was lost, while the next pass is in flight: read, it
        # would be staged into s1 as rebuilt from its file, and written before bb-1's resend.
        await peer.send(2, "bb-2")
        await until(
            lambda: (
                len(collector.passes._replies) == 1
                or not any(c.producer == "bb" and not c.closing for c in collector.connections)
            )
        )
        following.gate.set()
        replies = await peer.rest()
        assert [type(message) for message in replies] == [Error]
        again = await lab.connect("bb")
        await again.send(1, "bb-1", "bb-2")  # the client resends everything unacknowledged, in order
        verdicts = await again.next()
        assert isinstance(verdicts, Verdicts)
        assert all(seq > 0 for seq in verdicts.seqs), f"answered as duplicates, never written: {verdicts.seqs}"
        assert isinstance(await third.next(), Verdicts)

    lab.run(scenario)
    assert _deliveries(lab.session_file) == [("bb:1", "bb-1"), ("bb:2", "bb-2")]


def test_a_duplicate_is_answered_only_once_its_original_is_written(lab: Lab) -> None:
    """A resend arriving while its original is still in flight is a duplicate only if that write
    succeeds: when it fails, the resend fails too, and the next resend is written."""

    async def scenario(lab: Lab) -> None:
        first = await lab.connect("cc")
        failing = lab.writes.hold(fail=True)
        await first.send(1, "cc-1")
        await until(failing.entered.is_set)
        resent = await lab.connect("cc")  # as after a dropped connection
        await resent.send(1, "cc-1")
        await until(lambda: len(lab.collector.passes._replies) == 1)
        failing.gate.set()
        for peer in (first, resent):
            replies = await peer.rest()
            assert [type(message) for message in replies] == [Error], replies
        last = await lab.connect("cc")
        await last.send(1, "cc-1")
        verdicts = await last.next()
        assert isinstance(verdicts, Verdicts) and verdicts.seqs == [1]

    lab.run(scenario)
    assert _deliveries(lab.session_file) == [("cc:1", "cc-1")]


def test_past_the_staging_bound_reading_resumes_as_soon_as_a_pass_takes_what_was_staged(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the staging bound every connection waits; the batches it waits for are detached by the
    next pass, which may take long (file creation, a slow disk). From then on nothing waits to be
    taken, so the collector reads again while that pass is in flight instead of idling through it."""
    monkeypatch.setattr(write_passes, "_MAX_STAGED_BYTES", 1)  # any staged batch is past it

    async def scenario(lab: Lab) -> None:
        collector = lab.collector
        first, second, third = await lab.connect("aa"), await lab.connect("bb"), await lab.connect("cc")
        held = lab.writes.hold(fail=False)
        await first.send(1, "aa-1")
        await until(held.entered.is_set)
        await second.send(1, "bb-1")  # staged while the first pass is held: past the bound
        await until(lambda: collector.overloaded)
        taking = lab.writes.hold(fail=False)
        held.gate.set()
        await until(taking.entered.is_set)  # the second pass has taken bb-1 and is held
        await third.send(1, "cc-1", session="s2")
        # Read and staged beside the held pass (well before the gate gives up after 10 s).
        await asyncio.wait_for(until(lambda: len(collector.passes._replies) == 1), 3)
        (reply, _outcome) = collector.passes._replies[0]
        assert isinstance(reply, Connection) and reply.producer == "cc"
        taking.gate.set()
        for peer in (first, second, third):
            assert isinstance(await peer.next(), Verdicts)

    lab.run(scenario)
    assert _deliveries(lab.session_file) == [("aa:1", "aa-1"), ("bb:1", "bb-1")]


def test_a_wide_pass_of_appends_is_written_on_the_loop_in_parts_that_let_it_read_between(tmp_path: Path) -> None:
    """Creating 600 files goes to the worker thread; the next pass, appends to those 600 open files,
    is written on the loop (a worker thread would wait for the GIL at every write), at most
    _INLINE_ITEMS files at a time, and a batch sent meanwhile is read and staged between the parts."""
    lab = Lab(tmp_path, durability="os")
    wide = [f"w{index:03d}" for index in range(600)]

    async def scenario(lab: Lab) -> None:
        collector = lab.collector
        first, second = await lab.connect("aa"), await lab.connect("bb")
        staged_between: list[int] = []

        def between_parts() -> None:
            if len(lab.writes.calls) == 2:  # the first part on the loop: bb-1 arrives now
                second.sock.send(encode_frame(Batch(first=1, events=[_event("bb-1", "s2")], verdicts=True)))
            if len(lab.writes.calls) == 3:
                staged_between.append(len(collector.passes._replies))

        lab.writes.hook = between_parts
        for number, prefix in ((1, "a"), (601, "b")):
            events = [_event(f"{prefix}-{session}", session) for session in wide]
            frame = encode_frame(Batch(first=number, events=events, verdicts=True))
            await asyncio.get_running_loop().sock_sendall(first.sock, frame)
            assert isinstance(await first.next(), Verdicts)
        assert isinstance(await second.next(), Verdicts)
        calls = lab.writes.calls
        assert calls[0] == (600, False)  # 600 files to create: the worker thread
        assert [files for files, _ in calls[1:4]] == [write_passes._INLINE_ITEMS, write_passes._INLINE_ITEMS, 88]
        assert all(on_loop for _, on_loop in calls[1:4])
        assert staged_between == [1], "bb-1 was not read between the parts of the pass"

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GZ_IA_STATE_DIR", str(tmp_path / "state"))
        lab.run(scenario)
    assert _deliveries(lab.root / "sessions" / "w599.events.jsonl") == [("aa:600", "a-w599"), ("aa:1200", "b-w599")]


def test_a_failed_sync_is_never_acknowledged_and_the_collector_says_it_is_unhealthy(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """durability = fsync: an fdatasync that fails with EIO (a device error; no disk here fails on
    demand, so the call is replaced) answers write_failed, cuts the unsynced bytes off, and makes
    the status unhealthy with the reason, until a write to that root succeeds again."""
    real = os.fdatasync
    failing = threading.Event()

    def fdatasync(fd: int) -> None:
        if failing.is_set():
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)

    async def scenario(lab: Lab) -> None:
        collector = lab.collector
        peer = await lab.connect("aa")
        await peer.send(1, "aa-1")
        assert isinstance(await peer.next(), Verdicts)
        assert collector.status()["healthy"] is True
        failing.set()
        await peer.send(2, "aa-2")
        failure = await peer.next()
        assert isinstance(failure, Error) and failure.reason is RejectReason.WRITE_FAILED
        status = collector.status()
        assert status["healthy"] is False
        assert any("an I/O error (EIO)" in str(reason) and str(lab.root) in str(reason) for reason in status["reasons"])  # type: ignore[attr-defined]
        assert _deliveries(lab.session_file) == [("aa:1", "aa-1")], "the unsynced line is cut off again"
        failing.clear()
        again = await lab.connect("aa")
        await again.send(2, "aa-2")
        verdicts = await again.next()
        assert isinstance(verdicts, Verdicts)
        assert (collector.status()["healthy"], collector.status()["reasons"]) == (True, [])

    lab.run(scenario)
    assert _deliveries(lab.session_file) == [("aa:1", "aa-1"), ("aa:2", "aa-2")]
