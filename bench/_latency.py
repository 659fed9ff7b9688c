"""Latency: the acknowledged round trip, and how soon ``gz-ia logs -f`` prints a written event.

Round trip: ``Client.send`` (which waits for the collector's verdict, sent after the write) at a
steady moderate rate, in a fresh process (``python -m bench._latency rtt ...``); and the same exchange
over the wire protocol by hand in one thread (``raw-rtt``), which separates the collector's share from
the client's thread hand-overs.

Follow: the follow command runs on a pseudo-terminal, as a person would watch it, and prints the
timeline; each probe event carries a numbered action that we look for in its output. The latency of a
probe is measured from the moment ``Client.send`` was called to the moment the follow command printed
it: an upper bound of "from the collector's write", larger by the time the frame takes to reach the
collector (a fraction of a millisecond, see the round trip). The command tried is ``gz-ia logs -f``;
while that does not exist yet, ``gz-ia session logs <id> --follow``; without either, the figure is a
reported gap.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec

from ._load import make_event

_CLI: Final = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()"]
_PROBE: Final = re.compile(rb"follow probe (\d{6})")


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _summary(samples: list[float], events: int, rate: float) -> dict[str, float]:
    """p50, p99 and max of round-trip ``samples`` (seconds), in milliseconds."""
    return {
        "events": events,
        "rate": rate,
        "p50_ms": _percentile(samples, 0.50) * 1e3,
        "p99_ms": _percentile(samples, 0.99) * 1e3,
        "max_ms": max(samples) * 1e3,
    }


def round_trip(socket_path: str, root: str, events: int, rate: float) -> dict[str, float]:
    """Send ``events`` events with ``Client.send`` at ``rate`` per second; return p50/p99/max in ms."""
    from gz_ia.client import Client

    client = Client(socket_path=socket_path, root=root)
    base = datetime.now(UTC)
    for k in range(200):  # warm-up: connection, first file open, code paths
        client.send(make_event(f"rtt-warmup-{os.getpid()}", k, base=base))
    samples: list[float] = []
    start = time.perf_counter()
    for k in range(events):
        event = make_event(f"rtt-{os.getpid()}", k, base=base)
        delay = start + k / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sent = time.perf_counter()
        client.send(event)
        samples.append(time.perf_counter() - sent)
    client.close()
    return _summary(samples, events, rate)


def raw_round_trip(socket_path: str, root: str, events: int, rate: float) -> dict[str, float]:
    """The same round trip over the wire protocol by hand: one thread, one Batch frame per event.

    Without the thin client's sender thread this is the collector's own share of the round trip
    (read, validate, write, answer) plus one socket hop each way.
    """
    import socket

    from gz_ia.client.protocol import Batch, FrameReader, encode_frame

    from ._load import hello_frame

    encoder = msgspec.msgpack.Encoder()
    reader = FrameReader()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(socket_path)

        def exchange(frame: bytes) -> None:
            sock.sendall(frame)
            while not reader.feed(sock.recv(1 << 16)):
                pass

        exchange(hello_frame(root))
        base = datetime.now(UTC)
        samples: list[float] = []
        start = time.perf_counter()
        for k in range(-200, events):  # 200 warm-up events first
            event = make_event(f"raw-rtt-{os.getpid()}", k + 200, base=base)
            frame = encode_frame(Batch(first=k + 201, events=[msgspec.Raw(encoder.encode(event))], verdicts=True))
            delay = start + k / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent = time.perf_counter()
            exchange(frame)
            if k >= 0:
                samples.append(time.perf_counter() - sent)
    return _summary(samples, events, rate)


def follow_command(env: dict[str, str], session: str) -> list[str] | None:
    """Return the follow command this work tree has, or None when it has none yet."""
    for argv, extra in ((["logs", "--help"], ["logs", "-f"]), (["session", "logs", "--help"], None)):
        result = subprocess.run([*_CLI, *argv], env=env, capture_output=True, text=True, check=False, timeout=60)
        if result.returncode != 0 or "--follow" not in result.stdout:
            continue
        if extra is not None:
            return [*_CLI, *extra] + ([session] if "SESSION" in result.stdout.split("\n\n")[0] else [])
        return [*_CLI, "session", "logs", session, "--follow"]
    return None


def follow_latency(socket_path: Path, root: Path, events: int, rate: float) -> dict[str, float | str]:
    """Measure the follow latency of ``events`` probes sent at ``rate`` per second."""
    from gz_ia.client import Client, LogEvent, Stage, Status

    env = {**os.environ, "GZ_IA_SOCKET": str(socket_path), "GZ_IA_ROOT": str(root), "NO_COLOR": "1"}
    session = f"follow-probe-{os.getpid()}"
    client = Client(socket_path=socket_path, root=root)

    def probe(number: int) -> LogEvent:
        return LogEvent(
            timestamp=datetime.now(UTC),
            session_id=session,
            action=f"follow probe {number:06d}",
            stage=Stage.READ,
            status=Status.OK,
            agent="bench",
        )

    client.send(probe(999_999))  # the session exists before anyone follows it
    argv = follow_command(env, session)
    if argv is None:
        client.close()
        return {"gap": "neither `gz-ia logs -f` nor `gz-ia session logs --follow` exists in this tree"}
    seen: dict[int, float] = {}
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    output = bytearray()

    def read() -> None:
        tail = b""
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            now = time.monotonic()
            output.extend(data[:4096] if len(output) < 65536 else b"")
            chunk = tail + data
            for match in _PROBE.finditer(chunk):
                seen.setdefault(int(match.group(1)), now)
            tail = chunk[-64:]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # Wait until the follower prints live events (its start-up is not what we measure).
        warm = 900_000
        deadline = time.monotonic() + 30
        while not any(n >= 900_000 for n in seen if n != 999_999) and time.monotonic() < deadline:
            client.send(probe(warm))
            warm += 1
            time.sleep(0.1)
        if not any(900_000 <= n < 999_999 for n in seen):
            return {"gap": f"`{' '.join(argv[3:])}` printed no live event within 30 s: {bytes(output[-500:])!r}"}
        sent: dict[int, float] = {}
        start = time.monotonic()
        for number in range(events):
            delay = start + number / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            event = probe(number)
            sent[number] = time.monotonic()
            client.send(event)
        deadline = time.monotonic() + 5
        while len([n for n in sent if n in seen]) < events and time.monotonic() < deadline:
            time.sleep(0.05)
        latencies = [seen[n] - sent[n] for n in sent if n in seen]
        missing = events - len(latencies)
        if not latencies:
            return {"gap": "the follow command printed none of the probes"}
        return {
            "command": " ".join(argv[3:]),
            "events": events,
            "rate": rate,
            "missing": missing,
            "p50_ms": _percentile(latencies, 0.50) * 1e3,
            "p99_ms": _percentile(latencies, 0.99) * 1e3,
            "max_ms": max(latencies) * 1e3,
        }
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):
            os.close(master)


def main(argv: list[str]) -> None:
    """``rtt|raw-rtt SOCKET ROOT EVENTS RATE OUTFILE``: measure the round trip in this fresh process."""
    kind, socket_path, root, events, rate, out = argv[:6]
    measure = raw_round_trip if kind == "raw-rtt" else round_trip
    Path(out).write_text(json.dumps(measure(socket_path, root, int(events), float(rate))))


if __name__ == "__main__":
    main(sys.argv[1:])
