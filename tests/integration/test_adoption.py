"""Adopting dead clients' spools: within the frame limits, around spools that can never be adopted,
and only by the collector the events were meant for."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.conftest import spool_dir

from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.client.spool import SpoolRecord

# Adoption in a sharded collector goes through the front's socket: run against both.
pytestmark = pytest.mark.shards(1, 2)


# The client keeps every event in memory (its bounds are far above them) and spools them all when it
# exits without a collector: nothing depends on how fast its sender thread spills on a busy machine.
AGENT = """
import sys
from gz_ia.client import Client
client = Client()
padding = "x" * int(sys.argv[2])
for n in range(int(sys.argv[1])):
    attrs = {"n": n, "a": padding, "b": padding, "c": padding}
    client.log(session_id=sys.argv[3], action="work", stage="PENDING", agent="agy", attrs=attrs)
"""


def _run_agent(environment: dict[str, str], count: int, session_id: str, padding: int = 10) -> None:
    """An agent that logs ``count`` events while no collector takes them, then exits (spooling them)."""
    environment = {**environment, "GZ_IA_EXIT_TIMEOUT": "0.2"}
    command = [sys.executable, "-c", AGENT, str(count), str(padding), session_id]
    subprocess.run(command, env=environment, check=True, timeout=120)


def test_a_spool_larger_than_a_frame_is_adopted_whole(make_collector: Any) -> None:
    """More than 1 MiB of consecutive spooled events is cut into batches that each fit a frame."""
    collector = make_collector(start=False)
    _run_agent(collector.env, 500, "big", padding=1000)
    segments = list(spool_dir().glob("*.spool"))
    assert sum(path.stat().st_size for path in segments) > 1 << 20
    collector.start()
    lines = collector.session_lines("big")
    assert sorted(line["attrs"]["n"] for line in lines) == list(range(500))
    assert [line["seq"] for line in lines] == list(range(1, 501))
    assert not list(spool_dir().glob("*.spool")) and not list(spool_dir().glob("*.lock"))
    assert collector.metric('gzia_spool_files_total{outcome="adopted"}') == len(segments)
    assert collector.metric("gzia_spool_adopted_events_total") == 500


def _segment(producer: str, root: Path, events: list[tuple[int, LogEvent]], *, socket: str | None) -> bytes:
    """A spool segment as written by a client: version 1 (no socket) when ``socket`` is None."""
    header: dict[str, object] = {"type": "spool", "version": 1, "producer": producer, "root": str(root)}
    if socket is not None:
        header.update(version=2, socket=socket)
    bodies = [msgspec.msgpack.encode(header)]
    for pseq, event in events:
        raw = msgspec.Raw(msgspec.msgpack.encode(event))
        bodies.append(msgspec.msgpack.encode(SpoolRecord(pseq, event.session_id, raw)))
    return b"".join(len(body).to_bytes(4, "big") + body for body in bodies)


def _event(session_id: str, n: int) -> LogEvent:
    return LogEvent(
        timestamp=datetime.now(UTC),
        session_id=session_id,
        action="work",
        stage=Stage.PENDING,
        status=Status.OK,
        agent="agy",
        attrs={"n": n},
    )


def _dead_spool(producer: str, segments: list[bytes]) -> None:
    """Leave a spool as a client that died leaves it: its (free) lock file and its segments."""
    directory = spool_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    (directory / f"{producer}.lock").touch()
    for number, data in enumerate(segments, start=1):
        (directory / f"{producer}.{number:06d}.spool").write_bytes(data)


def test_a_spool_that_cannot_be_adopted_is_quarantined_and_never_blocks_the_next(make_collector: Any) -> None:
    """An unreadable spool, one holding an event too large for any frame and one whose root is gone are
    moved aside, counted and named by gz-ia status; an older client's spool (version 1) is adopted."""
    collector = make_collector(start=False)
    _dead_spool("00000000", [b"\x00\x00\x00\x05garbage, not a spool"])
    oversized = LogEvent(**{**msgspec.structs.asdict(_event("huge", 0)), "error": "E" * (1 << 20)})
    _dead_spool("00000001", [_segment("00000001", collector.root, [(1, oversized)], socket=str(collector.socket))])
    events = [(n + 1, _event("older", n)) for n in range(20)]
    _dead_spool("00000002", [_segment("00000002", collector.root, events, socket=None)])
    gone = collector.base / "removed-workspace" / ".harness"
    _dead_spool("00000003", [_segment("00000003", gone, events, socket=str(collector.socket))])
    collector.start()
    assert [line["attrs"]["n"] for line in collector.session_lines("older")] == list(range(20))
    quarantine = spool_dir() / "quarantine"
    names = ["00000000.000001.spool", "00000001.000001.spool", "00000003.000001.spool"]
    assert sorted(path.name for path in quarantine.glob("*.spool")) == names
    assert not list(spool_dir().glob("*.spool")) and not list(spool_dir().glob("*.lock"))
    assert collector.metric('gzia_spool_files_total{outcome="quarantined"}') == 3
    assert collector.metric('gzia_spool_files_total{outcome="adopted"}') == 1
    report = json.loads(collector.gz_ia("status", "--json", check=True).stdout)
    listed = report["spools"]["quarantined"]
    assert [Path(entry["path"]).name for entry in listed] == names
    assert "unreadable" in listed[0]["reason"] and "over a frame" in listed[1]["reason"]
    assert f"cannot be adopted into {gone}" in listed[2]["reason"]
    text = collector.gz_ia("status", check=True).stdout
    assert str(quarantine / "00000000.000001.spool") in text


