"""Latency from ``log()`` to the event seen live: by an SSE subscriber, and on the web view's page.

A collector on a private socket and loopback port; a producer process (the real client) logs at
``--rate`` events per second for ``--seconds``, each event carrying its send time
(``attrs.sent_ns``, ``time.time_ns()`` just before ``log()``). A subscriber of ``/live`` notes when
each event arrives; meanwhile a second subscriber keeps replaying: it reconnects with ``since`` at
the oldest frame still buffered, again and again, until it has been served ``--replay`` frames (the
ring holds 2,048 frames, so a 10,000-frame replay is several ring-long replays). Reported: p50,
p90, p99 and max of the live subscriber's latency, and how many replayed frames were served during
the measurement. With ``--page`` the page itself is measured too: headless Chromium (Playwright,
Debian's ``/usr/bin/chromium``) shows the producer's session, at ``--page-rate`` for ``--page-seconds``
(each event its own action, a new row) beside the same replay, and a MutationObserver notes, in the
page's clock (``performance.timeOrigin + performance.now()``, the one ``time.time_ns()`` reads), when
each event is drawn: the page draws only the rows near its view, which follows the tail, so when the
row of probe N is added every probe up to N is on the page (events are folded in order), drawn or
scrolled past above it. At the end the bench checks that the newest probe's row is in view.
``--page-only`` measures the page alone; ``--trace FILE`` writes a Chromium trace of the page's run
(the main thread's style, layout, paint and script, for Perfetto or chrome://tracing).

The client holds an event logged alone up to its linger (250 ms by default) for others to share its
frame: ``--linger-ms 0`` measures the path beyond the client. Run ``uv run python -m bench.live``
(``--rate``, ``--seconds``, ``--replay``, ``--page``, ``--page-only``, ``--linger-ms``, ``--scale``, ``--trace FILE``,
``--json FILE``).
Figures: docs/performance.md ("Against the targets") and bench/results/live.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from ._common import scratch_dir, socket_accepts, stop_process, wait_until

PRODUCER: Final = r"""
import sys, time
from gz_ia.client import Client
rate, seconds, session, actions = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
client = Client()
client.log(session_id=session, action="warm-up", stage="READ", agent="bench")
if actions:  # each probe opens an action of its own: leave the session's limit (10,000 open) to them
    client.log(session_id=session, action="warm-up", stage="FINISH", status="OK", agent="bench")
client.flush(10)
print("ready", flush=True)
sys.stdin.readline()
count = int(rate * seconds)
start = time.monotonic()
for index in range(count):
    due = start + index / rate
    delay = due - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    action = f"probe-{index}" if actions else "probe"
    attrs = {"sent_ns": time.time_ns(), "n": index}
    client.log(session_id=session, action=action, stage="READ", agent="bench", attrs=attrs)
