"""End to end through a real collector process: agents, validation, files, restarts, limits."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gz_ia.client import Client, EventRejected, LogEvent, RejectReason, Stage, Status, build_event
from gz_ia.client.protocol import (
    PROTOCOL_VERSION,
    Batch,
    Error,
    FrameReader,
    Hello,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
)

# The write and delivery path: run against one process and against a sharded collector.
pytestmark = pytest.mark.shards(1, 2)

AGENT = Path(__file__).resolve().parents[1] / "fixtures" / "pipeline_agent.py"


def _check_session_file(path: Path, validator: Any) -> list[dict[str, Any]]:
    """Every line is complete, schema-valid JSON; seq runs 1..n without gaps."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"{path.name}: torn last line"
    lines = [json.loads(line) for line in data.splitlines()]
    for line in lines:
        errors = list(validator.iter_errors(line))
        assert not errors, (line, errors)
        assert line["timestamp"].endswith("Z")
        assert line["session_id"] == path.name.removesuffix(".events.jsonl")
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    deliveries = [line["delivery"] for line in lines]
    assert len(set(deliveries)) == len(deliveries), "an event was written twice"
    return lines


def _run_agents(collector: Any, specs: list[tuple[str, int, int, list[str]]]) -> list[dict[str, Any]]:
    procs = [
        subprocess.Popen(
            [sys.executable, str(AGENT), name, str(threads), str(cycles), *sessions],
            env=collector.env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, threads, cycles, sessions in specs
    ]
    reports = []
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0
        reports.append(json.loads(out))
    return reports


def test_many_processes_and_threads_into_shared_and_private_sessions(collector: Any, schema_validator: Any) -> None:
    """4 processes x 4 threads: every event lands once, in order per action, in valid, gap-free files."""
    specs = [(f"agent{n}", 4, 150, ["shared-a", "shared-b", f"own-{n}"]) for n in range(4)]
    reports = _run_agents(collector, specs)
    expected: Counter[str] = Counter()
    for report in reports:
        assert report["flushed"] is True
        assert report["rejected"] == 0 and report["dropped"] == 0
        expected.update(report["logged"])
    sessions = {
        path.name.removesuffix(".events.jsonl"): _check_session_file(path, schema_validator)
        for path in (collector.root / "sessions").glob("*.events.jsonl")
    }
    assert {name: len(lines) for name, lines in sessions.items()} == dict(expected)
    for lines in sessions.values():
        stages: dict[str, list[str]] = {}
        for line in lines:
            stages.setdefault(line["action"], []).append(line["stage"])
        assert all(sequence == ["READ", "PENDING", "FINISH"] for sequence in stages.values())
    assert not collector.rejects()


def _send(client: Client, session: str, action: str, stage: str, **fields: Any) -> int:
    event = build_event(session_id=session, action=action, stage=stage, agent="agy", **fields)
    return client.send(event, timeout=10).seq


def _rejected(client: Client, session: str, action: str, stage: str, **fields: Any) -> RejectReason:
    with pytest.raises(EventRejected) as caught:
        _send(client, session, action, stage, **fields)
    return caught.value.reason


def test_every_stage_rule_accepted_and_rejected(collector: Any) -> None:
    """The SPEC's stage protocol, through the real socket: verdicts, the rejects file, the session file."""
    client = collector.client()
    assert _rejected(client, "s", "a", "FINISH") is RejectReason.FINISH_WITHOUT_START
    assert _send(client, "s", "a", "READ") == 1
    assert _send(client, "s", "a", "READ") == 2  # READ repeats inside READ
    assert _send(client, "s", "a", "PENDING") == 3  # READ -> PENDING
    assert _send(client, "s", "a", "PENDING") == 4  # PENDING repeats
    assert _rejected(client, "s", "a", "READ") is RejectReason.BACKWARD_TRANSITION
    assert _send(client, "s", "a", "FINISH", status="FAILED", error="boom") == 5
    assert _rejected(client, "s", "a", "FINISH") is RejectReason.FINISH_WITHOUT_START
    assert _send(client, "s", "a", "READ") == 6  # the same action starts a new cycle
    assert _send(client, "s", "b", "PENDING") == 7  # PENDING opens a cycle
    assert _send(client, "s", "b", "FINISH", duration_ms=12) == 8
    assert _rejected(client, "other", "a", "FINISH") is RejectReason.FINISH_WITHOUT_START
    client.close()
    lines = collector.session_lines("s")
    assert [(line["action"], line["stage"]) for line in lines] == [
        ("a", "READ"),
        ("a", "READ"),
        ("a", "PENDING"),
        ("a", "PENDING"),
        ("a", "FINISH"),
        ("a", "READ"),
        ("b", "PENDING"),
        ("b", "FINISH"),
    ]
    rejects = collector.rejects()
    assert [r["reason"] for r in rejects] == [
        "finish_without_start",
        "backward_transition",
        "finish_without_start",
        "finish_without_start",
    ]
    assert all(r["event"]["session_id"] in ("s", "other") for r in rejects)
    assert not collector.session_file("other").exists()


def test_timestamps_are_normalised_to_utc_z(collector: Any) -> None:
    """A timestamp with an offset is stored as the same instant in UTC with a Z suffix."""
    client = collector.client()
    stamp = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone(timedelta(hours=2)))
    event = build_event(session_id="tz", action="a", stage="READ", agent="agy", timestamp=stamp)
    client.send(event)
    client.close()
    (line,) = collector.session_lines("tz")
    assert line["timestamp"] == "2026-05-01T10:00:00Z"


