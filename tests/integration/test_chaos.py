"""The randomized end-to-end test: every fault at once, and an exact account of every event at the end.

Agent processes (tests/fixtures/agents/chaos_agent.py: some on threads, some on asyncio tasks) log
through the public scopes into private and shared sessions, with same-name actions open at once (one
failing), oversized fields, NaN, infinities and ints past 64 bits, an event no frame can carry
and invalid ids; one of them inherits an invalid ``GZ_IA_PARENT_SESSION_ID``. Meanwhile, at moments
drawn from the seed: the collector is SIGKILLed and restarted, agents are SIGKILLed (and replaced),
a second collector is started on the same root, ``gz-ia gc`` removes idle sessions, the disk (a
tmpfs) fills up and frees up, and session files rotate every 64 KiB.

At the end every event (``attrs.eid``) each agent handed to the client is either on disk exactly
once, or a loud loss: a ``rejects*.jsonl`` record, a refusal counted by its client and reported by a
``gz-ia.dropped`` notice in its session, or a drop counted likewise. The only other class is what an
agent SIGKILLed still held unacknowledged in memory, bounded by what it had submitted less what it
had been told was written. Every line is schema-valid and ``seq`` gap-free per session.

The seed is printed (``GZ_IA_CHAOS_SEED=<n>`` replays it); the duration is bounded by
``GZ_IA_SOAK_SECONDS`` (the ``soak`` fixture). The figures go to ``figures.json`` in the test's
temporary directory (and into ``docs/reliability-figures.json`` with ``GZ_IA_WRITE_FIGURES=1``).
"""

from __future__ import annotations

import collections
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CollectorProcess
from tests.fixtures.agents.agent_records import read_records
from tests.integration.fault_harness import (
    REPO,
    AgentFleet,
    Audit,
    evidence_kept,
    fill_disk,
    metric_value,
    read_acks,
    read_rejects,
    record_figures,
    tmpfs,
    vm_kib,
    wait_until,
)

AGENT = REPO / "tests" / "fixtures" / "agents" / "chaos_agent.py"
SHARED = ["shared-0", "shared-1"]
IDLE = ["idle-0", "idle-1", "idle-2"]
"""Sessions written once before the agents start and aged two days: what ``gz-ia gc`` removes."""
FRAME_TOO_LARGE = "frame_too_large"
NOTICE_LOSSES = {
    FRAME_TOO_LARGE: "refused by its client (frame_too_large), counted in a gz-ia.dropped notice",
    "dropped": "dropped by its client (buffer and spool full), counted in a gz-ia.dropped notice",
}
PACE = 0.05
"""Seconds between an agent worker's steps, on average: a few hundred events a second in all."""
CONFIG = """\
[rotation]
max_bytes = 65536

[retention]
max_archives = 0
"""


@pytest.fixture(autouse=True)
def _private_spool(monkeypatch: pytest.MonkeyPatch, short_tmp: Path) -> None:
    """Clients and collectors of this test spool into the test's own directory, never ~/.local/state."""
    monkeypatch.setenv("GZ_IA_SPOOL_DIR", str(short_tmp / "spool"))


def chaos_seed() -> int:
    """The seed of this run: ``GZ_IA_CHAOS_SEED`` to replay one, else a fresh one."""
    given = os.environ.get("GZ_IA_CHAOS_SEED")
    return int(given) if given else random.SystemRandom().randrange(1 << 32)


@dataclass
class AgentRecords:
    """What one agent left behind: every event it handed over, and what it was told about them."""

    name: str
    killed: bool
    emitted: list[list[str]]
    acks: dict[str, int]
    refused: dict[str, str]
    stats: dict[str, Any]
    producer: str
    emitted_at_snapshot: int
    """How many events it had handed over when ``stats`` was taken."""
    summary: dict[str, Any] | None


