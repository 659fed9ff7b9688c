"""``python -m bench``: run the whole suite and write ``results.{json,md,png}`` (see docs/performance.md).

Use ``bench/run``, which installs the ``bench`` dependency group first. Sections run in this order,
each system and configuration interleaved run by run so that drift on the machine hits all alike:

* ``ingest``: 100 and 10,000 sessions; rsyslog, syslog-ng, ours, ours with 2 shards, ours with
  fsync, ours through the real thin client in 8 agent processes;
* ``agent``: agent CPU per event for the client, the null client and stdlib ``logging``; the time
  ``import gz_ia.client`` takes against ``import logging`` (``bench/import_time.py``);
* ``pace``: the same agent loop with and without gz-ia at an agent's pace (``bench/pace.py``): CPU
  work or a sleep between action scopes, as a ratio;
* ``latency``: acknowledged round trip at a moderate rate, follow latency, and the wall time of
  ``gz-ia session log`` and ``gz-ia hook claude-code`` as a ratio to ``python -I -c pass``;
* ``reader``: ``--json`` dump of a big session against ``cat``; ``bench/reader_tail.py``;
  ``bench/reader_seek.py``;
* ``scale``: 100,000 sessions under ``ulimit -n 1024``;
* ``flood``: 64 clients at once, collector peak RSS;
* ``profile`` (only with ``--profile``): py-spy on the collector, cProfile on the client.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Final

import msgspec

from . import import_time
from ._common import BENCH, BenchError, Sample, creation_cost, removals_deferred, rss_bytes, scratch_dir
from ._ingest import run_ingest, run_verified, verify
from ._load import build_load, session_id
from ._peers import Peers, ensure_peers
from ._report import chart, evaluate, machine, markdown
from ._systems import Ours, Rsyslog, SyslogNg, System

SECTIONS: Final = ("ingest", "agent", "pace", "latency", "reader", "scale", "flood", "profile")
_MB: Final = 1 << 20
_SLOW_CREATION: Final = 200e-6
"""Seconds per file creation above which the results say that the file system slowed the run."""


class Settings(msgspec.Struct, kw_only=True):
    """Sizes of every section; ``--quick`` shrinks them for a smoke test of a few minutes."""

    runs: int
    events: int
    agent_events: int
    pace_blocks: int
    import_runs: int
    rtt_events: int
    rtt_rate: float
    follow_events: int
    follow_rate: float
    dump_events: int
    scale_sessions: int
    flood_clients: int
    flood_events_per_client: int


FULL: Final = Settings(
    runs=3,
    events=1_000_000,
    agent_events=200_000,
    pace_blocks=30,
    import_runs=20,
    rtt_events=5_000,
    rtt_rate=1_000,
    follow_events=500,
    follow_rate=100,
    dump_events=1_000_000,
    scale_sessions=100_000,
    flood_clients=64,
    flood_events_per_client=5_000,
)
QUICK: Final = Settings(
    runs=1,
    events=100_000,
    agent_events=50_000,
    pace_blocks=8,
    import_runs=5,
    rtt_events=2_000,
    rtt_rate=1_000,
    follow_events=200,
    follow_rate=100,
    dump_events=200_000,
    scale_sessions=20_000,
    flood_clients=64,
    flood_events_per_client=1_000,
)


class Suite:
    """Collects samples, notes and gaps while the sections run."""

    def __init__(self, settings: Settings, out: Path) -> None:
        self.settings = settings
        self.out = out
        self.samples: dict[str, Sample] = {}
        self.notes: dict[str, Any] = {}
        self.gaps: list[str] = []
        self.failures = 0
        self._peers: Peers | None = None

    @property
    def peers(self) -> Peers:
        """The peers, installed on first use."""
        if self._peers is None:
            self._peers = ensure_peers()
            self.notes["peers"] = {"rsyslog": self._peers.rsyslog_version, "syslog-ng": self._peers.syslog_ng_version}
        return self._peers

    def add(self, key: str, name: str, unit: str, value: float, *, higher: bool = True) -> Sample:
        """Record one run's value of a figure."""
        sample = self.samples.setdefault(key, Sample(name=name, unit=unit, values=[], higher_is_better=higher))
        sample.values.append(value)
        return sample

    def failed(self, what: str, exc: BaseException) -> None:
        """Record a failed run: it is reported as a gap and makes the command exit non-zero."""
        self.failures += 1
        message = f"{what}: {exc}"
        self.gaps.append(message[:1500])
        print(f"bench: FAILED {message[:3000]}", file=sys.stderr)
        if not isinstance(exc, BenchError):
            traceback.print_exception(exc, file=sys.stderr)