@pytest.mark.parametrize("session_id", ["../escape", "a/b", ".hidden", "/abs", "x" * 129, "nul\x00byte", ".."])
def test_path_traversal_session_ids_are_refused(collector: Any, session_id: str) -> None:
    """An unsafe session id is rejected with its reason and never becomes a file anywhere."""
    client = collector.client()
    event = LogEvent(
        timestamp=datetime.now(UTC),
        session_id=session_id,
        action="a",
        stage=Stage.READ,
        status=Status.OK,
        agent="agy",
    )
    with pytest.raises(EventRejected) as caught:
        client.send(event)
    client.close()
    assert caught.value.reason is RejectReason.INVALID_SESSION_ID
    everything = {p.relative_to(collector.base) for p in collector.base.rglob("*")}
    assert not any("escape" in str(p) or "hidden" in str(p) for p in everything)
    assert list((collector.root / "sessions").iterdir()) == []


class RawConnection:
    """A hand-driven protocol connection, for frames no well-behaved client would send."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(path))
        self.reader = FrameReader()
        self.pending: list[bytes] = []

    def hello(self, root: Path) -> None:
        self.sock.sendall(encode_frame(Hello(proto=PROTOCOL_VERSION, producer="abcdef01", pid=1, root=str(root))))
        assert isinstance(self.receive(), Welcome)

    def receive(self) -> object:
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            self.pending += self.reader.feed(data)
        return collector_message_decoder.decode(self.pending.pop(0))

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


@pytest.fixture(name="raw")
def _raw() -> Any:
    """Factory of raw connections, all closed at the end of the test."""
    made: list[RawConnection] = []

    def connect(path: Path) -> RawConnection:
        made.append(RawConnection(path))
        return made[-1]

    yield connect
    for conn in made:
        conn.sock.close()


def _good_batch(first: int, session: str = "raw") -> bytes:
    event = build_event(session_id=session, action=f"a{first}", stage="READ", agent="agy")
    return encode_frame(Batch(first=first, events=[msgspec.Raw(msgspec.msgpack.encode(event))], verdicts=True))


def test_a_malformed_frame_gets_an_error_and_the_connection_survives(collector: Any, raw: Any) -> None:
    """Garbage inside a well-framed body is answered with 'malformed'; later frames still work."""
    conn = raw(collector.socket)
    conn.hello(collector.root)
    conn.sock.sendall(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")
    error = conn.receive()
    assert isinstance(error, Error) and error.reason is RejectReason.MALFORMED and not error.fatal
    conn.sock.sendall(_good_batch(1))
    verdicts = conn.receive()
    assert isinstance(verdicts, Verdicts) and verdicts.seqs == [1]


def test_an_oversize_frame_closes_that_connection_only(collector: Any, raw: Any) -> None:
    """A length prefix over 1 MiB gets frame_too_large and a close; other connections carry on."""
    bystander = raw(collector.socket)
    bystander.hello(collector.root)
    hostile = raw(collector.socket)
    hostile.hello(collector.root)
    hostile.sock.sendall(struct.pack(">I", 64 << 20) + b"x" * 100)
    error = hostile.receive()
    assert isinstance(error, Error) and error.reason is RejectReason.FRAME_TOO_LARGE and error.fatal
    assert hostile.closed()
    bystander.sock.sendall(_good_batch(1))
    assert isinstance(bystander.receive(), Verdicts)
    assert 'gzia_events_rejected_total{reason="frame_too_large"} 1.0' in collector.metrics()


def test_a_batch_before_hello_is_refused(collector: Any, raw: Any) -> None:
    """The handshake comes first; a batch without it is a fatal protocol error."""
    conn = raw(collector.socket)
    conn.sock.sendall(_good_batch(1))
    error = conn.receive()
    assert isinstance(error, Error) and error.reason is RejectReason.HANDSHAKE_REQUIRED


def test_an_unknown_protocol_version_is_refused(collector: Any, raw: Any) -> None:
    """A client speaking another protocol version is told so, clearly."""
    conn = raw(collector.socket)
    conn.sock.sendall(encode_frame(Hello(proto=99, producer="ab", pid=1, root=str(collector.root))))
    error = conn.receive()
    assert isinstance(error, Error) and error.reason is RejectReason.UNSUPPORTED_VERSION
    assert "99" in error.detail


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_transition_state_survives_a_restart(collector: Any, how: int) -> None:
    """An action opened before a restart (clean or crash) can be FINISHed after it; seq continues."""
    client = collector.client()
    _send(client, "keep", "long task", "READ")
    _send(client, "keep", "long task", "PENDING")
    client.close()
    collector.stop(how)
    collector.start()
    client = collector.client()
    assert _rejected(client, "keep", "long task", "READ") is RejectReason.BACKWARD_TRANSITION
    assert _send(client, "keep", "long task", "FINISH") == 3
    assert _rejected(client, "keep", "long task", "FINISH") is RejectReason.FINISH_WITHOUT_START
    client.close()


def test_sigterm_loses_no_acknowledged_event(collector: Any, schema_validator: Any) -> None:
    """SIGTERM mid-stream: the collector drains and exits 0; after a restart every event is there once."""
    client = collector.client(max_events=500_000, max_bytes=256 << 20)
    stop = threading.Event()
    sent = 0

    def produce() -> None:
        nonlocal sent
        while not stop.is_set() and sent < 200_000:
            client.log(session_id="stream", action="work", stage="PENDING", agent="agy", attrs={"n": sent})
            sent += 1
            if sent % 500 == 0:
                time.sleep(0.001)

    producer = threading.Thread(target=produce)
    producer.start()
    deadline = time.monotonic() + 30
    while client.stats().accepted < 5_000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert collector.stop(signal.SIGTERM) == 0
    acknowledged = client.stats().accepted
    on_disk = len(collector.session_lines("stream"))
    assert on_disk >= acknowledged > 0
    stop.set()
    producer.join()
    collector.start()
    assert client.flush(timeout=60)
    assert client.stats().dropped == 0
    client.close()
    lines = _check_session_file(collector.session_file("stream"), schema_validator)
    assert sorted(line["attrs"]["n"] for line in lines) == list(range(sent))
    assert "drain" in collector.log()


def test_ten_thousand_sessions_under_a_low_file_limit(make_collector: Any) -> None:
    """With ulimit -n 256 the collector still writes 10,000 sessions: open files are an LRU."""
    collector = make_collector(start=False)
    collector.prefix = ["prlimit", "--nofile=256:256", "--"]
    collector.start()
    client = collector.client(max_events=50_000)
    sessions = 10_000
    for n in range(sessions):
        client.log(session_id=f"s{n}", action="a", stage="READ", agent="agy")
        client.log(session_id=f"s{n}", action="a", stage="FINISH", agent="agy")
    assert client.flush(timeout=120)
    assert client.stats().accepted == 2 * sessions
    client.close()
    files = list((collector.root / "sessions").glob("*.events.jsonl"))
    assert len(files) == sessions
    assert all(path.stat().st_size > 0 for path in files[:50])
    metrics = collector.metrics()
    assert 'gzia_write_errors_total{kind="other"} 0.0' in metrics
    open_files = next(line for line in metrics.splitlines() if line.startswith("gzia_open_files "))
    assert float(open_files.split()[1]) <= 256


def test_a_second_collector_on_the_same_socket_refuses_to_start(collector: Any) -> None:
    """Two collectors never share a socket: the second exits 1 with a clear message."""
    second = subprocess.run(
        [sys.executable, "-m", "gz_ia.collector", "--socket", str(collector.socket), "--metrics-address", "off"],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        env=collector.env,
    )
    assert second.returncode == 1
    assert "already running" in second.stderr
    client = collector.client()
    assert _send(client, "still", "a", "READ") == 1
    client.close()


def test_a_stale_socket_left_by_a_crash_is_replaced(collector: Any) -> None:
    """After kill -9 the socket file stays behind; the next collector replaces it and serves."""
    collector.kill()
    assert collector.socket.exists()
    collector.start()
    client = collector.client()
    assert _send(client, "after", "a", "READ") == 1
    client.close()


def test_the_socket_directory_is_private(collector: Any) -> None:
    """The socket's directory is 0700 and the socket 0600."""
    assert collector.socket.parent.stat().st_mode & 0o777 == 0o700
    assert collector.socket.stat().st_mode & 0o777 == 0o600