class ChaosFleet(AgentFleet):
    """The agent processes (tests/fixtures/agents/chaos_agent.py), against one collector's socket and root."""

    def __init__(self, out: Path, collector: CollectorProcess, seed: int) -> None:
        super().__init__(out, collector.env)
        self.collector = collector
        self.seed = seed
        self.modes: dict[str, str] = {}
        self.protected: set[str] = set()

    def spawn(self, mode: str, *, bad_parent: bool = False) -> str:
        name = f"{mode[0]}{len(self.procs)}"
        environment = dict(self.env)
        if bad_parent:
            environment["GZ_IA_PARENT_SESSION_ID"] = "bad/id"
            self.protected.add(name)
        command = [
            sys.executable,
            str(AGENT),
            *("--name", name, "--out", str(self.out), "--mode", mode, "--seed", str(self.seed)),
            *("--socket", str(self.collector.socket), "--root", str(self.collector.root)),
            *("--shared", ",".join(SHARED), "--own", f"own-{name}", "--stop-file", str(self.stop_file)),
            *("--pace", str(PACE)),
        ]
        self.launch(name, command, environment)
        self.modes[name] = mode
        return name

    def held(self) -> int:
        """Events the live agents hold without a verdict (queued or sent)."""
        total = 0
        for name in self.alive():
            stats = self.snapshot(name).get("stats", {})
            total += int(stats.get("queued", 0)) + int(stats.get("unacknowledged", 0))
        return total

    def records(self, name: str) -> AgentRecords:
        summary_path = self.out / f"{name}.summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
        last = self.snapshot(name)
        return AgentRecords(
            name=name,
            killed=name in self.killed,
            emitted=read_records(self.out / f"{name}.emitted"),
            acks=read_acks(self.out / f"{name}.acks"),
            refused={fields[0]: fields[1] for fields in read_records(self.out / f"{name}.refused")},
            stats=dict(summary["stats"] if summary else last.get("stats", {})),
            producer=str(summary["producer"] if summary else last.get("producer", "")),
            emitted_at_snapshot=int(last.get("emitted", 0)),
            summary=summary,
        )


@dataclass
class Account:
    """Where every event of every agent went, and what does not add up."""

    emitted: int = 0
    acknowledged: int = 0
    on_disk: int = 0
    losses: collections.Counter[str] = field(default_factory=collections.Counter)
    unacknowledged_with_killed_agents: int = 0
    held_by_killed_agents_bound: int = 0
    pairs_checked: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)
    """The first examples of each kind of problem, by kind."""
    problem_counts: collections.Counter[str] = field(default_factory=collections.Counter)

    def problem(self, kind: str, example: str) -> None:
        self.problem_counts[kind] += 1
        examples = self.problems.setdefault(kind, [])
        if len(examples) < 5:
            examples.append(example)

    def report(self) -> str:
        return "\n".join(
            f"{count} x {kind}, e.g.:\n    " + "\n    ".join(self.problems[kind])
            for kind, count in self.problem_counts.most_common()
        )


def loss_notices(audit: Audit) -> dict[tuple[str, str, str], int]:
    """The losses reported by ``gz-ia.dropped`` notices: count by (producer, session, reason)."""
    counts: dict[tuple[str, str, str], int] = collections.Counter()
    for line in audit.drop_records:
        if line.get("stage") != "FINISH":
            continue
        producer = str(line.get("delivery", "")).partition(":")[0]
        attrs = line.get("attrs") or {}
        counts[producer, line["session_id"], str(attrs.get("reason", "dropped"))] += int(attrs.get("dropped", 0))
    return counts