def say(message: str) -> None:
    """Progress on stderr, with a timestamp: the full run takes a while."""
    print(f"bench [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- sections ------------------------------------------------------------------------------------


def section_ingest(suite: Suite) -> None:
    """Ingest 1M events over 100 and 10,000 sessions with every system, ``runs`` times each."""
    settings = suite.settings
    peers = suite.peers
    for sessions in (100, 10_000):
        say(f"ingest: encoding {settings.events:,} events over {sessions:,} sessions")
        load = build_load(settings.events, sessions, 8)
        suite.notes[f"ingest.{sessions}.avg_event_bytes"] = load.json_bytes / load.events
        makers: list[tuple[str, str, str, Callable[[Path], System]]] = [
            ("rsyslog", "rsyslog 8 (tuned)", "json", partial(_rsyslog, peers=peers, sessions=sessions)),
            ("syslog-ng", "syslog-ng 3.38 (tuned)", "json", lambda d: SyslogNg(d, peers)),
            ("gz-ia", "gz-ia", "frames", Ours),
            ("gz-ia-shards", "gz-ia, shards = 2", "frames", partial(Ours, shards=2)),
            ("gz-ia-fsync", "gz-ia --durability fsync", "frames", lambda d: Ours(d, durability="fsync")),
            ("gz-ia-client", "gz-ia via Client.log, 8 agents", "client", Ours),
        ]
        for run in range(settings.runs):
            for key, label, mode, make in makers:
                with scratch_dir("gzb") as workdir:
                    system = make(workdir)
                    try:
                        # The previous run's files are still being written back: flush them now, so
                        # that no system pays for the one before it.
                        os.sync()
                        result = run_verified(system, load, mode=mode)
                    except Exception as exc:
                        suite.failed(f"ingest {sessions} sessions, {label}, run {run + 1}", exc)
                        continue
                sample = suite.add(
                    f"ingest.{sessions}.{key}", f"ingest {sessions:,} sessions: {label}", "events/s",
                    result.events_per_second,
                )  # fmt: skip
                sample.note("cores", result.cores)
                # CPU per event is robust to other work on the machine, unlike events/s.
                sample.note("CPU µs/event", result.collector_cpu / result.events * 1e6)
                sample.note("MB/s", load.json_bytes / result.seconds / 1e6)
                sample.note("peak RSS MB", result.collector_peak_rss / _MB, use_max=True)
                for name, value in result.extra.items():
                    sample.note(name, value)
                say(
                    f"  {label:<34} run {run + 1}: {result.events_per_second:>10,.0f} events/s, "
                    f"{result.cores:.2f} cores, {result.seconds:.2f} s"
                )
        del load


def _rsyslog(workdir: Path, *, peers: Peers, sessions: int) -> System:
    return Rsyslog(workdir, peers, sessions=sessions)


def section_agent(suite: Suite) -> None:
    """Agent CPU per event: client (active), null client, stdlib logging; one fresh process each. Then
    the import cost of the client against that of logging (bench/import_time.py)."""
    settings = suite.settings
    with scratch_dir("gzb") as workdir:
        system = Ours(workdir)
        system.start()
        try:
            for run in range(settings.runs):
                for variant, label in (
                    ("logging", "stdlib logging, JSON to a file"),
                    ("client", "gz-ia Client.log (active, incl. sender thread)"),
                    ("null", "gz-ia NullClient.log"),
                    ("null_scope", "gz-ia action scope, null client (per scope)"),
                ):
                    try:
                        result = _agent_cpu(variant, settings.agent_events, system, workdir)
                    except Exception as exc:
                        suite.failed(f"agent CPU {variant}, run {run + 1}", exc)
                        continue
                    sample = suite.add(
                        f"agent.{variant}", f"agent CPU per event: {label}", "µs/event",
                        result["cpu_per_event_us"], higher=False,
                    )  # fmt: skip
                    if variant == "client":
                        sample.note("calling thread µs", result["thread_cpu_per_event_us"])
                    say(f"  agent {variant:<10} run {run + 1}: {result['cpu_per_event_us']:.3f} µs/event")
                medians = import_time.measure(settings.import_runs)
                for key, name, statement in (
                    ("import_client", "import gz_ia.client, installed alone", "gz_ia.client, as installed alone"),
                    (
                        "import_client_and_session",
                        "from gz_ia.client import Client, session, installed alone",
                        "Client and session, as installed alone",
                    ),
                    ("import_logging", "import logging", "logging"),
                ):
                    suite.add(f"agent.{key}", name, "ms", medians[statement] * 1e3, higher=False)
                ratio = medians["gz_ia.client, as installed alone"] / medians["logging"]
                say(f"  import gz_ia.client / import logging, run {run + 1}: {ratio:.2f}x")
        finally:
            system.stop()


def section_pace(suite: Suite) -> None:
    """The agent loop of bench/pace.py at each pace, with and without gz-ia, rounds in turn."""
    from . import pace

    try:
        results = pace.measure(suite.settings.pace_blocks, list(pace.PACES))
    except Exception as exc:
        suite.failed("pace", exc)
        return
    for name, figures in results.items():
        sample = suite.add(
            f"pace.{name}", f"agent loop at pace {name}: CPU with gz-ia / without", "x", figures["cpu_ratio"],
            higher=False,
        )  # fmt: skip
        sample.note("added µs/event", figures["added_cpu_per_event_us"])
        sample.note("disabled: ratio", figures["null_cpu_ratio"])
        sample.note("floor µs/event", figures["floor_added_cpu_per_event_us"])
        suite.add(
            f"pace.{name}.added", f"agent CPU gz-ia adds per event at pace {name}", "µs/event",
            figures["added_cpu_per_event_us"], higher=False,
        )  # fmt: skip
        say(f"  pace {name:<12} {figures['cpu_ratio']:.3f}x, +{figures['added_cpu_per_event_us']:.1f} µs/event")


def _agent_cpu(variant: str, events: int, system: Ours, workdir: Path, profile: Path | None = None) -> dict[str, float]:
    out = workdir / f"agent-{variant}.json"
    argv = [sys.executable, "-m", "bench._agent_cpu", variant, str(events), str(system.socket), str(system.root)]
    argv.append(str(out))
    if profile is not None:
        argv += ["--profile", str(profile)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=BENCH.parent, timeout=600)
    if result.returncode != 0:
        raise BenchError(f"agent CPU {variant} failed:\n{result.stderr[-2000:]}")
    return dict(json.loads(out.read_text()))


_ROUND_TRIPS: Final = (("rtt", "rtt", "Client.send"), ("raw-rtt", "raw_rtt", "raw protocol, one thread"))


def section_latency(suite: Suite) -> None:
    """Acknowledged round trip (p50/p99) at a moderate rate, and follow latency (p50/p99)."""
    from ._latency import follow_latency

    settings = suite.settings
    with scratch_dir("gzb") as workdir:
        system = Ours(workdir)
        system.start()
        try:
            for run in range(settings.runs):
                for kind, key, how in _ROUND_TRIPS:
                    out = workdir / f"{kind}.json"
                    argv = [
                        sys.executable, "-m", "bench._latency", kind, str(system.socket), str(system.root),
                        str(settings.rtt_events), str(settings.rtt_rate), str(out),
                    ]  # fmt: skip
                    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=BENCH.parent)
                    if result.returncode != 0:
                        suite.failed(f"round trip ({how}), run {run + 1}", BenchError(result.stderr[-2000:]))
                        continue
                    rtt = json.loads(out.read_text())
                    label = f"acknowledged round trip ({how}) at {settings.rtt_rate:,.0f} events/s"
                    suite.add(f"latency.{key}_p50", f"{label} p50", "ms", rtt["p50_ms"], higher=False)
                    suite.add(f"latency.{key}_p99", f"{label} p99", "ms", rtt["p99_ms"], higher=False)
                    say(f"  round trip ({how}) run {run + 1}: p50 {rtt['p50_ms']:.3f} ms, p99 {rtt['p99_ms']:.3f} ms")
            from ._cli_cost import cli_cost

            cost = cli_cost(system.socket, system.root, max(20, settings.runs * 10))
            for key, what in (("session_log", "gz-ia session log"), ("hook", "gz-ia hook claude-code"),
                              ("codex_hook", "gz-ia hook codex"), ("gemini_hook", "gz-ia hook gemini")):  # fmt: skip
                suite.add(f"latency.{key}_ratio", f"{what} wall time / python -I -c pass (target <= 3)", "x",
                          cost[f"{key}_ratio"], higher=False)  # fmt: skip
                ratio = cost[key + "_ratio"]
                say(f"  {what}: {cost[key + '_ms']:.1f} ms, {ratio:.2f}x python ({cost['python_ms']:.1f} ms)")
            for run in range(settings.runs):
                follow = follow_latency(system.socket, system.root, settings.follow_events, settings.follow_rate)
                if "gap" in follow:
                    suite.gaps.append(f"follow latency: {follow['gap']}")
                    suite.notes["latency.follow_p99"] = follow["gap"]
                    say(f"  follow: gap: {follow['gap']}")
                    break
                name = f"follow latency ({follow['command']}) at {settings.follow_rate:g}/s"
                suite.add("latency.follow_p50", name + " p50", "ms", float(follow["p50_ms"]), higher=False)
                sample = suite.add("latency.follow_p99", name + " p99", "ms", float(follow["p99_ms"]), higher=False)
                sample.note("missing", float(follow["missing"]), use_max=True)
                say(f"  follow run {run + 1}: p50 {follow['p50_ms']:.1f} ms, p99 {follow['p99_ms']:.1f} ms")
        finally:
            system.stop()