def test_events_logged_before_the_collector_starts_are_delivered(make_collector: Any) -> None:
    """The client buffers while no collector answers and delivers once one starts."""
    collector = make_collector(start=False)
    client = collector.client()
    for n in range(50):
        client.log(session_id="early", action=f"a{n}", stage="READ", agent="agy")
    assert client.stats().accepted == 0
    collector.start()
    assert client.flush(timeout=30)
    client.close()
    assert len(collector.session_lines("early")) == 50


def test_a_forked_child_logs_as_its_own_producer(collector: Any) -> None:
    """After fork the child gets a fresh sender (own producer id); parent and child both deliver."""
    client = collector.client()
    client.log(session_id="fork", action="parent-before", stage="READ", agent="agy")
    assert client.flush(timeout=10)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            client.log(session_id="fork", action="child", stage="READ", agent="agy")
            ok = client.flush(timeout=10)
        finally:
            os._exit(0 if ok else 1)
    client.log(session_id="fork", action="parent-after", stage="READ", agent="agy")
    assert client.flush(timeout=10)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    client.close()
    lines = collector.session_lines("fork")
    assert sorted(line["action"] for line in lines) == ["child", "parent-after", "parent-before"]
    producers = {line["delivery"].split(":")[0] for line in lines}
    assert len(producers) == 2
