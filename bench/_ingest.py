"""Ingest: separate sender processes push a pre-encoded load; the clock stops when it is all on disk.

The sender processes are forked from the bench after the load is encoded, so they share it without
copying and spend the measured time in ``sendall`` only. They connect first (ours also exchange
Hello/Welcome), report ready, and start together when the parent releases them; the parent takes the
start time just before. When the clock stops:

* ours: when the last sender has the collector's verdicts for all its events. The collector sends a
  batch's verdicts only after the write (and, with ``--durability fsync``, after the fdatasync), so
  this is "every event is on disk" from the collector's own mouth, and needs no polling;
* peers: once every sender has written its last byte, the parent polls the total size of the session
  files until it equals the bytes sent. Polling only starts then, so it cannot steal CPU from the peer
  while it works (statting 10,000 files takes tens of milliseconds).

Every run is then verified file by file (:func:`verify`).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import socket
import threading
import time
from collections.abc import Sequence
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.protocol import Error, FrameReader, Verdicts, Welcome, collector_message_decoder

from ._common import BenchError, cpu_seconds, rss_bytes
from ._load import Load, hello_frame, log_all, log_calls, routed, session_id
from ._systems import Ours, System

_mp: Final = multiprocessing.get_context("fork")
_RUN_TIMEOUT: Final = 600.0

# Set by the parent before forking, read by the sender processes (shared copy-on-write).
_current: Load | None = None


class IngestRun(msgspec.Struct, kw_only=True):
    """One verified ingest run."""

    seconds: float
    events: int
    bytes_in: int
    collector_cpu: float
    collector_peak_rss: int
    extra: dict[str, float] = {}

    @property
    def events_per_second(self) -> float:
        """Throughput in events per second."""
        return self.events / self.seconds

    @property
    def cores(self) -> float:
        """Average CPU cores the collector used during the clock."""
        return self.collector_cpu / self.seconds


class _Done(msgspec.Struct, array_like=True):
    index: int
    finished: float
    acknowledged: int
    rejected: int
    error: str
    extra: dict[str, float] = {}


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return sock


def _peer_sender(
    index: int, path: Path, ready: queue.Queue[int], go: Event, done: queue.Queue[_Done], finish: Event
) -> None:
    assert _current is not None
    payload = _current.json[index]
    sock = _connect(path)
    ready.put(index)
    go.wait()
    sock.sendall(payload)
    done.put(_Done(index, time.monotonic(), 0, 0, ""))
    # Keep the connection open until the parent is done: some peers drop what a closed
    # connection left unread.
    finish.wait(_RUN_TIMEOUT)
    sock.close()


class _VerdictCounter(threading.Thread):
    """Read a connection's replies until ``expected`` events have their verdict (or an error)."""

    def __init__(self, sock: socket.socket, expected: int) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.expected = expected
        self.acknowledged = 0
        self.rejected = 0
        self.error = ""
        self.finished = 0.0

    def run(self) -> None:
        reader = FrameReader()
        while self.acknowledged < self.expected and not self.error:
            data = self.sock.recv(1 << 20)
            if not data:
                self.error = "the collector closed the connection"
                break
            for body in reader.feed(data):
                message = collector_message_decoder.decode(body)
                if isinstance(message, Verdicts):
                    self.acknowledged += message.count
                    self.rejected += len(message.rejected)
                    if message.rejected and not self.error:
                        first = message.rejected[0]
                        self.error = f"rejected: {first.reason}: {first.detail}"
                elif isinstance(message, Error):
                    self.error = f"collector error {message.reason}: {message.detail}"
        self.finished = time.monotonic()


def _frame_sender(
    index: int, path: Path, root: str, shares: int, ready: queue.Queue[int], go: Event, done: queue.Queue[_Done]
) -> None:
    """A connection sending its pre-encoded frames, routed to the shares as the thin client does."""
    assert _current is not None
    payload = routed(_current.frames[index], shares)
    sock = _connect(path)
    sock.sendall(hello_frame(root, routes=shares > 1))
    reader = FrameReader()
    while True:
        bodies = reader.feed(sock.recv(65536))
        if bodies:
            welcome = collector_message_decoder.decode(bodies[0])
            if not isinstance(welcome, Welcome) or welcome.shares != shares:
                raise BenchError(f"expected a Welcome naming {shares} share(s), got {welcome}")
            break
    counter = _VerdictCounter(sock, _current.frame_events[index])
    ready.put(index)
    go.wait()
    counter.start()
    sock.sendall(payload)
    counter.join()
    done.put(_Done(index, counter.finished, counter.acknowledged, counter.rejected, counter.error))
    sock.close()