def section_reader(suite: Suite) -> None:
    """``--json`` dump of one big session (rotated into segments when rotation exists) vs ``cat``."""
    from ._reader import dump_vs_cat, reader_seek, reader_tail

    settings = suite.settings
    with scratch_dir("gzb") as workdir:
        # Small segments so that the session spans many of them, uncompressed so that cat reads the
        # same bytes; the variables are ignored by a collector that does not rotate yet.
        system = Ours(workdir, env={"GZ_IA_ROTATION_MAX_BYTES": str(8 * _MB), "GZ_IA_ROTATION_COMPRESS": "false"})
        system.start()
        load = build_load(settings.dump_events, 1, 1, with_json=False)
        try:
            say(f"reader: writing a {settings.dump_events:,}-event session")
            run_ingest(system, load, mode="frames")
        except Exception as exc:
            system.stop()
            suite.failed("reader: writing the big session", exc)
            return
        finally:
            del load
        try:
            for run in range(settings.runs):
                try:
                    result = dump_vs_cat(system, session_id(0, 1), settings.dump_events)
                except Exception as exc:
                    suite.failed(f"reader dump, run {run + 1}", exc)
                    continue
                events = settings.dump_events
                dump = suite.add("reader.dump_seconds", f"gz-ia session logs --json, {events:,} events", "s",
                                 result["dump_seconds"], higher=False)  # fmt: skip
                suite.add("reader.cat_seconds", f"cat of the same files, {events:,} events", "s",
                          result["cat_seconds"], higher=False)  # fmt: skip
                dump.extra["segments"] = result["segments"]
                dump.extra["MB"] = result["bytes"] / 1e6
                say(
                    f"  dump run {run + 1}: {result['dump_seconds']:.2f} s vs cat {result['cat_seconds']:.3f} s "
                    f"({result['segments']:.0f} segments)"
                )
        finally:
            system.stop()
        dumped = suite.samples.get("reader.dump_seconds")
        if dumped is not None and dumped.extra.get("segments") == 1:
            suite.gaps.append("reader: the session is one file: this collector does not rotate yet")
        say("reader: bench/reader_tail.py")
        tail = reader_tail(suite.settings.runs == 1, workdir)
        suite.notes["reader.tail"] = tail.get("result", tail)
        if "gap" in tail:
            suite.gaps.append(f"last 100 events: {tail['gap']}")
        say("reader: bench/reader_seek.py")
        seek = reader_seek(suite.settings.runs == 1, workdir)
        suite.notes["reader.seek"] = seek.get("result", seek)
        if "gap" in seek:
            suite.gaps.append(f"--seq, --failed, follower memory: {seek['gap']}")


