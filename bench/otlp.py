"""The OTLP receiver's cost beside the client protocol's, in the same run, on the same collector.

One collector (``--durability`` as given) on a scratch root. Interleaved round by round, so that a
busy machine slows both alike:

* ``client``: ``gz_ia.client.Client`` sends ``--spans`` tool cycles (READ + FINISH each, the events
  an ``execute_tool`` span becomes, the FINISH with the ``tool`` attr the receiver gives it: the same
  lines stored) and waits for every verdict (written);
* ``otlp``: ``--spans`` ``execute_tool`` spans (``--signal logs``: as many of Claude Code's
  ``claude_code.tool_result`` log records, each looked up among the hooks' cycles of its session
  before it is stored), pre-encoded as OTLP protobuf export requests of ``--batch`` each, POSTed one
  after another on one keep-alive connection; each answer comes after the write.

Reported per variant: spans (cycles) per second received and written, and collector CPU per span
(user + system of the collector process during the clock), medians over the rounds, and the OTLP
figures as ratios to the client protocol's. The agent-side cost is the exporters' own.

``--instructions`` counts instead what noise cannot move: the instructions the whole collector
process runs (callgrind, every thread, user space) for ``--spans`` and for three times as many of
each variant, a fresh collector each; the difference over the difference in spans is what one more
span costs, the collector's start, warm-up and stop cancelled out. Instructions are not time (a
cache miss costs none), so it guides work on the code and the rounds say what it is worth.

Usage (from the repository root)::

    uv run --no-sync python -m bench.otlp [--signal traces|logs] [--spans 20000] [--batch 512] [--rounds 3]
                                          [--json out.json]
    uv run --no-sync python -m bench.otlp --signal logs --spans 4096 --instructions   # needs valgrind
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import cpu_seconds, stop_process, wait_until
from gz_ia.client import Client

SCHEMA_NOTE = "spans/s and CPU per span; each span is two stored events (its opening and its FINISH)"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _requests(spans: int, batch: int, round_number: int) -> list[bytes]:
    """``spans`` execute_tool spans as protobuf export requests of ``batch`` spans, new ids each round."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    now = time.time_ns()
    bodies = []
    for start in range(0, spans, batch):
        request = ExportTraceServiceRequest()
        resource: ResourceSpans = request.resource_spans.add()
        scope: ScopeSpans = resource.scope_spans.add()
        for index in range(start, min(spans, start + batch)):
            span: Span = scope.spans.add()
            span.trace_id = (round_number * 1_000_003 + index // 64 + 1).to_bytes(16, "big")
            span.span_id = (round_number << 40 | index + 1).to_bytes(8, "big")
            span.parent_span_id = (round_number << 48 | index // 64 + 1).to_bytes(8, "big")
            span.name = "execute_tool Read"
            span.start_time_unix_nano = now
            span.end_time_unix_nano = now + 1_000_000
            span.attributes.extend(
                [
                    KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="execute_tool")),
                    KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value="Read")),
                ]
            )
        bodies.append(request.SerializeToString())
    return bodies


