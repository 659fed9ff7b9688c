"""Fault injection against real processes: the collector and the agents killed, a full disk, torn lines.

The promise under test: an event the client accepted is written exactly once, even if the
collector is killed; every line stays schema-valid, ``seq`` is gap-free per session and no line is
torn. The long versions are marked ``slow``; their durations and iteration counts scale with
``GZ_IA_SOAK_SECONDS`` (the ``soak`` fixture), so CI runs a bounded version of each.

Each test prints its figures (events sent, acknowledged, on disk, duplicates, lost, crashes survived,
peak collector memory) and writes them to ``figures.json`` in its temporary directory; with
``GZ_IA_WRITE_FIGURES=1`` they are also merged into ``docs/reliability-figures.json``.
"""

from __future__ import annotations

import collections
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration.fault_harness import (
    REPO,
    SOURCE_PATH,
    AgentFleet,
    Audit,
    evidence_kept,
    fill_disk,
    metric_value,
    read_acks,
    record_figures,
    tmpfs,
    vm_kib,
    wait_until,
)

# The write and delivery path: run against one process and against a sharded collector.
pytestmark = pytest.mark.shards(1, 2)

AGENT = REPO / "tests" / "fixtures" / "agents" / "fault_agent.py"


@pytest.fixture(autouse=True)
def _private_spool(monkeypatch: pytest.MonkeyPatch, short_tmp: Path) -> None:
    """Clients and collectors of this test spool into the test's own directory, never ~/.local/state."""
    monkeypatch.setenv("GZ_IA_SPOOL_DIR", str(short_tmp / "spool"))


# --- agents ---------------------------------------------------------------------------------------


class Fleet(AgentFleet):
    """Agent processes (tests/fixtures/agents/fault_agent.py) against one socket and root."""

    def __init__(self, out: Path, socket_path: Path, root: Path, env: dict[str, str]) -> None:
        super().__init__(out, env)
        self.socket_path = socket_path
        self.root = root

    def spawn(self, name: str, *, shared: list[str], own: bool = True, threads: int = 3, pace: float = 0.02) -> None:
        command = [
            sys.executable,
            str(AGENT),
            *("--name", name, "--out", str(self.out), "--socket", str(self.socket_path), "--root", str(self.root)),
            *("--shared", ",".join(shared), "--threads", str(threads), "--pace", str(pace)),
            *("--stop-file", str(self.stop_file), "--flush-timeout", "90"),
        ]
        if own:
            command += ["--own", f"own-{name}"]
        self.launch(name, command)

    def stats(self, name: str) -> dict[str, Any]:
        return dict(self.snapshot(name).get("stats", {}))


def delivery_figures(summaries: dict[str, dict[str, Any]], audit: Audit) -> dict[str, Any]:
    """Count sent, acknowledged, on disk, duplicates and lost for agents that lived to the end."""
    emitted = [event["eid"] for summary in summaries.values() for event in summary["emitted"]]
    lost = [eid for eid in emitted if eid not in audit.occurrences]
    return {
        "events_sent": len(emitted),
        "events_acknowledged": sum(int(s["stats"]["accepted"]) for s in summaries.values()),
        "events_with_verdict_seen": sum(len(s["acked"]) for s in summaries.values()),
        "events_on_disk": sum(len(audit.occurrences.get(eid, [])) for eid in emitted),
        "duplicates": sum(len(where) - 1 for where in audit.duplicates.values()),
        "lost": len(lost),
        "lost_examples": lost[:5],
        "client_dropped": sum(int(s["stats"]["dropped"]) for s in summaries.values()),
        "client_rejected": sum(int(s["stats"]["rejected"]) for s in summaries.values()),
        "client_reconnects": sum(int(s["stats"]["reconnects"]) for s in summaries.values()),
        "agents_not_flushed": sorted(name for name, s in summaries.items() if not s["flushed"]),
        "rejections_seen": collections.Counter(r for s in summaries.values() for r in s["rejected"].values()),
        "lines_on_disk": audit.lines,
        "torn_files": audit.torn_files,
        "drop_records": len(audit.drop_records),
    }


def assert_every_emitted_event_once(summaries: dict[str, dict[str, Any]], audit: Audit) -> None:
    """Every event of every surviving agent is on disk exactly once; none was refused or dropped."""
    for name, summary in summaries.items():
        assert summary["flushed"], f"agent {name} could not flush: {summary['stats']}"
        stats = summary["stats"]
        assert stats["dropped"] == 0, f"agent {name} dropped events: {stats}"
        assert stats["rejected"] == 0, f"agent {name} had events rejected: {summary['rejected']}"
        assert (stats["unacknowledged"], stats["queued"]) == (0, 0), f"agent {name}: {stats}"
        emitted = [event["eid"] for event in summary["emitted"]]
        assert stats["accepted"] == len(emitted), f"agent {name}: accepted {stats['accepted']} of {len(emitted)}"
        missing = [eid for eid in emitted if len(audit.occurrences.get(eid, [])) == 0]
        assert not missing, f"agent {name}: {len(missing)} accepted events not on disk, e.g. {missing[:5]}"
        sessions = {event["eid"]: event["session"] for event in summary["emitted"]}
        wrong = [eid for eid in emitted if audit.occurrences[eid][0][0] != sessions[eid]]
        assert not wrong, f"agent {name}: events in the wrong session: {wrong[:5]}"