client.flush(30)
client.close()
"""


class SseReader:
    """A raw Server-Sent Events reader on a socket: ``(id, event, data)`` per event."""

    def __init__(self, base: str, path: str) -> None:
        parts = urlsplit(base)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
        self.buffer = b""
        head = self._until(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"/live answered {head[:200]!r}")

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            data = self.sock.recv(1 << 16)
            if not data:
                raise EOFError
            self.buffer += data
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def events(self) -> Any:
        while True:
            block = self._until(b"\n\n")
            fields: dict[str, bytes] = {}
            for line in block.split(b"\n"):
                name, sep, value = line.partition(b": ")
                if sep and name in (b"id", b"event", b"data"):
                    fields[name.decode()] = value
            if b"data" in fields or "data" in fields:
                yield fields

    def close(self) -> None:
        self.sock.close()


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    return {
        "count": len(ordered),
        "p50_ms": round(at(0.50), 2),
        "p90_ms": round(at(0.90), 2),
        "p99_ms": round(at(0.99), 2),
        "max_ms": round(ordered[-1], 2),
        "mean_ms": round(statistics.fmean(ordered), 2),
    }


def _start_collector(base: Path, linger_ms: float | None) -> tuple[subprocess.Popen[bytes], dict[str, str], str, str]:
    sock = base / "collector.sock"
    root = base / "ws" / ".harness"
    root.mkdir(parents=True)
    env = {**os.environ, "GZ_IA_SOCKET": str(sock), "GZ_IA_ROOT": str(root), "XDG_CONFIG_HOME": str(base / "cfg")}
    env["GZ_IA_STATE_DIR"] = str(base / "state")
    if linger_ms is not None:
        env["GZ_IA_LINGER_MS"] = str(linger_ms)
    log = (base / "collector.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gz_ia.collector", "--socket", str(sock), "--metrics-address", "off",
         "--http-address", "127.0.0.1:0"],
        env=env, stdout=log, stderr=log, start_new_session=True,
    )  # fmt: skip
    log.close()
    wait_until(lambda: socket_accepts(sock), 30, "the collector's socket")
    gz_ia = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()"]
    address = ""

    def has_address() -> bool:
        nonlocal address
        result = subprocess.run([*gz_ia, "ui", "--no-browser"], env=env, capture_output=True, text=True, check=False)
        address = result.stdout.strip()
        return result.returncode == 0 and address.startswith("http")

    wait_until(has_address, 30, "the web view's address")
    parts = urlsplit(address)
    return proc, env, f"{parts.scheme}://{parts.netloc}", parse_qs(parts.query)["key"][0]


def _replayer(base: str, key: str, wanted: int, stop: threading.Event, served: list[int]) -> None:
    """Replay the whole ring again and again until ``wanted`` frames were served (or ``stop``)."""
    while served[0] < wanted and not stop.is_set():
        reader = SseReader(base, f"/live?key={key}&since=0:0")  # another epoch: lagged, then the ring
        try:
            newest = 0
            for fields in reader.events():
                if fields.get("event") == b"subscribed":
                    newest = json.loads(fields["data"])["newest_seq"]
                    continue
                if fields.get("event") == b"lagged":
                    continue
                served[0] += 1
                seq = int(fields["id"].rsplit(b":", 1)[1])
                if seq >= newest or served[0] >= wanted or stop.is_set():
                    break
        finally:
            reader.close()


def _fill_ring(env: dict[str, str]) -> None:
    """Fill the ring first, so that the replay has a ring-full of frames to serve from the start."""
    subprocess.run(
        [sys.executable, "-c", PRODUCER, "20000", "0.15", "filler", "0"],
        env=env, input="go\n", capture_output=True, text=True, check=True,
    )  # fmt: skip


def measure_sse(args: argparse.Namespace, base_dir: Path) -> dict[str, Any]:
    proc, env, base, key = _start_collector(base_dir, args.linger_ms)
    try:
        _fill_ring(env)
        live = SseReader(base, f"/live?key={key}&session=bench")
        events = live.events()
        next(events)  # subscribed
        producer = subprocess.Popen(
            [sys.executable, "-c", PRODUCER, str(args.rate), str(args.seconds), "bench", "0"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert producer.stdin is not None
        assert producer.stdout is not None
        assert producer.stdout.readline().strip() == "ready"
        next(events)  # the warm-up event
        stop = threading.Event()
        served = [0]
        replay = threading.Thread(target=_replayer, args=(base, key, args.replay, stop, served), daemon=True)
        replay.start()
        producer.stdin.write("go\n")
        producer.stdin.flush()
        latencies: list[float] = []
        expected = int(args.rate * args.seconds)
        while len(latencies) < expected:
            fields = next(events)
            arrived = time.time_ns()
            event = json.loads(fields["data"])
            latencies.append((arrived - event["attrs"]["sent_ns"]) / 1e6)
        replayed_during = served[0]
        stop.set()
        replay.join(30)
        producer.wait(60)
        live.close()
        return {
            "rate": args.rate,
            "seconds": args.seconds,
            "replayed_frames_during": replayed_during,
            "sse": _percentiles(latencies),
        }
    finally:
        stop_process(proc)


PAGE_PROBE: Final = """
() => {
  // Times in the page, in the same clock as the producer's time.time_ns(): the page's origin plus
  // its monotonic now. Only the rows added are looked at, so the probe costs the page little.
  const clock = () => performance.timeOrigin + performance.now();
  window.__seen = {};
  window.__arrived = {};
  const handler = view.source.onmessage;
  view.source.onmessage = (message) => {
    try { window.__arrived[JSON.parse(message.data).action] = clock(); } catch (error) {}
    handler(message);
  };
  // The page draws only the rows near its view; following the tail, the newest event's row is the
  // one in view. Events come and are folded in order, so when probe-N's row is added every probe up
  // to N is on the page: drawn, or scrolled past above it, as a row is in any long table.
  const body = document.querySelector('#timeline tbody');
  let drawn = -1;
  new MutationObserver((records) => {
    const now = clock();
    let newest = drawn;
    for (const record of records) {
      for (const row of record.addedNodes) {
        const name = row.dataset && row.dataset.action;
        if (name && name.startsWith('probe-')) newest = Math.max(newest, Number(name.slice(6)));
      }
    }
    for (let n = drawn + 1; n <= newest; n++) window.__seen['probe-' + n] = now;
    drawn = newest;
  }).observe(body, { childList: true });
}
"""


NEWEST_IN_VIEW: Final = """
(name) => {
  const row = document.querySelector(`#timeline tr[data-action="${name}"]`);
  if (!row) return false;
  const box = row.closest('#timeline-scroll') || document.documentElement;
  const [r, b] = [row.getBoundingClientRect(), box.getBoundingClientRect()];
  return r.bottom > b.top && r.top < Math.min(b.bottom, innerHeight);
}
"""


def _watch(base: str, key: str, count: int, seen: dict[str, float]) -> None:
    """A Python subscriber of the page's stream beside it: tells the browser's share of the latency."""
    reader = SseReader(base, f"/live?key={key}&session=page&subtree=1")
    try:
        for fields in reader.events():
            if fields.get("event"):
                continue
            action = json.loads(fields["data"])["action"]
            if action.startswith("probe-"):
                seen[action] = time.time_ns() / 1e6
                if len(seen) >= count:
                    return
    finally:
        reader.close()


def measure_page(args: argparse.Namespace, base_dir: Path) -> dict[str, Any]:
    """The page at ``--page-rate`` (each event its own action, a new row) beside a ``--replay`` replay."""
    from playwright.sync_api import sync_playwright

    proc, env, base, key = _start_collector(base_dir, args.linger_ms)
    stop = threading.Event()
    try:
        _fill_ring(env)
        producer = subprocess.Popen(
            [sys.executable, "-c", PRODUCER, str(args.page_rate), str(args.page_seconds), "page", "1"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert producer.stdin is not None
        assert producer.stdout is not None
        assert producer.stdout.readline().strip() == "ready"
        count = int(args.page_rate * args.page_seconds)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"]
            )
            page = browser.new_page()
            page.goto(f"{base}/ui/?key={key}#/s/page")
            page.locator('#timeline tr[data-action="warm-up"]').wait_for(timeout=30_000)
            page.locator("#live.on").wait_for(timeout=30_000)
            page.evaluate(PAGE_PROBE)
            if args.trace is not None:  # the main thread's work, for chrome://tracing or Perfetto
                browser.start_tracing(page=page, path=str(args.trace), categories=["devtools.timeline"])
            beside: dict[str, float] = {}
            watcher = threading.Thread(target=_watch, args=(base, key, count, beside), daemon=True)
            watcher.start()
            served = [0]
            replay = threading.Thread(target=_replayer, args=(base, key, args.replay, stop, served), daemon=True)
            time.sleep(0.5)  # subscribed before the first probe
            replay.start()
            producer.stdin.write("go\n")
            producer.stdin.flush()
            producer.wait(120)
            watcher.join(60)
            replayed_during = served[0]
            stop.set()
            replay.join(30)
            # Whatever did not reach the page within 10 s of the last event's send counts as missed.
            # Polled from here: the page's CSP refuses the eval Playwright's wait_for_function polls with.
            deadline = time.monotonic() + 10
            while page.evaluate("Object.keys(window.__seen).length") < count and time.monotonic() < deadline:
                time.sleep(0.1)
            if args.trace is not None:
                browser.stop_tracing()
            seen: dict[str, float] = page.evaluate("window.__seen")
            arrived: dict[str, float] = page.evaluate("window.__arrived")
            rows = page.evaluate("document.querySelectorAll('#timeline tbody tr[data-action]').length")
            newest_in_view = page.evaluate(NEWEST_IN_VIEW, f"probe-{count - 1}")
            browser.close()
        lines = [json.loads(line) for line in (Path(env["GZ_IA_ROOT"]) / "sessions" / "page.events.jsonl").open()]
        sent = {line["action"]: line["attrs"]["sent_ns"] / 1e6 for line in lines if line["action"].startswith("probe-")}
        return {
            "rate": args.page_rate,
            "seconds": args.page_seconds,
            "logged": count,
            "stored": len(sent),
            "replayed_frames_during": replayed_during,
            "rows_in_page_at_end": rows,
            "newest_row_in_view_at_end": newest_in_view,
            "page": _percentiles([seen[name] - sent[name] for name in sent if name in seen]),
            "page_event_source": _percentiles([arrived[name] - sent[name] for name in sent if name in arrived]),
            "sse_beside_page": _percentiles([beside[name] - sent[name] for name in sent if name in beside]),
        }
    finally:
        stop.set()
        stop_process(proc)


FILLER: Final = r"""
import sys
from gz_ia.client import Client
sessions, big = int(sys.argv[1]), int(sys.argv[2])
client = Client()
for i in range(sessions):
    client.log(session_id=f"many-{i:05d}", action="a", stage="READ", agent="bench")
    if i % 2000 == 1999:
        assert client.flush(300)