def test_a_spool_is_left_to_the_collector_it_was_meant_for(make_collector: Any) -> None:
    """A dead client's spool meant for collector A, which runs, is left alone by collector B (another
    socket, same spool directory); A adopts it."""
    first = make_collector()
    second = make_collector(start=False)
    assert first.proc is not None
    os.kill(first.proc.pid, signal.SIGSTOP)  # running, not answering: the agent has to spool
    try:
        _run_agent(first.env, 30, "meant-for-a")
        assert list(spool_dir().glob("*.spool"))
        second.start()  # its first adoption runs before it is ready
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
    assert list(spool_dir().glob("*.spool")), "collector B left collector A's spool alone"
    assert not first.session_file("meant-for-a").exists()
    assert second.metric("gzia_spool_adopted_events_total") == 0
    first.kill()
    first.start()
    assert sorted(line["attrs"]["n"] for line in first.session_lines("meant-for-a")) == list(range(30))
    assert not list(spool_dir().glob("*.spool"))


def test_a_spool_meant_for_a_socket_nobody_serves_any_more_is_adopted(make_collector: Any) -> None:
    """After a socket change nothing listens where a spool was meant to go: a collector of the user
    that can take its root adopts it."""
    collector = make_collector(start=False)
    moved = {**collector.env, "GZ_IA_SOCKET": str(collector.base / "old.sock")}
    _run_agent(moved, 30, "moved")
    collector.start()
    assert sorted(line["attrs"]["n"] for line in collector.session_lines("moved")) == list(range(30))
    assert not list(spool_dir().glob("*.spool"))


def test_a_spool_of_sessions_of_every_share_is_adopted_whole_each_in_order(make_collector: Any) -> None:
    """A dead client's events of many sessions, interleaved: a sharded collector's front adopts them
    as a routing client, each run of one share's sessions after a Route frame (a batch mixing
    shares would be refused), and every session gets its events once, in order."""
    collector = make_collector(start=False)
    sessions = [f"mixed-{index}" for index in range(8)]
    events = [(n + 1, _event(sessions[n % len(sessions)], n)) for n in range(80)]
    _dead_spool("0000000a", [_segment("0000000a", collector.root, events, socket=str(collector.socket))])
    collector.start()
    written = collector.all_sessions()
    assert sorted(written) == sorted(sessions)
    for index, session in enumerate(sessions):
        assert [line["attrs"]["n"] for line in written[session]] == list(range(index, 80, len(sessions)))
        assert [line["delivery"] for line in written[session]] == [
            f"0000000a:{n + 1}" for n in range(index, 80, len(sessions))
        ]
    assert not list(spool_dir().glob("*.spool")) and not list(spool_dir().glob("*.lock"))
    assert collector.metric("gzia_spool_adopted_events_total") == 80


def test_a_fifo_under_a_spool_segments_name_is_quarantined_not_waited_on(make_collector: Any) -> None:
    """A dead client's "segment" that is a FIFO nobody writes to: adoption moves it aside instead of
    waiting in open() for a writer, and adopts the spool beside it."""
    collector = make_collector(start=False)
    _dead_spool("00000000", [])
    os.mkfifo(spool_dir() / "00000000.000001.spool")
    events = [(n + 1, _event("beside", n)) for n in range(5)]
    _dead_spool("00000001", [_segment("00000001", collector.root, events, socket=str(collector.socket))])
    collector.start()
    assert [line["attrs"]["n"] for line in collector.session_lines("beside")] == list(range(5))
    quarantine = spool_dir() / "quarantine"
    assert [path.name for path in quarantine.glob("*.spool")] == ["00000000.000001.spool"]
    listed = json.loads(collector.gz_ia("status", "--json", check=True).stdout)["spools"]["quarantined"]
    assert "not a regular file" in listed[0]["reason"]