def section_scale(suite: Suite) -> None:
    """Many sessions (100,000 by default) under ``ulimit -n 1024``: no error, collector RSS."""
    settings = suite.settings
    sessions = settings.scale_sessions
    load = build_load(sessions * 2, sessions, 8, with_json=False)
    ok = True
    for run in range(settings.runs):
        with scratch_dir("gzb") as workdir:
            system = Ours(workdir, nofile=1024)
            try:
                system.start()
                try:
                    result = run_ingest(system, load, mode="frames")
                    rss = rss_bytes(system.pid)
                finally:
                    system.stop()
                log = system.log()
                if any(word in log for word in ("Traceback", "ERROR", "Too many open files")):
                    ok = False
                    raise BenchError(f"the collector logged errors:\n{log[-1500:]}")
                verify(system, load.expected, with_seq=True)
            except Exception as exc:
                ok = False
                suite.failed(f"scale {sessions:,} sessions, run {run + 1}", exc)
                continue
        name = f"{sessions:,} sessions under ulimit -n 1024: collector RSS"
        sample = suite.add("scale.rss_mb", name, "MB", rss / _MB, higher=False)
        sample.note("peak RSS MB", result.collector_peak_rss / _MB, use_max=True)
        sample.note("events/s", result.events_per_second)
        say(f"  scale run {run + 1}: RSS {rss / _MB:.0f} MB (peak {result.collector_peak_rss / _MB:.0f} MB), no error")
    suite.notes["scale.ok"] = ok