for i in range(big):
    client.log(session_id="big", action=f"t{i // 3}", stage=("READ", "PENDING", "FINISH")[i % 3], agent="bench")
    if i % 5000 == 4999:
        assert client.flush(300)
assert client.flush(300)
client.close()
"""


def _timed_get(base: str, path: str) -> tuple[float, int]:
    parts = urlsplit(base)
    started = time.perf_counter()
    sock = socket.create_connection((parts.hostname, parts.port), timeout=120)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    sock.close()
    return (time.perf_counter() - started) * 1000, len(data)


def measure_scale(args: argparse.Namespace, base_dir: Path) -> dict[str, Any]:
    """The web view's JSON at 10,000 sessions and on a big session: each call's time and size."""
    proc, env, base, key = _start_collector(base_dir, None)
    try:
        subprocess.run([sys.executable, "-c", FILLER, str(args.sessions), str(args.big)], env=env, check=True)
        root = env["GZ_IA_ROOT"]
        calls = {
            "sessions, first page (listing every session)": f"/ui/api/sessions?key={key}&root={root}",
            "sessions, page 50": f"/ui/api/sessions?key={key}&root={root}&offset=5000",
            "sessions, status=running": f"/ui/api/sessions?key={key}&root={root}&match=status=running",
            "tree of the big session": f"/ui/api/tree?key={key}&root={root}&session=big",
            "newest 500 events of the big session": f"/ui/api/events?key={key}&root={root}&session=big&limit=500",
        }
        results = {}
        for name, path in calls.items():
            time.sleep(1.1)  # past the listing's reuse
            elapsed, size = _timed_get(base, path)
            results[name] = {"ms": round(elapsed, 1), "bytes": size}
        return {"sessions": args.sessions + 1, "big_session_events": args.big, "calls": results}
    finally:
        stop_process(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--replay", type=int, default=10_000)
    parser.add_argument("--page", action="store_true", help="also measure the page in headless Chromium")
    parser.add_argument("--page-only", action="store_true", help="measure the page alone (implies --page)")
    parser.add_argument("--page-rate", type=float, default=1000.0)
    parser.add_argument("--page-seconds", type=float, default=10.0)
    parser.add_argument(
        "--linger-ms", type=float, default=None, help="the producer's GZ_IA_LINGER_MS (default: the client's, 250 ms)"
    )
    parser.add_argument(
        "--trace", type=Path, default=None, help="write a Chromium trace of the page's run (its figures then differ)"
    )
    parser.add_argument("--scale", action="store_true", help="time the web view's JSON on a large root instead")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=1_000_000, help="events of the big session (--scale)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results: dict[str, Any] = {"linger_ms": args.linger_ms if args.linger_ms is not None else "default (250)"}
    with scratch_dir("gz-live-") as base:
        if args.scale:
            results["scale"] = measure_scale(args, base / "scale")
            print(json.dumps(results, indent=2))
            return
        if not args.page_only:
            results["sse"] = measure_sse(args, base / "sse")
        if args.page or args.page_only:
            results["page"] = measure_page(args, base / "page")
    text = json.dumps(results, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