def _log_requests(records: int, batch: int, round_number: int) -> list[bytes]:
    """``records`` of Claude Code's ``claude_code.tool_result`` log events as protobuf export
    requests of ``batch`` records each (64 a session, as the spans), new call ids each round."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

    now = time.time_ns()
    bodies = []
    for start in range(0, records, batch):
        request = ExportLogsServiceRequest()
        resource: ResourceLogs = request.resource_logs.add()
        resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="claude-code")))
        scope: ScopeLogs = resource.scope_logs.add()
        for index in range(start, min(records, start + batch)):
            record: LogRecord = scope.log_records.add()
            record.time_unix_nano = now
            record.body.string_value = "claude_code.tool_result"
            pairs = {
                "event.name": "tool_result",
                "session.id": f"l{round_number % 1000}-{index // 64}",
                "tool_name": "Read",
                "tool_use_id": f"toolu_{round_number}_{index:x}",
                "success": "true",
                "duration_ms": "1",
            }
            record.attributes.extend(
                KeyValue(key=key, value=AnyValue(string_value=value)) for key, value in pairs.items()
            )
        bodies.append(request.SerializeToString())
    return bodies


def _client_round(socket_path: Path, root: Path, spans: int, round_number: int, signal: str = "traces") -> None:
    client = Client(socket_path=socket_path, root=root)
    try:
        for index in range(spans):
            session_id = f"c{round_number % 1000}-{index // 64}"
            cycle = f"{index:x}"
            # The lines the receiver stores for the same call: an execute_tool span's FINISH names
            # its tool, a tool_result's its tool and call id.
            attrs = {"tool": "Read"} if signal == "traces" else {"tool": "Read", "tool_use_id": f"toolu_{cycle}"}
            client.log(session_id=session_id, action="Read", stage="READ", agent="bench", cycle=cycle)
            client.log(
                session_id=session_id,
                action="Read",
                stage="FINISH",
                agent="bench",
                cycle=cycle,
                duration_ms=1,
                attrs=attrs,
            )
        if not client.flush(300.0):
            raise RuntimeError("the client did not deliver every event")
    finally:
        client.close()


def _otlp_round(port: int, key: str, bodies: list[bytes], signal: str = "traces") -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    headers = {"Content-Type": "application/x-protobuf", "X-Gz-Ia-Key": key}
    try:
        for body in bodies:
            connection.request("POST", f"/v1/{signal}", body, headers)
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"the receiver answered {answer.status}")
    finally:
        connection.close()


def _collector(base: Path, port: int, durability: str, wrap: list[str]) -> subprocess.Popen[bytes]:
    """A collector on a scratch root under ``base`` (its command prefixed with ``wrap``), started and
    warmed: the root exists and both doors have answered once."""
    root = base / ".harness"
    socket_path = base / "collector.sock"
    environment = {**os.environ, "GZ_IA_ROOT": str(root), "GZ_IA_STATE_DIR": str(base / "state")}
    proc = subprocess.Popen(
        [
            *wrap,
            sys.executable,
            "-m",
            "gz_ia.collector",
            "--socket",
            str(socket_path),
            "--metrics-address",
            "off",
            "--http-address",
            f"127.0.0.1:{port}",
            "--durability",
            durability,
        ],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        timeout = 600 if wrap else 60  # under valgrind the interpreter starts many times slower
        wait_until(socket_path.exists, timeout, "the collector's socket")
        wait_until((base / "state" / "http.json").exists, timeout, "the collector's HTTP key")
        _client_round(socket_path, root, 10, -1)  # the root exists, the code paths are warm
        _otlp_round(port, _key(base), _requests(10, 10, 999))
    except BaseException:
        stop_process(proc)
        raise
    return proc


def _key(base: Path) -> str:
    return str(json.loads((base / "state" / "http.json").read_text())["key"])  # the collector drew it at its start


def _round(variant: str, base: Path, port: int, args: argparse.Namespace, spans: int, number: int) -> None:
    if variant == "client":
        _client_round(base / "collector.sock", base / ".harness", spans, number, args.signal)
    else:
        make = _requests if args.signal == "traces" else _log_requests
        _otlp_round(port, _key(base), make(spans, args.batch, number), args.signal)


_TOTALS = re.compile(rb"^totals: (\d+)", re.MULTILINE)


def _instructions(variant: str, args: argparse.Namespace, spans: int) -> int:
    """Every instruction a fresh collector runs to start, take ``spans`` of ``variant`` and stop."""
    with tempfile.TemporaryDirectory(prefix="gzb-otlp-", dir="/tmp") as scratch:
        base = Path(scratch)
        out = base / "callgrind.out"
        wrap = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        port = _free_port()
        proc = _collector(base, port, args.durability, wrap)
        try:
            _round(variant, base, port, args, spans, 1)
        finally:
            stop_process(proc, timeout=600)
        found = _TOTALS.search(out.read_bytes())
        if found is None:
            raise RuntimeError("callgrind wrote no totals")
        return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--durability", choices=["os", "fsync"], default="os")
    parser.add_argument(
        "--signal", choices=["traces", "logs"], default="traces", help="spans, or Claude Code's tool_result log records"
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--instructions", action="store_true", help="count instructions by callgrind (see above)")
    args = parser.parse_args(argv)
    if args.instructions:
        return _instructions_main(args)
    with tempfile.TemporaryDirectory(prefix="gzb-otlp-", dir="/tmp") as scratch:
        base = Path(scratch)
        port = _free_port()
        proc = _collector(base, port, args.durability, [])
        try:
            key = _key(base)
            figures: dict[str, list[tuple[float, float]]] = {"client": [], "otlp": []}
            for number in range(args.rounds):
                make = _requests if args.signal == "traces" else _log_requests
                bodies = make(args.spans, args.batch, number)
                for variant in ("client", "otlp") if number % 2 == 0 else ("otlp", "client"):
                    cpu = cpu_seconds(proc.pid)
                    started = time.perf_counter()
                    if variant == "client":
                        _client_round(base / "collector.sock", base / ".harness", args.spans, number, args.signal)
                    else:
                        _otlp_round(port, key, bodies, args.signal)
                    wall = time.perf_counter() - started
                    figures[variant].append((wall, cpu_seconds(proc.pid) - cpu))
        finally:
            stop_process(proc)
    report: dict[str, Any] = {
        "signal": args.signal,
        "spans": args.spans,
        "batch": args.batch,
        "rounds": args.rounds,
        "note": SCHEMA_NOTE,
    }
    for variant, runs in figures.items():
        wall = statistics.median(run[0] for run in runs)
        cpu = statistics.median(run[1] for run in runs)
        report[variant] = {"spans_per_second": args.spans / wall, "cpu_us_per_span": cpu / args.spans * 1e6}
    report["otlp_vs_client"] = {
        "throughput": report["otlp"]["spans_per_second"] / report["client"]["spans_per_second"],
        "cpu_per_span": report["otlp"]["cpu_us_per_span"] / report["client"]["cpu_us_per_span"],
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


def _instructions_main(args: argparse.Namespace) -> int:
    """Print each variant's instructions per span (see the module docstring) and OTLP's over the client's."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is missing: apt-get install valgrind")
    report: dict[str, Any] = {"signal": args.signal, "spans": args.spans, "batch": args.batch}
    for variant in ("client", "otlp"):
        few, many = (_instructions(variant, args, spans) for spans in (args.spans, 3 * args.spans))
        report[variant] = {"instructions_per_span": (many - few) / (2 * args.spans)}
    report["otlp_vs_client"] = {
        "instructions_per_span": report["otlp"]["instructions_per_span"] / report["client"]["instructions_per_span"]
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