def section_flood(suite: Suite) -> None:
    """64 clients sending at once: collector peak RSS, and every event on disk exactly once."""
    settings = suite.settings
    clients = settings.flood_clients
    load = build_load(clients * settings.flood_events_per_client, clients * 100, clients, with_json=False)
    for run in range(settings.runs):
        with scratch_dir("gzb") as workdir:
            system = Ours(workdir)
            try:
                result = run_verified(system, load)
            except Exception as exc:
                suite.failed(f"flood, run {run + 1}", exc)
                continue
        name = f"{clients}-client flood ({load.events:,} events): collector peak RSS"
        sample = suite.add("flood.rss_mb", name, "MB", result.collector_peak_rss / _MB, higher=False)
        sample.note("events/s", result.events_per_second)
        say(f"  flood run {run + 1}: peak RSS {result.collector_peak_rss / _MB:.0f} MB, nothing lost")


def section_profile(suite: Suite) -> None:
    """py-spy on the collector during ingest (100 and 10,000 sessions); cProfile on the client."""
    from ._profile import PySpy, summarise_collapsed, summarise_cprofile

    settings = suite.settings
    profiles = suite.out / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    for sessions in (100, 10_000):
        load = build_load(settings.events, sessions, 8, with_json=False)
        for key, make in (("gz-ia", Ours), ("gz-ia-fsync", lambda d: Ours(d, durability="fsync"))):
            if key == "gz-ia-fsync" and sessions == 100:
                continue
            with scratch_dir("gzb") as workdir:
                system = make(workdir)
                system.start()
                raw = profiles / f"collector-{key}-{sessions}.txt"
                spy = PySpy(system.pid, raw)
                try:
                    result = run_ingest(system, load, mode="frames")
                finally:
                    spy.stop()
                    system.stop()
            summary = summarise_collapsed(raw)
            suite.notes[f"profile.collector.{key}.{sessions}"] = {
                "events_per_second": result.events_per_second,
                **summary,
            }
            say(f"  profiled collector {key} at {sessions:,} sessions: {result.events_per_second:,.0f} events/s")
        del load
    with scratch_dir("gzb") as workdir:
        system = Ours(workdir)
        system.start()
        try:
            dump = profiles / "client.pstats"
            _agent_cpu("client", settings.agent_events, system, workdir, profile=dump)
            suite.notes["profile.client"] = summarise_cprofile(dump)
        finally:
            system.stop()