def start_fleet(fleet: Fleet, agents: int, *, threads: int = 3, pace: float = 0.04) -> None:
    shared = ["shared-0", "shared-1"]
    for index in range(agents):
        fleet.spawn(f"a{index}", shared=shared, threads=threads, pace=pace)


# --- 1. the collector killed with SIGKILL -----------------------------------------------------------


@pytest.mark.slow
def test_collector_kill9_loses_and_duplicates_nothing(
    make_collector: Any, schema_validator: Any, soak: Any, tmp_path: Path
) -> None:
    """SIGKILL the collector repeatedly under load: every accepted event lands exactly once, lines intact."""
    duration = soak(60.0)
    kills = max(5, math.ceil(20 * duration / 60.0))
    collector = make_collector()
    fleet = Fleet(tmp_path / "agents", collector.socket, collector.root, collector.env)
    rng = random.Random()
    peak_kib = 0
    started = time.monotonic()
    try:
        start_fleet(fleet, agents=3)
        wait_until(lambda: fleet.acked_total() > 0, 30, "the first acknowledged events")
        for _ in range(kills):
            time.sleep(rng.uniform(0.25, max(0.5, 2 * duration / kills - 1.5)))
            assert collector.proc is not None
            peak_kib = max(peak_kib, vm_kib(collector.proc.pid))
            collector.kill()
            collector.start()
        summaries = fleet.finish()
        assert collector.proc is not None
        peak_kib = max(peak_kib, vm_kib(collector.proc.pid))
        collector.stop()
    finally:
        fleet.close()
    audit = Audit(collector.root, schema_validator)
    figures = delivery_figures(summaries, audit)
    figures.update(
        crashes_survived=kills,
        seconds=round(time.monotonic() - started, 1),
        peak_collector_rss_mib=round(peak_kib / 1024, 1),
        agents=len(summaries),
        threads_per_agent=3,
    )
    record_figures(tmp_path, "collector_kill9", figures)
    audit.assert_clean()
    assert_every_emitted_event_once(summaries, audit)


# --- 2. agents killed with SIGKILL ------------------------------------------------------------------


@pytest.mark.slow
def test_client_kill9_acknowledged_events_land_once(
    make_collector: Any, schema_validator: Any, soak: Any, tmp_path: Path
) -> None:
    """SIGKILL agents at random: what they had acknowledged is on disk once, nothing is duplicated."""
    duration = soak(60.0)
    kills = max(5, math.ceil(20 * duration / 60.0))
    collector = make_collector()
    fleet = Fleet(tmp_path / "agents", collector.socket, collector.root, collector.env)
    rng = random.Random()
    shared = ["shared-0", "shared-1"]
    started = time.monotonic()
    spawned = 0
    try:
        for _ in range(4):
            fleet.spawn(f"a{spawned}", shared=shared, pace=0.04)
            spawned += 1
        wait_until(lambda: fleet.acked_total() > 0, 30, "the first acknowledged events")
        for _ in range(kills):
            time.sleep(rng.uniform(0.1, max(0.3, 2 * duration / kills - 0.3)))
            victim = rng.choice(fleet.alive())
            fleet.kill(victim)
            fleet.spawn(f"a{spawned}", shared=shared, pace=0.04)
            spawned += 1
        assert collector.proc is not None
        assert collector.proc.poll() is None, f"the collector died:\n{collector.log()}"
        peak_kib = vm_kib(collector.proc.pid)
        summaries = fleet.finish()
        collector.stop()
    finally:
        fleet.close()
    audit = Audit(collector.root, schema_validator)
    acked_by_killed = {name: read_acks(fleet.out / f"{name}.acks") for name in fleet.killed}
    acked_eids = [eid for acks in acked_by_killed.values() for eid in acks]
    lost_acked = [eid for eid in acked_eids if eid not in audit.occurrences]
    on_disk_from_killed = sum(1 for eid in audit.occurrences if eid.split(".", 1)[0] in set(fleet.killed))
    figures = delivery_figures(summaries, audit)
    figures.update(
        clients_killed=len(fleet.killed),
        acknowledged_by_killed_clients=len(acked_eids),
        lost_acknowledged_by_killed_clients=len(lost_acked),
        on_disk_from_killed_clients=on_disk_from_killed,
        seconds=round(time.monotonic() - started, 1),
        peak_collector_rss_mib=round(peak_kib / 1024, 1),
    )
    record_figures(tmp_path, "client_kill9", figures)
    audit.assert_clean()
    assert not lost_acked, f"{len(lost_acked)} events acknowledged to killed agents are not on disk: {lost_acked[:5]}"
    assert_every_emitted_event_once(summaries, audit)