def _agent(index: int, path: Path, root: str, ready: queue.Queue[int], go: Event, done: queue.Queue[_Done]) -> None:
    """An agent process: the real thin client, ``Client.log`` per event, then ``flush``."""
    assert _current is not None
    from gz_ia.client import Client

    load = _current
    per_session = load.events // load.sessions
    ids = [session_id(s, load.sessions) for s in range(load.sessions)][index :: load.senders]
    calls = log_calls(ids, per_session)
    # A buffer that holds the whole share: log() must not drop under a benchmark's burst
    # (dropping oldest under overload is the client's documented behaviour, counted in stats).
    client = Client(socket_path=path, root=root, max_events=len(calls) + 1, max_bytes=1 << 30)
    ready.put(index)
    go.wait()
    cpu0 = time.process_time()
    log_all(client.log, calls)
    logged = time.monotonic()
    delivered = client.flush(timeout=_RUN_TIMEOUT)
    finished = time.monotonic()
    cpu = time.process_time() - cpu0
    stats = client.stats()
    error = "" if delivered else f"flush timed out: {stats}"
    if stats.dropped or stats.rejected or stats.invalid:
        error = f"lost events: {stats}"
    done.put(_Done(index, finished, stats.accepted, stats.rejected, error, {"cpu": cpu, "log_seconds": logged}))
    client.close(timeout=1.0)


def run_ingest(system: System | Sequence[System], load: Load, *, mode: str = "frames") -> IngestRun:
    """Feed ``load`` to the running ``system`` and return the verified run.

    Args:
        system: a started system, or several of ours (frames and client modes): sender ``i`` then
            feeds ``system[i % len(system)]``, so each one holds a disjoint share of the sessions
            (see :func:`share`). CPU is their sum, peak RSS their sum of peaks.
        load: the pre-encoded load.
        mode: ``json`` (peers), ``frames`` (ours, pre-encoded) or ``client`` (ours, real thin client).

    Raises:
        BenchError: a sender failed, the run timed out, or verification failed.
    """
    global _current  # noqa: PLW0603 - how a forked sender finds the load without pickling it
    systems = [system] if isinstance(system, System) else list(system)
    if mode == "json" and len(systems) != 1:
        raise ValueError("the peers' json mode feeds one system")
    _current = load
    ready: queue.Queue[int] = _mp.Queue()  # type: ignore[assignment]
    done: queue.Queue[_Done] = _mp.Queue()  # type: ignore[assignment]
    go = _mp.Event()
    finish = _mp.Event()
    procs = []
    for index in range(load.senders):
        fed = systems[index % len(systems)]
        if mode == "json":
            target, args = _peer_sender, (index, fed.socket, ready, go, done, finish)
        elif mode == "frames":
            shares = fed.shards if isinstance(fed, Ours) else 1
            target, args = _frame_sender, (index, fed.socket, str(fed.root), shares, ready, go, done)  # type: ignore[assignment]
        else:
            target, args = _agent, (index, fed.socket, str(fed.root), ready, go, done)  # type: ignore[assignment]
        proc = _mp.Process(target=target, args=args, daemon=True)
        proc.start()
        procs.append(proc)
    try:
        for _ in procs:
            ready.get(timeout=120)
        cpu0 = sum(cpu_seconds(one.pid) for one in systems)
        start = time.monotonic()
        go.set()
        results: list[_Done] = []
        for _ in procs:
            results.append(done.get(timeout=_RUN_TIMEOUT))
        errors = [f"sender {r.index}: {r.error}" for r in results if r.error]
        name = systems[0].name
        if errors:
            raise BenchError(f"{name}: " + "; ".join(errors[:3]))
        if mode == "json":
            end = _wait_for_bytes(systems[0], load.json_bytes, start + _RUN_TIMEOUT)
        else:
            end = max(r.finished for r in results)
            acknowledged = sum(r.acknowledged for r in results)
            if acknowledged != load.events:
                raise BenchError(f"{name}: {acknowledged} events acknowledged, {load.events} sent")
        cpu = sum(cpu_seconds(one.pid) for one in systems) - cpu0
    finally:
        go.set()
        finish.set()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        _current = None
    seconds = end - start
    extra: dict[str, float] = {}
    if mode == "client":
        extra["agent_cpu_per_event_us"] = sum(r.extra["cpu"] for r in results) / load.events * 1e6
        extra["log_phase_seconds"] = max(r.extra["log_seconds"] for r in results) - start
    return IngestRun(
        seconds=seconds,
        events=load.events,
        bytes_in=load.json_bytes if mode == "json" else sum(len(f) for f in load.frames),
        collector_cpu=cpu,
        collector_peak_rss=sum(rss_bytes(one.pid, peak=True) for one in systems),
        extra=extra,
    )