# --- driver --------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line of ``bench/run``."""
    parser = argparse.ArgumentParser(prog="bench/run", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke test: 100k events, 1 run (a few minutes)")
    parser.add_argument("--runs", type=int, default=None, help="runs per configuration (default 3; quick 1)")
    parser.add_argument("--events", type=int, default=None, help="events per ingest run (default 1,000,000)")
    parser.add_argument(
        "--only", default=None, help=f"comma-separated sections to run (of {', '.join(SECTIONS)}); default all"
    )
    parser.add_argument("--profile", action="store_true", help="also profile collector (py-spy) and client")
    parser.add_argument("--out", type=Path, default=None, help="result directory (default bench/results[/quick])")
    return parser.parse_args(argv)


def _loadavg() -> float:
    """The 1-minute load average: other work on this 2-core machine distorts every figure."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections, then write results.json, results.md and results.png."""
    args = parse(sys.argv[1:] if argv is None else argv)
    settings = QUICK if args.quick else FULL
    if args.runs is not None or args.events is not None:
        settings = msgspec.structs.replace(
            settings, runs=args.runs or settings.runs, events=args.events or settings.events
        )
    out = args.out or (BENCH / "results" / ("quick" if args.quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in (args.only.split(",") if args.only else SECTIONS) if s in SECTIONS]
    if not args.profile and not args.only:
        chosen.remove("profile")
    suite = Suite(settings, out)
    started = time.monotonic()
    # Raise the descriptor limit for the peers (rsyslog keeps one file open per session).
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    functions = {
        "ingest": section_ingest,
        "agent": section_agent,
        "pace": section_pace,
        "latency": section_latency,
        "reader": section_reader,
        "scale": section_scale,
        "flood": section_flood,
        "profile": section_profile,
    }
    load_before = _loadavg()
    with removals_deferred():
        creation = creation_cost()
        say(f"creating a file in /tmp takes {creation * 1e6:.0f} µs")
        if creation > _SLOW_CREATION and "ingest" in chosen:
            suite.gaps.append(
                f"creating a file in /tmp took {creation * 1e6:.0f} µs before the run (20-60 µs is usual): files "
                "removed in the last minutes slow ext4 without a journal; the 10,000-session figures are low"
            )
        for name in chosen:
            say(f"section {name} (load average {_loadavg():.2f})")
            suite.notes[f"loadavg.{name}"] = _loadavg()
            try:
                functions[name](suite)
            except Exception as exc:
                suite.failed(f"section {name}", exc)
        say("removing the scratch directories")
    meta = {
        "machine": machine(),
        "command": "bench/run " + shlex.join(sys.argv[1:] if argv is None else argv),
        "runs": settings.runs,
        "settings": msgspec.to_builtins(settings),
        "seconds": round(time.monotonic() - started, 1),
        "gaps": suite.gaps,
        "load_average_before": load_before,
        "file_creation_us_before": round(creation * 1e6, 1),
        "load_average_by_section": {k.split(".", 1)[1]: v for k, v in suite.notes.items() if k.startswith("loadavg.")},
    }
    # Only the load before the suite tells of other work: before each later section the 1-minute
    # average still holds the suite's own previous section (both cores busy during ingest).
    if load_before > 1.0:
        suite.gaps.append(
            "the machine was busy with other work before the run (1-minute load average above 1): "
            "absolute figures are low, ratios of the same run less affected"
        )
    targets = evaluate(suite.samples, suite.notes)
    document = {
        "meta": meta,
        "samples": {
            key: {**msgspec.to_builtins(s), "median": s.median, "min": s.low, "max": s.high}
            for key, s in suite.samples.items()
        },
        "targets": msgspec.to_builtins(targets),
        "notes": suite.notes,
    }
    (out / "results.json").write_text(json.dumps(document, indent=2, default=str) + "\n")
    text = markdown(suite.samples, targets, meta)
    (out / "results.md").write_text(text)
    try:
        chart(suite.samples, targets, out / "results.png")
    except Exception as exc:
        suite.failed("chart", exc)
    print(text)
    say(f"done in {meta['seconds']:.0f} s; results in {out}")
    sys.stdout.flush()
    return 1 if suite.failures else 0


if __name__ == "__main__":
    sys.exit(main())
