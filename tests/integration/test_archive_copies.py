"""After any stop, each archive is in exactly one file: start-up settles what a kill left half done.

A kill between writing an archive's ``.gz`` and unlinking its plain copy leaves both; a kill before
compression began leaves a plain archive nothing queues again; a kill while writing leaves a
temporary file. Those instants are too short to hit with a real kill reliably, so the test makes
them by hand from what a real collector wrote (the fixture says so), then starts a real collector.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

from tests.conftest import send_events, wait_for

from gz_ia.client import build_event

ROTATING = {"GZ_IA_ROTATION_MAX_BYTES": "4096", "GZ_IA_ROTATION_COMPRESS": "true"}


def _lines_in_files(sessions: Path) -> list[int]:
    """Every stored line's seq, counting each file of the directory as a shipper would."""
    seqs = []
    for path in sorted(sessions.iterdir()):
        if path.name.endswith(".gz"):
            text = gzip.decompress(path.read_bytes()).decode()
        elif path.name.endswith(".jsonl"):
            text = path.read_text()
        else:
            continue
        seqs += [json.loads(line)["seq"] for line in text.splitlines()]
    return sorted(seqs)


def test_a_kill_mid_compression_leaves_one_copy_of_each_archive_after_start(make_collector: Any) -> None:
    collector = make_collector(env=ROTATING)
    events = [build_event(session_id="arc", action=f"t{index}", stage="READ", agent="a") for index in range(200)]
    send_events(collector, events, per_batch=10)
    collector.stop()
    sessions = collector.root / "sessions"
    packed = sorted(sessions.glob("arc.events.0*.jsonl.gz"))
    assert len(packed) >= 4
    # Hand-made, as a kill at those instants leaves them: both copies of one archive, a plain archive
    # never compressed, a damaged .gz beside its plain copy, and a dead process's temporary file.
    both, lone, damaged = packed[0], packed[1], packed[2]
    both.with_suffix("").write_bytes(gzip.decompress(both.read_bytes()))
    lone.with_suffix("").write_bytes(gzip.decompress(lone.read_bytes()))
    lone.unlink()
    damaged.with_suffix("").write_bytes(gzip.decompress(damaged.read_bytes()))
    damaged.write_bytes(damaged.read_bytes()[:-20])
    shutil.copy(packed[3], sessions / f".{packed[3].name}.999999999.tmp")
    assert len(list(sessions.glob("arc.events.0*.jsonl"))) == 3  # lines a shipper would count twice
    collector.start()
    send_events(collector, [build_event(session_id="other", action="t", stage="READ", agent="a")])
    wait_for(
        lambda: not list(sessions.glob("arc.events.0*.jsonl")) and not list(sessions.glob(".*.tmp")),
        timeout=20,
        message="start-up to settle the archives",
    )
    assert sorted(path.name for path in sessions.glob("arc.events.0*")) == sorted(path.name for path in packed)
    assert [seq for seq in _lines_in_files(sessions) if seq] == sorted([*range(1, 201), 1])  # "other" has seq 1
    shown = collector.gz_ia("session", "logs", "arc", "--json")
    assert shown.returncode == 0, shown.stderr
    assert "settled the archives" in collector.log()


def test_a_kill_loop_with_small_segments_leaves_every_line_in_one_file(make_collector: Any, soak: Any) -> None:
    """SIGKILL the collector again and again while it rotates and compresses small segments; after a
    last start, no archive is left plain or in two copies and every stored line is in one file."""
    import random
    import threading
    import time

    collector = make_collector(env={"GZ_IA_ROTATION_MAX_BYTES": "4096", "GZ_IA_ROTATION_COMPRESS": "true"})
    stop = threading.Event()
    acknowledged: list[int] = []

    def keep_sending() -> None:
        while not stop.is_set():
            events = [build_event(session_id="loop", action="t", stage="READ", agent="a") for _ in range(20)]
            try:
                acknowledged.extend(verdict.seq for verdict in send_events(collector, events, per_batch=20))
            except Exception:  # killed meanwhile: what was acknowledged is checked, the rest is not
                time.sleep(0.05)

    sender = threading.Thread(target=keep_sending)
    sender.start()
    rng = random.Random()
    deadline = time.monotonic() + soak(6.0)
    try:
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.1, 0.4))
            collector.kill()
            collector.start()
    finally:
        stop.set()
        sender.join(60)
    collector.stop()
    collector.start()
    send_events(collector, [build_event(session_id="other", action="t", stage="READ", agent="a")])
    sessions = collector.root / "sessions"
    wait_for(
        lambda: not list(sessions.glob("loop.events.0*.jsonl")) and not list(sessions.glob(".*.tmp")),
        timeout=20,
        message="no plain archive left",
    )
    loop_seqs = sorted(
        json.loads(line)["seq"]
        for path in sessions.glob("loop.events*")
        for line in (
            gzip.decompress(path.read_bytes()).decode() if path.name.endswith(".gz") else path.read_text()
        ).splitlines()
    )
    first = loop_seqs[0]  # retention (50 archives) deletes the oldest
    assert loop_seqs == list(range(first, first + len(loop_seqs))), "a line in two files, or one missing"
    assert acknowledged and {seq for seq in acknowledged if seq >= first} <= set(loop_seqs)