def account_for(agents: list[AgentRecords], audit: Audit, rejects: list[dict[str, Any]]) -> Account:
    """Put every event each agent handed over into exactly one class, or name what does not fit."""
    account = Account()
    rejected = {
        str(((record.get("event") or {}).get("attrs") or {}).get("eid")): str(record["reason"])
        for record in rejects
        if ((record.get("event") or {}).get("attrs") or {}).get("eid") is not None
    }
    notices = loss_notices(audit)
    for agent in agents:
        account.emitted += len(agent.emitted)
        account.acknowledged += len(agent.acks)
        unexplained: collections.Counter[str] = collections.Counter()
        refused_by_client: collections.Counter[str] = collections.Counter()
        rejected_by_collector = 0
        for eid, session_id, _stage, _kind in agent.emitted:
            where = audit.occurrences.get(eid, [])
            if len(where) > 1:
                account.problem("an event written more than once", f"{eid}: {where}")
            if where:
                account.on_disk += 1
                if where[0][0] != session_id:
                    account.problem(
                        "an event in the wrong session", f"{eid} in {where[0][0]}, logged into {session_id}"
                    )
                if eid in rejected:
                    account.problem("an event on disk and in rejects.jsonl", f"{eid}: {rejected[eid]}")
                continue
            if eid in agent.acks:
                account.problem("an acknowledged event not on disk", f"{eid}: seq {agent.acks[eid]}")
            if eid in rejected:
                account.losses[f"rejected by the collector, in rejects.jsonl: {rejected[eid]}"] += 1
                rejected_by_collector += 1
            elif agent.refused.get(eid) == FRAME_TOO_LARGE:
                refused_by_client[session_id] += 1
            elif eid in agent.refused:
                # Refused by the collector while its rejects file could not be written (a full disk).
                account.losses[f"rejected by the collector, counted by the client: {agent.refused[eid]}"] += 1
                rejected_by_collector += 1
            else:
                unexplained[session_id] += 1
        sessions = set(unexplained) | set(refused_by_client)
        reported = {
            session_id: {
                reason: notices.get((agent.producer, session_id, reason), 0) for reason in (FRAME_TOO_LARGE, "dropped")
            }
            for session_id in sessions | {s for p, s, _ in notices if p == agent.producer}
        }
        if agent.killed:
            # What it still held in memory died with it: only unacknowledged events can be among them.
            lost = sum(unexplained.values()) + sum(refused_by_client.values())
            reported_total = sum(sum(by_reason.values()) for by_reason in reported.values())
            remaining = lost
            for by_reason in reported.values():
                for reason, count in by_reason.items():
                    taken = min(remaining, count)
                    if taken:
                        account.losses[NOTICE_LOSSES[reason]] += taken
                    remaining -= taken
            account.unacknowledged_with_killed_agents += max(0, lost - reported_total)
            # Bounded by what it held at its last snapshot (queued or sent, no verdict yet), what
            # it handed over since, and what it had refused or dropped itself (its counters) with
            # no notice on disk yet: anything else missing had been acknowledged.
            stats = agent.stats
            held = int(stats.get("queued", 0)) + int(stats.get("unacknowledged", 0))
            unreported = int(stats.get("rejected", 0)) + int(stats.get("dropped", 0)) - reported_total
            bound = held + max(0, len(agent.emitted) - agent.emitted_at_snapshot) + max(0, unreported)
            account.held_by_killed_agents_bound += bound
            if lost - reported_total > bound:
                account.problem(
                    "a killed agent lost more than it held unacknowledged",
                    f"{agent.name}: {lost - reported_total} lost, {bound} held",
                )
            continue
        for session_id, by_reason in reported.items():
            missing = unexplained[session_id] + refused_by_client[session_id]
            if missing != sum(by_reason.values()):
                account.problem(
                    "events missing without their gz-ia.dropped notice (or a notice without them)",
                    f"agent {agent.name}, session {session_id}: {missing} events missing "
                    f"({refused_by_client[session_id]} refused by the client), notices report {by_reason}",
                )
            else:
                for reason, count in by_reason.items():
                    if count:
                        account.losses[NOTICE_LOSSES[reason]] += count
        refused_reported = sum(by_reason[FRAME_TOO_LARGE] for by_reason in reported.values())
        if int(agent.stats.get("rejected", 0)) != refused_reported + rejected_by_collector:
            account.problem(
                "a client's rejected counter and the records disagree",
                f"agent {agent.name}: stats().rejected {agent.stats.get('rejected')}, "
                f"{refused_reported} in notices, {rejected_by_collector} refused by the collector",
            )
        dropped_reported = sum(by_reason["dropped"] for by_reason in reported.values())
        if int(agent.stats.get("dropped", 0)) != dropped_reported:
            account.problem(
                "a client's drop counter and its notices disagree",
                f"agent {agent.name}: stats().dropped {agent.stats.get('dropped')}, notices {dropped_reported}",
            )
    return account


