"""The OTLP/HTTP receiver under a slow disk and under a flood, with real HTTP exporters.

Each exporter here is a thread posting OTLP JSON exports over real HTTP, as the SDK's exporters do:
it resends an export after a timeout or a 429/503 (honouring ``Retry-After``), and notes the moment
each export is answered 200. What is asserted is what an exporter relies on: a 200 only once the
export's lines are on the disk, 429 with ``Retry-After`` (never a hang) when the collector holds as
much as it takes, and every export answered 200 stored exactly once, its resends included.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CollectorProcess, wait_for
from tests.fixtures.slow_disk import SlowDisk

pytest.importorskip("opentelemetry.proto")
pytest.importorskip("mfusepy")

from gz_ia.collector.http import MAX_BODIES_HELD
from gz_ia.collector.receivers.otlp import MAX_OTLP_BODY

EXPORTER_TIMEOUT = 10.0
"""The OpenTelemetry SDK's OTLP exporters' default timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``)."""


def _spans_body(session: str, cycles: list[str], pad: int = 0) -> bytes:
    """One traces export: an execute_tool span per cycle, children of the agent span ``session``."""
    attributes = [
        {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
        {"key": "gen_ai.tool.name", "value": {"stringValue": "Grep"}},
    ]
    if pad:
        attributes.append({"key": "padding", "value": {"stringValue": "p" * pad}})
    spans = [
        {
            "traceId": session * 2,
            "spanId": cycle,
            "parentSpanId": session,
            "name": "execute_tool Grep",
            "kind": 1,
            "startTimeUnixNano": "1764670000000000000",
            "endTimeUnixNano": "1764670000250000000",
            "attributes": attributes,
            "status": {"code": 0},
        }
        for cycle in cycles
    ]
    request = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}
    return json.dumps(request).encode()


def _logs_body(session: str, cycles: list[str]) -> bytes:
    """One logs export: a Claude Code ``tool_result`` per cycle (its ``tool_use_id``), in ``session``."""

    def record(cycle: str) -> dict[str, Any]:
        pairs = {"event.name": "tool_result", "session.id": session, "tool_name": "Bash", "success": "true"}
        attributes = [{"key": key, "value": {"stringValue": value}} for key, value in pairs.items()]
        attributes += [
            {"key": "duration_ms", "value": {"intValue": "40"}},
            {"key": "tool_use_id", "value": {"stringValue": cycle}},
        ]
        return {"timeUnixNano": "1764670000000000000", "body": {"stringValue": "claude_code.tool_result"},
                "attributes": attributes}  # fmt: skip

    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "claude-code"}}]}
    request = {
        "resourceLogs": [{"resource": resource, "scopeLogs": [{"scope": {}, "logRecords": list(map(record, cycles))}]}]
    }
    return json.dumps(request).encode()


@dataclass
class Export:
    session: str
    cycles: list[str]
    path: str
    body: bytes
    answered_at: float | None = None
    on_disk_when_answered: bool | None = None


@dataclass
class Exporter:
    """A thread that sends its exports one after the other, each until it is answered 200."""

    collector: CollectorProcess
    exports: list[Export]
    backing: Path | None = None
    """Where the session files really are (the slow disk's backing directory): checked at each 200."""
    statuses: list[tuple[float, int]] = field(default_factory=list)
    timeouts: int = 0
    missing_retry_after: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "an exporter never got its exports answered"

    def _run(self) -> None:
        for export in self.exports:
            while not self.stop.is_set():
                status, retry_after, text = self._post(export)
                self.statuses.append((time.monotonic(), status))
                if status == 200:
                    export.answered_at = time.monotonic()
                    if self.backing is not None:
                        export.on_disk_when_answered = _on_disk(self.backing, export)
                    break
                if status in (429, 503):
                    if retry_after is None:
                        self.missing_retry_after += 1
                    self.stop.wait(float(retry_after or 1))
                elif status != 0:
                    raise AssertionError(f"export answered {status}: {text!r}")

    def _post(self, export: Export) -> tuple[int, str | None, bytes]:
        """One attempt; status 0 for a timeout or a reset (the exporter resends the same body)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.collector.http_port, timeout=EXPORTER_TIMEOUT)
        try:
            headers = {"Content-Type": "application/json", **self.collector.http_headers()}
            connection.request("POST", export.path, export.body, headers)
            answer = connection.getresponse()
            text = answer.read()
            return answer.status, answer.getheader("Retry-After"), text
        except (TimeoutError, ConnectionError):
            self.timeouts += 1
            return 0, None, b""
        finally:
            connection.close()


def _exports(name: str, signal: str, count: int, per_export: int, pad: int = 0) -> list[Export]:
    session = (name * 16)[:16]
    assert all(c in "0123456789abcdef" for c in session), "span ids are hex: name the exporter in hex digits"
    exports = []
    for number in range(count):
        cycles = [f"{hash((name, number, index)) & (2**64 - 1):016x}" for index in range(per_export)]
        if signal == "traces":
            exports.append(Export(session, cycles, "/v1/traces", _spans_body(session, cycles, pad)))
        else:
            exports.append(Export(session, cycles, "/v1/logs", _logs_body(session, cycles)))
    return exports


def _on_disk(sessions_root: Path, export: Export) -> bool:
    path = sessions_root / "sessions" / f"{export.session}.events.jsonl"
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return False
    return all(f'"cycle":"{cycle}"'.encode() in text for cycle in export.cycles)


def _finishes(collector: CollectorProcess, sessions: set[str]) -> dict[str, int]:
    """How many FINISH lines each cycle has in the stored sessions."""
    counts: dict[str, int] = {}
    for session, lines in collector.all_sessions().items():
        if session in sessions:
            for line in lines:
                if line["stage"] == "FINISH":
                    counts[line["cycle"]] = counts.get(line["cycle"], 0) + 1
    return counts


def _assert_stored_once(collector: CollectorProcess, exporters: list[Exporter]) -> None:
    exports = [export for exporter in exporters for export in exporter.exports]
    assert all(export.answered_at is not None for export in exports)
    counts = _finishes(collector, {export.session for export in exports})
    expected = {cycle for export in exports for cycle in export.cycles}
    assert set(counts) == expected, f"{len(expected - set(counts))} cycles answered 200 but not stored"
    assert set(counts.values()) == {1}, "a cycle stored more than once"


@pytest.fixture(name="slow_disk")
def _slow_disk(make_collector: Any, short_tmp: Path) -> Any:
    """A collector (``durability = "fsync"``) whose session root is on a :class:`SlowDisk`."""
    collector = make_collector("--durability", "fsync", start=False)
    disk = SlowDisk(short_tmp / "backing", collector.root)
    try:
        collector.start()
        yield collector, disk
    finally:
        disk.go()  # a collector stuck in a stalled write could not be stopped
        collector.close()
        disk.close()


@pytest.mark.slow
def test_a_slow_then_stalled_disk_answers_200_only_once_written_and_429_at_the_bound(slow_disk: Any, soak: Any) -> None:
    """Exporters post logs and traces at once to a collector whose disk is slow, then stalled, then
    fast again: no export is answered 200 before its lines are in the files, stalled or not; once
    the collector holds what it takes the answer is 429 with Retry-After (not a hang past the
    exporter's timeout); afterwards every export answered 200 is stored exactly once, the resends
    after timeouts included."""
    collector, disk = slow_disk
    disk.delay(0.02)
    exporters = [
        Exporter(collector, _exports(f"{name}", signal, 30, 20), backing=disk.backing)
        for name, signal in (("a1", "traces"), ("b2", "logs"), ("c3", "traces"), ("d4", "logs"))
    ]
    # Big exports that fill the bodies held while the disk is stalled: the first of each, sent
    # at once, are more than the collector holds; a bounded run (GZ_IA_SOAK_SECONDS) sends no more.
    per_filler = max(1, int(soak(120.0) / 30))
    fillers = [
        Exporter(collector, _exports(f"f{index}", "traces", per_filler, 1000, pad=2000), backing=disk.backing)
        for index in range(16)
    ]
    for exporter in exporters:
        exporter.start()
    wait_for(lambda: sum(e.answered_at is not None for x in exporters for e in x.exports) >= 20, message="some 200s")
    disk.stall()
    stalled_at = time.monotonic()
    for exporter in fillers:
        exporter.start()
    # The collector holds what it takes: the answer is 429 with Retry-After, soon, however stalled.
    wait_for(
        lambda: any(status == 429 for x in exporters + fillers for at, status in x.statuses if at > stalled_at),
        timeout=EXPORTER_TIMEOUT * 3,
        message="a 429 while the disk is stalled",
    )
    time.sleep(EXPORTER_TIMEOUT * 1.5)  # long enough for exporters to time out and resend
    disk.delay(0)
    disk.go()
    for exporter in exporters + fillers:
        exporter.join(180)
    # A write that passed the disk before it stalled may be answered during the stall: never one
    # whose lines are not on the disk (checked by each exporter the moment it reads its 200).
    assert all(e.on_disk_when_answered for x in exporters + fillers for e in x.exports), "200 before on disk"
    assert all(x.missing_retry_after == 0 for x in exporters + fillers)
    collector.stop()
    _assert_stored_once(collector, exporters + fillers)
    timeouts = sum(x.timeouts for x in exporters + fillers)
    busy = sum(status == 429 for x in exporters + fillers for _at, status in x.statuses)
    print(f"slow disk: {timeouts} exporter timeouts (resent), {busy} answers 429")


def _vm(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(key)


@pytest.mark.slow
def test_a_flood_of_big_exports_keeps_memory_bounded_and_loses_nothing(slow_disk: Any, soak: Any) -> None:
    """Many exporters at once, each posting exports of a few MB to a collector whose disk is slow
    (so that many exports wait on one write pass): peak RSS stays within the baseline plus the
    bounds of what the collector holds, and every export answered 200 is stored exactly once."""
    collector, disk = slow_disk
    disk.delay(0.05)
    assert collector.proc is not None
    pid = collector.proc.pid
    # Warm up (imports, first root opened), then take the baseline.
    warm = Exporter(collector, _exports("c0", "traces", 1, 10))
    warm.start()
    warm.join(60)
    baseline = _vm(pid, "VmRSS")
    # Exports of about 19 MB (a few spans, each with a big attribute: big to hold, cheap to map):
    # held all at once they would be six times the bodies the collector holds at once. A bounded
    # run (GZ_IA_SOAK_SECONDS) sends one each.
    each = max(1, int(soak(90.0) / 30))
    exporters = [Exporter(collector, _exports(f"e{index}", "traces", each, 16, pad=1_200_000)) for index in range(24)]
    size = len(exporters[0].exports[0].body)
    assert size < MAX_OTLP_BODY and len(exporters) * size > 6 * MAX_BODIES_HELD
    for exporter in exporters:
        exporter.start()
    for exporter in exporters:
        exporter.join(600)
    peak = _vm(pid, "VmHWM")
    busy = sum(status == 429 for x in exporters for _at, status in x.statuses)
    print(f"flood: baseline {baseline >> 20} MiB, peak {peak >> 20} MiB, +{(peak - baseline) >> 20} MiB, {busy} x 429")
    # What the collector holds at once: the bodies read (the HTTP side's bound) and the one export
    # being decoded (its decompressed body and message), each byte at most twice at a moment (the
    # parts read and the body joined from them). Unbounded, the bodies alone would be six times
    # the first term.
    assert peak - baseline < 2 * (MAX_BODIES_HELD + 2 * MAX_OTLP_BODY)
    collector.stop()
    _assert_stored_once(collector, exporters)
