"""Long-lived readers' memory over a long follow: ``-f``, the MCP server and the exporter at once.

A real collector (``--segment-mb``, rotation compressed, archives kept) takes one session, ``soak``,
from the Python client: first ``--fill-segments`` segments' worth as fast as the client sends (a
reader that starts behind reads them back from their gzip archives), then an agent's pace
(``--pace`` events a second, each about 1 KiB), with a burst of one segment's worth every
``--burst-minutes`` (a rotation while everyone follows). Following the session all along:

* ``gz-ia session logs soak -f -n 0 --action the-end --json`` (decodes every event, prints the last);
* ``gz-ia mcp``, driven by the MCP SDK's client: ``events_since`` from the session's first event,
  1,000 at a time, then waiting for new ones (``wait_seconds``), as an agent's reader does;
* ``gz-ia export otel`` (traces and logs) to a local OTLP/HTTP sink that answers 200 to everything.

Every ``--sample-seconds`` the resident set (``VmRSS``) and its peak (``VmHWM``) of each reader and
the collector are appended as a JSON line to ``--samples``; at the end (``--minutes``) an event
``the-end`` is written, each reader must reach it, and the summary (peak RSS per reader, RSS in the
first and the last quarter of the run: flat or not) is printed as JSON.

Usage (run in the background for long soaks; two sizes side by side)::

    nohup uv run --no-sync python -m bench.reader_soak --segment-mb 64 --minutes 90 \\
        --samples /tmp/soak-64.jsonl > /tmp/soak-64.json 2> /tmp/soak-64.log &
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from ._common import BenchError, scratch_dir, socket_accepts, stop_process, wait_until

_CLI: Final = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()"]
_MB: Final = 1 << 20
_WORDS: Final = ("read", "edit", "grep", "test", "build", "patch", "diff", "file", "line", "call", "tool")
_EVENT_BYTES: Final = 1024
"""About what one event takes on disk (its note makes up most of it)."""


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP backend that accepts everything: an empty protobuf answer is a full success."""

    received = [0, 0]
    """Requests and bytes received."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        _Sink.received[0] += 1
        _Sink.received[1] += length
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def _status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid`` in MiB (empty when it is gone)."""
    figures: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                figures[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return figures


def _mcp_server_pid(parent: int) -> int | None:
    """The ``gz-ia mcp`` process the SDK's client started (a child of this process)."""
    for task in Path(f"/proc/{parent}/task").iterdir():
        try:  # a thread, or a child, may end while it is looked at
            for child in (task / "children").read_text().split():
                if b"mcp" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0"):
                    return int(child)
        except OSError:
            continue
    return None


class _Writer:
    """The agent: fills, then writes at a pace with bursts, from the Python client."""

    def __init__(self, socket_path: Path, root: Path, args: argparse.Namespace) -> None:
        from gz_ia.client import Client

        self.client = Client(socket_path=socket_path, root=root, spool=False, max_events=50_000)
        self.args = args
        self.written = 0
        self.rng = random.Random(7)

    def _one(self, action: str | None = None) -> None:
        index = self.written
        note = " ".join(self.rng.choice(_WORDS) for _ in range(_EVENT_BYTES // 6))
        self.client.log(
            session_id="soak",
            action=action or f"task-{index // 3}",
            stage=("READ", "PENDING", "FINISH")[index % 3] if action is None else "READ",
            agent="claude",
            attrs={"step": index, "note": note},
        )
        self.written += 1

    def burst(self, segments: float) -> None:
        """One or more segments' worth, as fast as the client sends (flushed every 2,000)."""
        count = int(segments * self.args.segment_mb * _MB / _EVENT_BYTES)
        for number in range(count):
            self._one()
            if number % 2000 == 1999 and not self.client.flush(60):
                raise BenchError("the collector did not take a burst's events within 60 s")
        self.client.flush(60)

    def paced(self, seconds: float) -> None:
        """``--pace`` events a second for ``seconds``."""
        end = time.monotonic() + seconds
        interval = 1.0 / self.args.pace
        next_at = time.monotonic()
        while time.monotonic() < end:
            self._one()
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        self.client.flush(30)


async def _mcp_follow(env: dict[str, str], done: threading.Event, seen: list[int]) -> None:
    """``events_since`` from the first event, then waiting, until ``the-end`` is read."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=_CLI[0], args=[*_CLI[1:], "mcp"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        cursor: str | None = None
        while True:
            arguments: dict[str, Any] = {"session_ids": ["soak"], "limit": 1000, "wait_seconds": 20}
            if cursor is not None:
                arguments["cursor"] = cursor
            result = await session.call_tool("events_since", arguments)
            if result.is_error or not isinstance(result.structured_content, dict):
                raise BenchError(f"events_since failed: {result.content}")
            page = result.structured_content
            cursor = page["cursor"]
            seen[0] += len(page["events"])
            if any(event["action"] == "the-end" for event in page["events"]):
                done.set()
                return


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segment-mb", type=int, default=64, help="rotation.max_bytes in MiB")
    parser.add_argument("--minutes", type=float, default=90.0)
    parser.add_argument("--fill-segments", type=float, default=2.5, help="written first, as fast as possible")
    parser.add_argument("--pace", type=float, default=20.0, help="events a second after the fill")
    parser.add_argument("--burst-minutes", type=float, default=30.0, help="a segment's worth every this often")
    parser.add_argument("--sample-seconds", type=float, default=30.0)
    parser.add_argument("--samples", type=Path, required=True, help="JSON lines of RSS samples, appended")
    args = parser.parse_args()
    with scratch_dir("gzsoak") as base:
        summary = _soak(base, args)
    print(json.dumps(summary, indent=2))
    return 0


def _soak(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    sock = base / "collector.sock"
    root = base / "ws" / ".harness"
    root.mkdir(parents=True)
    env = {**os.environ, "GZ_IA_SOCKET": str(sock), "GZ_IA_ROOT": str(root), "XDG_CONFIG_HOME": str(base / "cfg")}
    env["GZ_IA_STATE_DIR"] = str(base / "state")
    collector_env = {
        **env,
        "GZ_IA_ROTATION_MAX_BYTES": str(args.segment_mb * _MB),
        "GZ_IA_RETENTION_MAX_ARCHIVES": "0",
    }
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    exporter_env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_address[1]}"}
    logs = base / "logs"
    logs.mkdir()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    started = time.monotonic()
    samples: list[dict[str, Any]] = []
    writer: _Writer | None = None
    try:
        with (logs / "collector.log").open("ab") as log:
            procs["collector"] = subprocess.Popen(
                [sys.executable, "-m", "gz_ia.collector", "--socket", str(sock), "--metrics-address", "off",
                 "--http-address", "off"],
                env=collector_env, stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
        wait_until(lambda: socket_accepts(sock), 60, "the collector's socket")
        writer = _Writer(sock, root, args)
        writer._one("first")
        writer.client.flush(30)
        follow_out = logs / "follow.out"
        with follow_out.open("wb") as out, (logs / "follow.err").open("wb") as err:
            procs["follow"] = subprocess.Popen(
                [*_CLI, "session", "logs", "soak", "-f", "-n", "0", "--action", "the-end", "--json"],
                env=env, stdout=out, stderr=err, start_new_session=True,
            )  # fmt: skip
        with (logs / "export.log").open("ab") as log:
            procs["export"] = subprocess.Popen(
                [*_CLI, "export", "otel", "--state-dir", str(base / "otel"), "--session-idle", "5",
                 "--metrics-address", "off"],
                env=exporter_env, stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
        mcp_done = threading.Event()
        mcp_seen = [0]
        mcp_errors: list[BaseException] = []

        def run_mcp() -> None:
            try:
                asyncio.run(_mcp_follow(env, mcp_done, mcp_seen))
            except BaseException as error:
                mcp_errors.append(error)

        threading.Thread(target=run_mcp, daemon=True).start()
        wait_until(lambda: _mcp_server_pid(os.getpid()) is not None, 60, "the MCP server")
        mcp_pid = _mcp_server_pid(os.getpid())
        assert mcp_pid is not None
        pids = {"follow": procs["follow"].pid, "mcp": mcp_pid, "export": procs["export"].pid}
        pids["collector"] = procs["collector"].pid
        stop = threading.Event()

        def sample() -> None:
            with args.samples.open("a") as out:
                while not stop.wait(args.sample_seconds):
                    row: dict[str, Any] = {
                        "minutes": round((time.monotonic() - started) / 60, 2),
                        "segment_mb": args.segment_mb,
                        "written": writer.written if writer else 0,
                        "archives": len([n for n in os.listdir(root / "sessions") if n.endswith(".gz")]),
                        "mcp_seen": mcp_seen[0],
                        "sink_requests": _Sink.received[0],
                    }
                    for name, pid in pids.items():
                        row[name] = _status(pid)
                    samples.append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        time.sleep(2.0)  # everyone is up and at the end before the fill
        writer.burst(args.fill_segments)
        end = started + args.minutes * 60
        next_burst = time.monotonic() + args.burst_minutes * 60
        while time.monotonic() < end:
            writer.paced(max(0.0, min(next_burst, end) - time.monotonic()))
            if time.monotonic() >= next_burst and time.monotonic() < end:
                writer.burst(1.0)
                next_burst = time.monotonic() + args.burst_minutes * 60
        writer._one("the-end")
        writer.client.flush(30)
        wait_until(lambda: b'"the-end"' in follow_out.read_bytes(), 600, "the follower to read the-end")
        wait_until(mcp_done.is_set, 600, "the MCP reader to read the-end")
        if mcp_errors:
            raise BenchError(f"the MCP reader failed: {mcp_errors[0]!r}")
        final = {name: _status(pid) for name, pid in pids.items()}
        stop.set()
        sampler.join()
    finally:
        if writer is not None:
            writer.client.close()
        for proc in procs.values():
            stop_process(proc)
        sink.shutdown()
    return _summary(args, samples, final, writer.written if writer else 0, started, root)


def _summary(
    args: argparse.Namespace, samples: list[dict[str, Any]], final: dict[str, dict[str, float]], written: int,
    started: float, root: Path,
) -> dict[str, Any]:  # fmt: skip
    """Peak RSS per reader, and its median RSS in the run's first and last quarter (flat or not)."""
    quarter = max(1, len(samples) // 4)
    readers: dict[str, Any] = {}
    for name in ("follow", "mcp", "export", "collector"):
        rss = [row[name].get("VmRSS", 0.0) for row in samples if row[name]]
        early, late = sorted(rss[:quarter]), sorted(rss[-quarter:])
        readers[name] = {
            # The MCP server ends with its client, which has read the last event: the samples hold its peak.
            "peak_rss_mb": max([final[name].get("VmHWM", 0.0)] + [row[name].get("VmHWM", 0.0) for row in samples]),
            "rss_first_quarter_mb": early[len(early) // 2] if early else 0.0,
            "rss_last_quarter_mb": late[len(late) // 2] if late else 0.0,
            "rss_max_sampled_mb": max(rss, default=0.0),
        }
    return {
        "segment_mb": args.segment_mb,
        "hours": round((time.monotonic() - started) / 3600, 2),
        "events": written + 1,
        "archives": len([n for n in os.listdir(root / "sessions") if n.endswith(".gz")]),
        "sink_requests": _Sink.received[0],
        "sink_mb": round(_Sink.received[1] / _MB, 1),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "readers": readers,
        "load": os.getloadavg(),
    }


if __name__ == "__main__":
    sys.exit(main())