def check_pairs(agents: list[AgentRecords], audit: Audit, rejects: list[dict[str, Any]], account: Account) -> None:
    """Two scopes of one action name open at once in one session, one failing: both outcomes kept."""
    finishes: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    reads: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in audit.events.values():
        if str(line.get("action", "")).endswith(".pair"):
            key = (line["session_id"], line["action"])
            if line["stage"] == "FINISH":
                finishes[key].append(line["status"])
            elif line["stage"] == "READ":
                reads[key] += 1
    for record in rejects:
        event = record.get("event") or {}
        if str(event.get("action", "")).endswith(".pair"):
            account.problem("a run of a same-name pair refused", f"{record['reason']}: {event.get('action')}")
    survivors = {agent.name for agent in agents if not agent.killed}
    for (session_id, action), statuses in sorted(finishes.items()):
        complete = reads[session_id, action] == 2 and len(statuses) == 2
        if not complete and action.split(".", 1)[0] not in survivors:
            continue  # a killed agent's pair, cut short by the kill or its unacknowledged events
        account.pairs_checked += 1
        if sorted(statuses) != ["FAILED", "OK"] or reads[session_id, action] != 2:
            account.problem("a same-name pair without both outcomes", f"{session_id} {action}: {statuses}")
    if account.pairs_checked == 0:
        account.problem("no same-name pair on disk", "the agents ran none to the end")