def run_verified(system: System, load: Load, *, mode: str = "frames") -> IngestRun:
    """Start ``system``, feed it ``load`` (:func:`run_ingest`), stop it and :func:`verify` its files."""
    system.start()
    try:
        result = run_ingest(system, load, mode=mode)
    finally:
        system.stop()
    verify(system, load.expected, with_seq=mode != "json")
    return result


def share(load: Load, part: int, parts: int) -> dict[str, int]:
    """The sessions (and their event counts) that system ``part`` of ``parts`` receives from
    :func:`run_ingest`: those of senders ``part``, ``part + parts``, … (session ``s`` is sender
    ``s % senders``'s)."""
    if load.senders % parts:
        raise ValueError(f"{load.senders} senders do not split evenly over {parts} systems")
    return {sid: count for index, (sid, count) in enumerate(load.expected.items()) if index % parts == part}


def _wait_for_bytes(system: System, expected: int, deadline: float) -> float:
    """Poll the session files' total size until it reaches ``expected``; return when it did."""
    directory = system.sessions_dir
    interval = 0.002
    while True:
        total = 0
        with os.scandir(directory) as entries:
            for entry in entries:
                total += entry.stat(follow_symlinks=False).st_size
        now = time.monotonic()
        if total >= expected:
            if total > expected:
                raise BenchError(f"{system.name}: {total} bytes on disk, {expected} sent")
            return now
        if now > deadline:
            raise BenchError(f"{system.name}: only {total} of {expected} bytes on disk after the timeout")
        if system.proc is not None and system.proc.poll() is not None:
            raise BenchError(f"{system.name} exited during the run:\n{system.log()[-2000:]}")
        time.sleep(interval)
        interval = min(interval * 2, 0.05)


class _Line(msgspec.Struct):
    session_id: str
    action: str
    stage: str
    seq: int = 0


_line_decoder: Final = msgspec.json.Decoder(_Line)


def verify(system: System, expected: dict[str, int], *, with_seq: bool) -> None:
    """Check the session files: exact count, valid JSON in the right file, each event exactly once.

    With ``with_seq`` (ours), also check that ``seq`` runs 1, 2, … without gaps in every file.

    Raises:
        BenchError: the first problem found.
    """
    directory = system.sessions_dir
    names = set(os.listdir(directory))
    wanted = {f"{sid}.events.jsonl": sid for sid in expected}
    if names != set(wanted):
        extra = sorted(names - set(wanted))[:3]
        missing = sorted(set(wanted) - names)[:3]
        raise BenchError(f"{system.name}: session files differ: extra {extra}, missing {missing}")
    rejects = system.root / "rejects.jsonl"
    if rejects.exists() and rejects.stat().st_size:
        raise BenchError(f"{system.name}: rejects.jsonl is not empty: {rejects.read_text()[:500]}")
    for name, sid in wanted.items():
        data = (directory / name).read_bytes()
        if data and not data.endswith(b"\n"):
            raise BenchError(f"{system.name}: {name} ends with a partial line")
        try:
            lines = _line_decoder.decode_lines(data)
        except msgspec.DecodeError as exc:
            raise BenchError(f"{system.name}: {name} holds a line that is not a valid event: {exc}") from exc
        if len(lines) != expected[sid]:
            raise BenchError(f"{system.name}: {name} holds {len(lines)} events, {expected[sid]} expected")
        if any(line.session_id != sid for line in lines):
            raise BenchError(f"{system.name}: {name} holds another session's event")
        if len({(line.action, line.stage) for line in lines}) != len(lines):
            raise BenchError(f"{system.name}: {name} holds an event twice")
        if with_seq and [line.seq for line in lines] != list(range(1, len(lines) + 1)):
            raise BenchError(f"{system.name}: {name} has seq gaps or disorder")
