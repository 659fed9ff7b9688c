"""Hostile input against a real collector: fuzzed frames, slow, idle and half-open peers.

While the socket is attacked, a well-behaved client on its own connection keeps sending; the tests
assert that it keeps getting verdicts (progress, not wall-clock thresholds), that the collector never
dies, that whatever it answers is well-formed, and that its memory stays bounded. Durations scale
with ``GZ_IA_SOAK_SECONDS`` (the ``soak`` fixture).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tests.conftest import first_reply, wait_for

from gz_ia.client import build_event
from gz_ia.client.protocol import (
    MAX_FRAME,
    PROTOCOL_VERSION,
    Batch,
    FrameReader,
    Hello,
    Welcome,
    collector_message_decoder,
    encode_frame,
)

# The write and delivery path: run against one process and against a sharded collector.
pytestmark = pytest.mark.shards(1, 2)

MIB = 1024


@pytest.fixture(autouse=True)
def _private_spool(monkeypatch: pytest.MonkeyPatch, short_tmp: Path) -> None:
    """Clients and collectors of this test spool into the test's own directory, never ~/.local/state."""
    monkeypatch.setenv("GZ_IA_SPOOL_DIR", str(short_tmp / "spool"))


def vm_kib(pid: int, field: str) -> int:
    """A memory figure of a live process in KiB (VmRSS, VmHWM)."""
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