@pytest.mark.slow
def test_chaos_every_event_on_disk_once_or_a_loud_loss(
    make_collector: Any, schema_validator: Any, soak: Any, tmp_path: Path, short_tmp: Path
) -> None:
    """Everything at once, from a seed; then every event on disk exactly once or a loud loss."""
    seed = chaos_seed()
    print(f"\nGZ_IA_CHAOS_SEED={seed}")
    rng = random.Random(seed)
    duration = soak(120.0)
    collector: CollectorProcess = make_collector(start=False)
    collector.write_config(CONFIG)
    config_path = collector.base / "config" / "gz-ia" / "collector.toml"
    fleet = ChaosFleet(tmp_path / "agents", collector, seed)
    second: CollectorProcess | None = None
    figures: dict[str, Any] = {"seed": seed, "seconds_of_faults": duration, "shards": collector.shards}
    faults: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    peak_kib = 0
    with tmpfs(collector.workspace, 32 + math.ceil(duration / 2)):
        try:
            collector.root.mkdir()
            collector.start()
            make_idle_sessions(collector)

            for mode in ("threads", "threads", "asyncio"):
                fleet.spawn(mode)
            bad_parent = fleet.spawn(rng.choice(["threads", "asyncio"]), bad_parent=True)
            wait_until(lambda: fleet.acked_total() > 0, 30, "the first acknowledged events")

            schedule = (
                ["collector_kill"] * max(3, round(duration / 8))
                + ["agent_kill"] * max(2, round(duration / 10))
                + ["second_collector", "gc", "full_disk"]
            )
            rng.shuffle(schedule)
            moments = sorted(rng.uniform(0.05, 0.9) * duration for _ in schedule)
            begun = time.monotonic()
            for moment, fault in zip(moments, schedule, strict=True):
                time.sleep(max(0.0, begun + moment - time.monotonic()))
                assert collector.proc is not None
                assert collector.proc.poll() is None, f"the collector died:\n{collector.log()[-3000:]}"
                peak_kib = max(peak_kib, vm_kib(collector.proc.pid))
                faults[fault] += 1
                if fault == "collector_kill":
                    collector.kill()
                    time.sleep(rng.uniform(0.0, 0.5))
                    collector.start()
                elif fault == "agent_kill":
                    victim = rng.choice([name for name in fleet.alive() if name not in fleet.protected])
                    fleet.kill(victim)
                    fleet.spawn(fleet.modes[victim])
                elif fault == "second_collector":
                    (short_tmp / "second").mkdir()
                    second = CollectorProcess(short_tmp / "second", shards=collector.shards)
                    second_collector_refuses_the_root(collector, second, fleet)
                elif fault == "gc":
                    figures["gc"] = gc_removes_idle_sessions(collector, config_path)
                else:
                    figures.update(disk_fills_and_frees(collector, fleet, rng))

            phases = {"faults": round(time.monotonic() - started, 1)}
            fleet.finish()
            phases["agents_finished"] = round(time.monotonic() - started, 1)
            # A restart adopts at once the spools of the agents killed since the last adoption pass.
            collector.restart()
            wait_until(
                lambda: not spooled_segments(short_tmp / "spool"),
                40,
                "the killed agents' spools to be adopted",
                detail=lambda: f"{spooled_segments(short_tmp / 'spool')}\n{collector.log()[-2000:]}",
            )
            assert collector.proc is not None
            peak_kib = max(peak_kib, vm_kib(collector.proc.pid))
            assert collector.stop() == 0, collector.log()[-3000:]

            phases["adopted"] = round(time.monotonic() - started, 1)
            audit = Audit(collector.root, schema_validator)
            phases["audited"] = round(time.monotonic() - started, 1)
            rejects = read_rejects(collector.root)
            agents = [fleet.records(name) for name in fleet.procs]
            account = account_for(agents, audit, rejects)
            check_pairs(agents, audit, rejects, account)
            figures["invalid_ids_refused"] = check_agents(agents, fleet, bad_parent, audit, account)
            figures["oversized"] = check_oversized(audit, account)
            figures["odd_values"] = check_odd_values(audit, account)
            figures.update(
                agents={mode: sum(1 for m in fleet.modes.values() if m == mode) for mode in ("threads", "asyncio")},
                events=account.emitted,
                acknowledged=account.acknowledged,
                on_disk=account.on_disk,
                duplicates=sum(len(where) - 1 for where in audit.duplicates.values()),
                losses=dict(account.losses),
                unacknowledged_lost_with_killed_agents=account.unacknowledged_with_killed_agents,
                held_unacknowledged_by_killed_agents=account.held_by_killed_agents_bound,
                crashes_survived=faults["collector_kill"],
                agents_killed=len(fleet.killed),
                faults=dict(faults),
                pairs_checked=account.pairs_checked,
                lines_on_disk=audit.lines,
                sessions=audit.sessions,
                archived_segments=audit.archived_segments,
                rejects_records=len(rejects),
                seconds=round(time.monotonic() - started, 1),
                phases=phases,
                peak_collector_rss_mib=round(peak_kib / 1024, 1),
            )
            record_figures(tmp_path, "chaos", figures)
            with evidence_kept(collector.root, collector.log, tmp_path):
                audit.assert_clean()
                report = account.report()
                assert not account.problems, f"GZ_IA_CHAOS_SEED={seed}: the account does not add up:\n{report}"
        finally:
            fleet.close()
            collector.close()
            if second is not None:
                second.close()


def make_idle_sessions(collector: CollectorProcess) -> None:
    """Write the idle sessions, then crash the collector (so that it is not still writing them) and
    age their files by two days: ``gz-ia gc --older-than 1d`` selects them and nothing else."""
    from gz_ia.client import build_event

    client = collector.client(spool=False)
    for session_id in IDLE:
        client.send(build_event(session_id=session_id, action="idle", stage="READ", agent="setup"), timeout=10)
    client.close()
    collector.kill()
    collector.start()
    old = time.time() - 2 * 86_400
    for path in (collector.root / "sessions").glob("idle-*"):
        os.utime(path, (old, old))