# --- 3. restarts through socket activation ----------------------------------------------------------


class ActivatedCollector:
    """``systemd-socket-activate`` holding the socket and exec'ing the collector on first connection."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.socket = base / "run" / "collector.sock"
        self.socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root = base / "ws" / ".harness"
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_path = base / "activator.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": SOURCE_PATH,
            "XDG_CONFIG_HOME": str(self.base / "config"),
        }
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [
                    "systemd-socket-activate",
                    "-l",
                    str(self.socket),
                    "--fdname=events",
                    "-E",
                    "PYTHONPATH",
                    "-E",
                    "XDG_CONFIG_HOME",
                    sys.executable,
                    "-m",
                    "gz_ia.collector",
                    "--metrics-address",
                    "off",
                ],
                stdout=log,
                stderr=log,
                env=env,
            )
        wait_until(lambda: "Listening on" in self._since_start(), 20, "the activator to listen")

    def _since_start(self) -> str:
        text = self.log_path.read_text(errors="replace")
        return text[text.rfind(f"--- start {self.starts}\n") :]

    def wait_serving(self) -> None:
        wait_until(lambda: "ready" in self._since_start() or self._dead(), 30, "the activated collector")
        assert not self._dead(), f"the activated collector exited:\n{self.log_path.read_text()[-3000:]}"

    def _dead(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.slow
def test_socket_activated_restarts_lose_and_duplicate_nothing(
    short_tmp: Path, schema_validator: Any, soak: Any, tmp_path: Path
) -> None:
    """Collector killed and re-activated by systemd-socket-activate under load: every event lands once."""
    duration = soak(45.0)
    restarts = max(4, math.ceil(15 * duration / 45.0))
    activated = ActivatedCollector(short_tmp)
    env = dict(os.environ)
    env.pop("GZ_IA_PARENT_SESSION_ID", None)
    fleet = Fleet(tmp_path / "agents", activated.socket, activated.root, env)
    rng = random.Random()
    peak_kib = 0
    started = time.monotonic()
    try:
        activated.start()
        start_fleet(fleet, agents=3)
        activated.wait_serving()
        wait_until(lambda: fleet.acked_total() > 0, 30, "the first acknowledged events")
        for _ in range(restarts):
            time.sleep(rng.uniform(0.25, max(0.5, 2 * duration / restarts - 1.5)))
            assert activated.proc is not None
            peak_kib = max(peak_kib, vm_kib(activated.proc.pid))
            activated.kill()
            activated.start()
            activated.wait_serving()  # the agents' reconnection is what starts it
        summaries = fleet.finish()
        assert activated.proc is not None
        peak_kib = max(peak_kib, vm_kib(activated.proc.pid))
    finally:
        fleet.close()
        activated.close()
    audit = Audit(activated.root, schema_validator)
    figures = delivery_figures(summaries, audit)
    figures.update(
        activations=activated.starts,
        crashes_survived=restarts,
        seconds=round(time.monotonic() - started, 1),
        peak_collector_rss_mib=round(peak_kib / 1024, 1),
    )
    record_figures(tmp_path, "socket_activation_restarts", figures)
    audit.assert_clean()
    assert_every_emitted_event_once(summaries, audit)


# --- 4. a full disk ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_full_disk_holds_events_until_space_returns(
    make_collector: Any, schema_validator: Any, soak: Any, tmp_path: Path
) -> None:
    """On ENOSPC the collector stays up and counts it, clients keep events; once freed all land once."""
    full_for = max(3.0, soak(20.0) / 3)
    collector = make_collector(start=False)
    fleet = Fleet(tmp_path / "agents", collector.socket, collector.root, collector.env)
    filler = collector.workspace / "filler"
    figures: dict[str, Any] = {}
    with tmpfs(collector.workspace, 2):
        try:
            collector.root.mkdir()
            collector.start()
            pid = collector.proc.pid if collector.proc else 0
            start_fleet(fleet, agents=2, threads=2, pace=0.03)
            wait_until(lambda: fleet.acked_total() > 50, 30, "events written before the disk fills")

            figures["filler_bytes"] = fill_disk(filler)
            wait_until(
                lambda: metric_value(collector.metrics(), "gzia_write_errors_total", {"kind": "ENOSPC"}) > 0,
                20,
                'gzia_write_errors_total{kind="ENOSPC"} to increase',
                detail=lambda: f"collector log (tail):\n{collector.log()[-2500:]}",
            )
            held: list[int] = []
            deadline = time.monotonic() + full_for
            while time.monotonic() < deadline:
                assert collector.proc is not None
                assert collector.proc.poll() is None, f"collector died:\n{collector.log()}"
                held.append(
                    sum(
                        int(fleet.stats(n).get("unacknowledged", 0)) + int(fleet.stats(n).get("queued", 0))
                        for n in fleet.procs
                    )
                )
                time.sleep(0.2)
            enospc = metric_value(collector.metrics(), "gzia_write_errors_total", {"kind": "ENOSPC"})
            figures["events_held_by_clients_peak"] = max(held)
            assert max(held) > 0, "the clients never held unacknowledged events while the disk was full"

            filler.unlink()
            summaries = fleet.finish()
            assert collector.proc is not None
            assert (collector.proc.pid, collector.proc.poll()) == (pid, None), "the collector restarted or died"
            peak_kib = vm_kib(pid)
            collector.stop()
            audit = Audit(collector.root, schema_validator)
            figures.update(delivery_figures(summaries, audit))
            figures.update(enospc_errors=enospc, peak_collector_rss_mib=round(peak_kib / 1024, 1))
            figures.update(full_seconds=full_for)
            record_figures(tmp_path, "disk_full", figures)
            with evidence_kept(collector.root, collector.log, tmp_path):
                audit.assert_clean()
                assert_every_emitted_event_once(summaries, audit)
        finally:
            fleet.close()
            collector.close()


# --- 8. a torn last line ----------------------------------------------------------------------------


def _torn_session(collector: Any) -> tuple[str, bytes, int]:
    """Write three good events to a session, stop the collector and append half a line."""
    from gz_ia.client import build_event

    client = collector.client()
    session_id = "torn-1"
    for stage in ("READ", "PENDING", "FINISH"):
        client.send(build_event(session_id=session_id, action="task", stage=stage, agent="t"), timeout=10)
    client.close()
    collector.stop()
    fragment = b'{"timestamp":"2025-01-01T00:00:00Z","session_id":"torn-1","act'
    with collector.session_file(session_id).open("ab") as file:
        file.write(fragment)
    return session_id, fragment, 3


def test_torn_tail_repaired_at_start(collector: Any) -> None:
    """A torn last line left by a crash is moved to <id>.events.torn at start, counted, never read."""
    from gz_ia.client import build_event

    session_id, fragment, good = _torn_session(collector)
    collector.start()
    # The torn session itself gets no event: the repair is due at start (at the latest once the
    # root is in use again, here through another session), not only when that session is written.
    client = collector.client()
    client.send(build_event(session_id="other-1", action="a", stage="READ", agent="t"), timeout=10)
    client.close()
    torn_path = collector.root / "sessions" / f"{session_id}.events.torn"
    wait_until(
        torn_path.exists,
        10,
        f"{torn_path.name} to appear after the start",
        detail=lambda: collector.log() + repr(collector.session_file(session_id).read_bytes()[-120:]),
    )
    assert fragment in torn_path.read_bytes()
    data = collector.session_file(session_id).read_bytes()
    assert data.endswith(b"\n")
    assert fragment not in data
    assert metric_value(collector.metrics(), "gzia_torn_lines_repaired_total") == 1
    shown = collector.gz_ia("session", "logs", session_id, "--json", check=True).stdout.splitlines()
    assert [json.loads(line)["seq"] for line in shown] == list(range(1, good + 1))


def test_torn_tail_never_glued_to_next_event(collector: Any, schema_validator: Any) -> None:
    """After a torn tail, the next event starts its own line with the next seq; readers never see the fragment."""
    from gz_ia.client import build_event

    session_id, fragment, good = _torn_session(collector)
    collector.start()
    client = collector.client()
    verdict = client.send(build_event(session_id=session_id, action="again", stage="READ", agent="t"), timeout=10)
    client.close()
    assert verdict.seq == good + 1
    lines = collector.session_file(session_id).read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert all(fragment not in line for line in lines)
    parsed = [json.loads(line) for line in lines[:-1]]
    assert [line["seq"] for line in parsed] == list(range(1, good + 2))
    for line in parsed:
        schema_validator.validate(line)
    torn_path = collector.root / "sessions" / f"{session_id}.events.torn"
    assert fragment in torn_path.read_bytes()
    assert metric_value(collector.metrics(), "gzia_torn_lines_repaired_total") == 1
    shown = collector.gz_ia("session", "logs", session_id, "--json", check=True).stdout.splitlines()
    assert [json.loads(line)["seq"] for line in shown] == list(range(1, good + 2))