def metric_value(text: str, sample: str) -> float:
    """The value of one exact sample line (name with labels) of a Prometheus exposition."""
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class GoodClient:
    """A well-behaved client sending READ/FINISH cycles from a background thread, one verdict at a time."""

    def __init__(self, collector: Any, session_id: str) -> None:
        self.client = collector.client()
        self.session_id = session_id
        self.verdicts: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="good-client", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        cycle = 0
        while not self._stop.is_set():
            for stage in ("READ", "FINISH"):
                event = build_event(
                    session_id=self.session_id,
                    action=f"good-{cycle}",
                    stage=stage,
                    agent="good",
                    attrs={"eid": f"good-{cycle}-{stage}"},
                )
                try:
                    self.verdicts.append(self.client.send(event, timeout=60).seq)
                except Exception as exc:
                    self.errors.append(repr(exc))
                    return
            cycle += 1
            time.sleep(0.01)

    def progressed(self, since: int, timeout: float = 60.0) -> int:
        """Wait until more verdicts than ``since`` arrived; return the new count (fail on a stall)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert not self.errors, f"the well-behaved client failed: {self.errors}"
            if len(self.verdicts) > since:
                return len(self.verdicts)
            time.sleep(0.02)
        pytest.fail(f"the well-behaved client got no verdict for {timeout} s (stuck at {since})")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)
        self.client.close(timeout=5)
        assert not self.errors, f"the well-behaved client failed: {self.errors}"


def assert_good_session(collector: Any, good: GoodClient, schema_validator: Any) -> None:
    """Every verdict the good client got is one line of its session, once, seq gap-free, schema-valid."""
    lines = collector.session_lines(good.session_id)
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    eids = [line["attrs"]["eid"] for line in lines]
    assert len(eids) == len(set(eids)), "a good event was written twice"
    assert sorted(good.verdicts) == [line["seq"] for line in lines]
    for line in lines:
        schema_validator.validate(line)


def _connect(collector: Any, timeout: float = 5.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(collector.socket))  # blocking: a full backlog waits instead of failing with EAGAIN
    sock.settimeout(timeout)
    return sock


def exchange(collector: Any, payload: bytes, *, read: bool = True) -> list[Any]:
    """Send ``payload`` on a fresh connection, half-close, and decode every frame the collector answers.

    Fails the test if the collector's answer is not a sequence of well-formed frames.
    """
    replies: list[Any] = []
    with _connect(collector) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(payload)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        if not read:
            return replies
        reader = FrameReader()
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            replies += [collector_message_decoder.decode(body) for body in reader.feed(chunk)]
    return replies


def hello_frame(collector: Any, producer: str | None = None, *, routes: bool | None = None) -> bytes:
    """A valid hello; offering to route (:class:`Route` frames) or not, at random unless told."""
    producer = producer or f"{random.getrandbits(48):012x}"
    routes = random.random() < 0.5 if routes is None else routes
    hello = Hello(proto=PROTOCOL_VERSION, producer=producer, pid=1, root=str(collector.root), routes=routes)
    return encode_frame(hello)


def batch_frame(first: int, events: list[dict[str, Any]]) -> bytes:
    return encode_frame(Batch(first=first, events=[msgspec.Raw(msgspec.msgpack.encode(e)) for e in events]))


def fuzz_event(i: int) -> dict[str, Any]:
    return {
        "timestamp": "2025-06-01T12:00:00Z",
        "session_id": f"fz-{i % 3}",
        "action": f"fz-{i}",
        "stage": "READ",
        "status": "OK",
        "agent": "fuzz",
    }


# --- hypothesis strategies of frames ---------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(),
    st.text(max_size=30),
    st.binary(max_size=30),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=8,
)
_bad_ids = ["../x", "a/b", ".h", "..", "/etc/passwd", "a\x00b", "x" * 129, "ok\n", ""]
_session_ids = st.one_of(
    st.sampled_from(["fz-1", "fz-2", "fz-3"]), st.sampled_from(_bad_ids), st.text(max_size=140), _values
)
_events = st.fixed_dictionaries(
    {
        "timestamp": st.one_of(
            st.just("2025-06-01T12:00:00Z"),
            st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
            st.text(max_size=30),
            _values,
        ),
        "session_id": _session_ids,
        "action": st.one_of(st.sampled_from(["a", "b", "c"]), st.text(max_size=600), _values),
        "stage": st.one_of(st.sampled_from(["READ", "PENDING", "FINISH"]), _values),
        "status": st.one_of(st.sampled_from(["OK", "FAILED"]), _values),
        "agent": st.one_of(st.just("fuzz"), st.text(max_size=140), _values),
    },
    optional={
        "error": st.one_of(st.text(max_size=50), _values),
        "duration_ms": st.one_of(st.integers(min_value=-5, max_value=2**60), _values),
        "role": st.one_of(st.text(max_size=140), _values),
        "parent_session_id": _session_ids,
        "attrs": st.one_of(st.dictionaries(st.text(max_size=70), _scalars, max_size=40), _values),
        "zz_extra": _values,
    },
)
_event_bodies = st.one_of(_events.map(msgspec.msgpack.encode), st.binary(max_size=200))


def _messages(root: str) -> st.SearchStrategy[Any]:
    hello = st.fixed_dictionaries(
        {
            "type": st.just("hello"),
            "proto": st.one_of(st.just(PROTOCOL_VERSION), _values),
            "producer": st.one_of(st.just("abcdef12"), st.text(max_size=40), _values),
            "pid": st.one_of(st.integers(min_value=0, max_value=2**31), _values),
            "root": st.one_of(st.just(root), st.sampled_from(["/", "/etc", "../..", root + "/../x"]), _values),
        },
        optional={"program": _values, "routes": st.one_of(st.booleans(), _values)},
    )
    batch = st.builds(
        lambda first, bodies, verdicts: {
            "type": "batch",
            "first": first,
            "events": [msgspec.Raw(b) for b in bodies],
            "verdicts": verdicts,
        },
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.lists(_event_bodies, max_size=8),
        st.one_of(st.booleans(), _values),
    )
    query = st.fixed_dictionaries({"type": st.just("query")}, optional={"what": _values})
    route = st.fixed_dictionaries({"type": st.just("route"), "share": st.one_of(st.integers(-2, 3), _values)})
    other = st.one_of(_values, st.fixed_dictionaries({"type": st.text(max_size=10)}, optional={"x": _values}))
    return st.one_of(batch, hello, query, route, other)


@st.composite
def _frames(draw: Any, root: str) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        body = draw(st.binary(max_size=512))
    else:
        body = msgspec.msgpack.encode(draw(_messages(root)))
    data = bytearray(body)
    for position, value in draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=3)):
        if data:
            data[position % len(data)] = value
    length = len(data) if draw(st.integers(0, 9)) else draw(st.integers(0, 2**32 - 1))
    frame = length.to_bytes(4, "big") + bytes(data)
    cut = draw(st.one_of(st.none(), st.integers(0, len(frame))))
    return frame if cut is None else frame[:cut]


# --- 5. fuzzing --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_fuzzed_frames_never_crash_or_stall(collector: Any, schema_validator: Any, soak: Any) -> None:
    """Random, mutated, truncated and oversized frames: no crash, no stall of a good client, flat memory."""
    budget = soak(60.0) * 0.75
    phase_budget = budget / 5
    assert collector.proc is not None
    pid = collector.proc.pid
    rng = random.Random()
    good = GoodClient(collector, "good-1")
    good.start()
    progress = good.progressed(0)
    counts: dict[str, int] = {}
    held: list[socket.socket] = []

    def checkpoint() -> None:
        nonlocal progress
        assert collector.proc is not None
        assert collector.proc.poll() is None, f"collector died:\n{collector.log()}"
        progress = good.progressed(progress)

    def run_phase(name: str, one: Any) -> None:
        deadline = time.monotonic() + phase_budget
        done = 0
        while time.monotonic() < deadline:
            one()
            done += 1
            if done % 25 == 0:
                checkpoint()
        counts[name] = done
        checkpoint()

    # Raw random bytes, sometimes behind a plausible length prefix.
    def raw_bytes() -> None:
        payload = rng.randbytes(rng.randint(0, 4096))
        if rng.random() < 0.5:
            payload = len(payload).to_bytes(4, "big") + payload
        exchange(collector, payload)

    run_phase("raw_random", raw_bytes)
    rss_warm = vm_kib(pid, "VmRSS")

    # Valid frames cut anywhere; some connections are left open half-way through a frame.
    def truncated() -> None:
        whole = hello_frame(collector) + batch_frame(1, [fuzz_event(i) for i in range(rng.randint(1, 20))])
        cut = whole[: rng.randint(0, len(whole) - 1)]
        if len(held) < 50 and rng.random() < 0.3:
            sock = _connect(collector)
            sock.sendall(cut)
            held.append(sock)
        else:
            exchange(collector, cut)

    run_phase("truncated", truncated)

    # Length prefixes beyond the 1 MiB limit, before and after a valid hello.
    too_large: list[str] = []

    def huge() -> None:
        size = rng.choice([MAX_FRAME + 1, 2**31, 2**32 - 1, rng.randint(MAX_FRAME + 1, 2**32 - 1)])
        prefix = hello_frame(collector) if rng.random() < 0.5 else b""
        replies = exchange(collector, prefix + size.to_bytes(4, "big") + rng.randbytes(rng.randint(0, 2048)))
        too_large.extend(str(r.reason) for r in replies if type(r).__name__ == "Error")

    run_phase("huge_length", huge)
    assert "frame_too_large" in too_large, too_large[:10]

    # A valid hello, then garbage: random bodies in well-formed frames, or bytes.
    def hello_then_garbage() -> None:
        frames = b"".join(
            len(body).to_bytes(4, "big") + body for body in (rng.randbytes(rng.randint(0, 300)) for _ in range(3))
        )
        exchange(collector, hello_frame(collector) + (frames if rng.random() < 0.5 else rng.randbytes(500)))

    run_phase("hello_then_garbage", hello_then_garbage)

    # Hypothesis: structured messages (hello, batch, query, anything), mutated, mis-framed, truncated.
    deadline = time.monotonic() + phase_budget
    examples = 0

    @settings(
        max_examples=max(50, int(phase_budget * 60)),
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(hello=st.booleans(), frames=st.lists(_frames(str(collector.root)), min_size=1, max_size=4))
    def structured(hello: bool, frames: list[bytes]) -> None:
        nonlocal examples
        if time.monotonic() > deadline:
            return
        examples += 1
        exchange(collector, (hello_frame(collector) if hello else b"") + b"".join(frames))
        if examples % 25 == 0:
            checkpoint()

    structured()
    counts["hypothesis"] = examples
    checkpoint()

    for sock in held:
        sock.close()
    checkpoint()
    rss_end = vm_kib(pid, "VmRSS")
    good.stop()
    assert collector.proc.poll() is None
    assert collector.proc.pid == pid
    assert_good_session(collector, good, schema_validator)
    figures = {
        "connections_by_phase": counts,
        "good_verdicts": len(good.verdicts),
        "rss_warm_mib": round(rss_warm / MIB, 1),
        "rss_end_mib": round(rss_end / MIB, 1),
        "peak_rss_mib": round(vm_kib(pid, "VmHWM") / MIB, 1),
    }
    print(f"\n=== fuzz figures ===\n{json.dumps(figures, indent=2)}")
    assert rss_end - rss_warm < 64 * MIB, f"collector memory grew from {rss_warm} KiB to {rss_end} KiB"


# --- 6. slow and hostile peers -----------------------------------------------------------------------


@pytest.mark.slow
def test_slow_and_hostile_peers_do_not_starve_a_good_client(collector: Any, schema_validator: Any, soak: Any) -> None:
    """A non-reading flooder, half-open and 1,000 idle connections, a 1 byte/s sender: a good client progresses."""
    rounds = max(6, int(soak(30.0) / 2))
    assert collector.proc is not None
    pid = collector.proc.pid
    stop = threading.Event()
    hostile: list[socket.socket] = []
    flood_sent = [0]

    # 1. A flooder that sends batches and never reads its verdicts.
    flooder = _connect(collector)
    flooder.sendall(hello_frame(collector, routes=False))
    flood_events = [
        msgspec.Raw(msgspec.msgpack.encode({**fuzz_event(0), "session_id": "flood", "action": "flood"}))
    ] * 500

    def flood() -> None:
        number = 1
        flooder.settimeout(0.5)
        while not stop.is_set():
            frame = encode_frame(Batch(first=number, events=flood_events, verdicts=True))
            try:
                flooder.sendall(frame)
            except TimeoutError:
                continue  # the collector stopped reading us (backpressure); a resend repeats the numbers
            except OSError:
                return
            number += len(flood_events)
            flood_sent[0] += len(flood_events)

    # 2. Half-open connections: half a header; a frame announced but never finished; hello then SHUT_WR.
    for payload, shut in (
        (b"\x00\x00", False),
        ((1000).to_bytes(4, "big") + b"x" * 10, False),
        (hello_frame(collector), True),
    ):
        sock = _connect(collector)
        sock.sendall(payload)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        hostile.append(sock)

    # 3. A thousand idle connections.
    for _ in range(1000):
        hostile.append(_connect(collector))

    # 4. One byte per second: a valid hello and batch, trickled.
    trickle = _connect(collector)
    trickle_event = {**fuzz_event(1), "session_id": "trickle"}
    trickle_payload = hello_frame(collector, routes=False) + batch_frame(1, [trickle_event])
    trickled = [0]

    def drip() -> None:
        while not stop.is_set() and trickled[0] < len(trickle_payload) - 1:
            trickle.sendall(trickle_payload[trickled[0] : trickled[0] + 1])
            trickled[0] += 1
            stop.wait(1.0)

    threads = [threading.Thread(target=flood, daemon=True), threading.Thread(target=drip, daemon=True)]
    for thread in threads:
        thread.start()
    good = GoodClient(collector, "good-2")
    paused_seen = 0.0
    try:
        good.start()
        progress = 0
        for _ in range(rounds):
            progress = good.progressed(progress)
            assert collector.proc.poll() is None, f"collector died:\n{collector.log()}"
            metrics = collector.metrics()
            paused_seen = max(paused_seen, metric_value(metrics, "gzia_connections_paused"))
            time.sleep(1.0)
        active = metric_value(collector.metrics(), "gzia_connections_active")
        assert active >= 1000, f"only {active} connections active: idle connections were dropped or refused"
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    good.stop()
    assert paused_seen >= 1, "the non-reading flooder was never paused (no backpressure)"

    # The trickled connection was starved of nothing either: finish its frame, it gets served.
    trickle.settimeout(30)
    trickle.sendall(trickle_payload[trickled[0] :])
    reader = FrameReader()
    kinds: list[str] = []
    while "Verdicts" not in kinds:
        chunk = trickle.recv(65536)
        assert chunk, f"the trickling client was disconnected; got {kinds}"
        kinds += [type(collector_message_decoder.decode(body)).__name__ for body in reader.feed(chunk)]
    assert kinds[:2] == ["Welcome", "Verdicts"], kinds
    for sock in [*hostile, trickle, flooder]:
        sock.close()
    assert collector.proc.poll() is None
    assert collector.proc.pid == pid
    assert_good_session(collector, good, schema_validator)
    print(
        f"\n=== hostile peers === good verdicts {len(good.verdicts)}, flood events sent {flood_sent[0]}, "
        f"trickled bytes {trickled[0]}, peak paused {paused_seen}, peak RSS {vm_kib(pid, 'VmHWM') // MIB} MiB"
    )


def test_a_burst_of_clients_waits_in_the_accept_queue(collector: Any) -> None:
    """1,000 clients connect while the collector is stalled: each connect is queued, none refused.

    A non-blocking ``connect`` (the client's, which has a timeout) fails with EAGAIN once the
    listening socket's queue is full, and the event loop listens again with a backlog of 100
    unless it is passed the collector's own: this failed with the 101st client before it was.
    """
    assert collector.proc is not None
    pid = collector.proc.pid
    clients: list[socket.socket] = []
    os.kill(pid, signal.SIGSTOP)  # accepts nothing meanwhile
    try:
        for _ in range(1_000):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            clients.append(sock)
            sock.setblocking(False)
            sock.connect(str(collector.socket))  # BlockingIOError once the queue is full
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        for sock in clients:
            sock.settimeout(30)
            sock.sendall(hello_frame(collector))
        for sock in clients:
            assert isinstance(first_reply(sock), Welcome)
    finally:
        for sock in clients:
            sock.close()


def _count_full_queue_connects(monkeypatch: pytest.MonkeyPatch, path: Path) -> Callable[[], int]:
    """Count the connects to ``path`` that fail with EAGAIN (a full accept queue) from now on, by any
    socket this process makes; the connects themselves are real. Returns the counter."""
    refused = 0

    class CountingSocket(socket.socket):
        def connect(self, address: Any) -> None:
            nonlocal refused
            try:
                super().connect(address)
            except BlockingIOError:
                if address == str(path):
                    refused += 1
                raise

    monkeypatch.setattr(socket, "socket", CountingSocket)
    return lambda: refused


def test_a_send_waits_for_room_in_a_full_accept_queue(collector: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that finds the collector's accept queue full waits for room within its connect
    timeout: ``send()`` gets its verdict instead of ``CollectorUnavailable``.

    A Unix socket's connect with a timeout fails at once with EAGAIN on a full queue; the client
    used to take that as "no collector" and fail every waiting ``send()``.
    """
    assert collector.proc is not None
    pid = collector.proc.pid
    fillers: list[socket.socket] = []
    os.kill(pid, signal.SIGSTOP)
    try:
        while True:  # fill the queue: 1,025 connections with a backlog of 1,024
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.connect(str(collector.socket))
            except BlockingIOError:
                sock.close()
                break
            fillers.append(sock)
        assert len(fillers) == 1_025
        full = _count_full_queue_connects(monkeypatch, collector.socket)
        client = collector.client(connect_timeout=10.0)
        # What send() waits on: failed with CollectorUnavailable when the connect is refused.
        verdict = client.send_future(build_event(session_id="queued", action="a", stage="READ", agent="t"))
        wait_for(lambda: full() >= 2, message="the client to meet the full accept queue twice")
        assert not verdict.done()  # still waiting, not failed
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        assert verdict.result(30).seq == 1
        assert client.stats().last_error is None
    finally:
        client.close()
        for sock in fillers:
            sock.close()
    assert [line["action"] for line in collector.session_lines("queued")] == ["a"]