def gc_removes_idle_sessions(collector: CollectorProcess, config_path: Path) -> int:
    """``gz-ia gc`` while the agents write: the idle sessions go, every other session stays."""
    before = {path.name for path in (collector.root / "sessions").glob("*.events.jsonl")}
    result = collector.gz_ia("gc", "--older-than", "1d", "--config", str(config_path), timeout=60)
    assert result.returncode == 0, f"gz-ia gc exited {result.returncode}: {result.stdout}{result.stderr}"
    left = {path.name.split(".events", 1)[0] for path in (collector.root / "sessions").iterdir()}
    assert not left & set(IDLE), f"gz-ia gc left idle sessions: {sorted(left & set(IDLE))}\n{result.stdout}"
    gone = {name.removesuffix(".events.jsonl") for name in before} - left - set(IDLE)
    assert not gone, f"gz-ia gc removed sessions that were being written: {sorted(gone)}\n{result.stdout}"
    return len(IDLE)


def second_collector_refuses_the_root(collector: CollectorProcess, second: CollectorProcess, fleet: ChaosFleet) -> None:
    """A second collector on the same root (its own socket) must refuse to write it: a client naming
    that root is refused with ``root_locked``, and nothing it sent is written."""
    from gz_ia.client import Client, build_event

    # The first collector must be writing the root, which it takes at a client's hello, not at its
    # start: a new acknowledgement says so.
    acked = fleet.acked_total()
    wait_until(lambda: fleet.acked_total() > acked, 30, "the collector to write the root again")
    second.workspace, second.root = collector.workspace, collector.root
    second.write_config(CONFIG)
    second.start()
    probe = Client(socket_path=second.socket, root=collector.root, spool=False)
    probe.send_future(
        build_event(session_id="probe-second", action="probe", stage="READ", agent="probe", attrs={"eid": "probe"})
    )
    wait_until(
        lambda: "root_locked" in (probe.stats().last_error or "") or probe.stats().accepted > 0,
        20,
        "the second collector to refuse the root with root_locked",
        detail=lambda: f"client: {probe.stats()}\nsecond collector:\n{second.log()[-2000:]}",
    )
    stats = probe.stats()
    probe.close(timeout=0)
    assert stats.accepted == 0, f"a second collector accepted an event for the root the first one writes: {stats}"
    assert second.stop() == 0, second.log()[-3000:]
    assert not collector.session_file("probe-second").exists(), "the second collector wrote the root"


def disk_fills_and_frees(collector: CollectorProcess, fleet: ChaosFleet, rng: random.Random) -> dict[str, Any]:
    """Fill the tmpfs under the root: the collector counts ENOSPC and stays up while the agents hold
    their events; then free it."""
    filler = collector.workspace / "filler"
    filled = fill_disk(filler)
    try:
        wait_until(
            lambda: metric_value(collector.metrics(), "gzia_write_errors_total", {"kind": "ENOSPC"}) > 0,
            30,
            'gzia_write_errors_total{kind="ENOSPC"} to increase',
            detail=lambda: collector.log()[-2500:],
        )
        wait_until(lambda: fleet.held() > 0, 30, "the agents to hold events while the disk is full")
        time.sleep(rng.uniform(0.5, 2.0))  # how long the disk stays full: part of the scenario
        enospc = metric_value(collector.metrics(), "gzia_write_errors_total", {"kind": "ENOSPC"})
        held = fleet.held()
    finally:
        filler.unlink()
    assert collector.proc is not None and collector.proc.poll() is None, collector.log()[-3000:]
    return {"disk_full": {"filler_bytes": filled, "enospc_errors": enospc, "events_held_by_agents": held}}


def spooled_segments(spool: Path) -> list[str]:
    """The spool files still waiting to be adopted (the quarantine is not waiting)."""
    if not spool.exists():
        return []
    return sorted(
        str(path.relative_to(spool))
        for path in spool.rglob("*")
        if path.is_file() and "quarantine" not in path.parts and not path.name.endswith(".lock")
    )


def check_oversized(audit: Audit, account: Account) -> dict[str, int]:
    """The 2,000,000-character errors and the action names past their limit arrived cut and marked."""
    from gz_ia.client.schema import MAX_ACTION_LENGTH, MAX_ERROR_LENGTH

    counts = {"errors_cut": 0, "actions_cut": 0}
    for line in audit.events.values():
        for name, text, limit, start in (
            ("errors_cut", str(line.get("error", "")), MAX_ERROR_LENGTH, "EEEE"),
            ("actions_cut", str(line.get("action", "")), MAX_ACTION_LENGTH, "LLLL"),
        ):
            if text.startswith(start):
                counts[name] += 1
                if len(text) != limit or "…[cut, " not in text:
                    account.problem(f"an oversized field not cut and marked ({name})", text[-60:])
    for name, count in counts.items():
        if count == 0:
            account.problem("no oversized field on disk", name)
    return counts


ODD_STORED = {
    "loss": "NaN",
    "up": "Infinity",
    "down": "-Infinity",
    "tokens": str(2**64),
    "debt": str(-(2**70)),
    "big": str(10**30),
}
"""How the agents' NaN, infinities and huge ints (chaos_agent.ODD_VALUES) are stored."""


def check_odd_values(audit: Audit, account: Account) -> int:
    """The failing actions that set NaN, infinities and huge ints are on disk as FINISH FAILED with
    those values as strings (every line is also decoded as the reader decodes it: Audit)."""
    count = 0
    for line in audit.events.values():
        attrs = line.get("attrs") or {}
        if "loss" not in attrs:
            continue
        count += 1
        stored = {key: value for key, value in attrs.items() if key != "eid"}
        if stored != ODD_STORED or line.get("status") != "FAILED":
            account.problem("odd values not stored as strings on a FINISH FAILED", str(line)[:300])
    if count == 0:
        account.problem("no odd values on disk", "none of the agents' NaN, infinities or huge ints")
    return count


def check_agents(agents: list[AgentRecords], fleet: ChaosFleet, bad_parent: str, audit: Audit, account: Account) -> int:
    """What each surviving agent saw: flushed, invalid ids refused at the scope, the bad parent
    ignored. Returns how many invalid ids the scope constructors refused."""
    refused = 0
    for agent in agents:
        if agent.killed:
            continue
        summary = agent.summary
        if summary is None or not summary["flushed"]:
            account.problem("an agent that did not flush", f"{agent.name}: {agent.stats}")
            continue
        if (agent.stats["queued"], agent.stats["unacknowledged"], agent.stats["invalid"]) != (0, 0, 0):
            account.problem("an agent that ended holding events", f"{agent.name}: {agent.stats}")
        refused += summary["invalid_ids_raised"]
        if summary["invalid_ids_raised"] != summary["invalid_ids_tried"]:
            account.problem(
                "an invalid id a scope constructor accepted",
                f"{agent.name}: {summary['invalid_ids_tried']} tried, {summary['invalid_ids_raised']} raised",
            )
    warnings = fleet.log(bad_parent).count("GZ_IA_PARENT_SESSION_ID")
    if warnings != 1:
        account.problem("an invalid inherited parent id not reported once", f"{bad_parent}: {warnings} warnings")
    own = [line for line in audit.events.values() if line.get("role") == bad_parent]
    if not own or any("parent_session_id" in line for line in own):
        account.problem("an invalid inherited parent id not ignored", f"{bad_parent}: {len(own)} events on disk")
    return refused
