"""Agent-side cost: CPU time per event inside the agent process, for each way of logging.

Run as ``python -m bench._agent_cpu VARIANT EVENTS SOCKET ROOT OUTFILE [--profile FILE]``, one fresh
process per variant so that nothing is shared between them:

* ``client``: ``gz_ia.client.Client.log`` to a running collector, then ``flush()``; the process CPU
  time (``time.process_time``, every thread) includes the sender thread that encodes batches and
  reads verdicts. ``thread_cpu`` is the calling thread's share alone;
* ``null``: ``gz_ia.client.NullClient.log`` with the same arguments;
* ``null_scope``: an action scope (``with scope.action(name):``, entry and exit) in a session of the
  null client, as an agent runs with ``GZ_IA_DISABLED=1``: CPU per scope, reported as per event;
* ``logging``: the standard library's ``logging`` writing an equivalent JSON record to a file, with a
  ``json.dumps`` formatter: what an agent would do without gz-ia.

The same pre-built argument tuples are used by every variant, so only the logging call is measured.
"""

from __future__ import annotations

import cProfile
import json
import logging
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ._load import LogCall, log_all, log_calls


class JsonFormatter(logging.Formatter):
    """One JSON object per record with the LogEvent's fields, as a hand-rolled agent logger would."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one JSON line (no trailing newline: the handler adds it)."""
        fields: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "session_id": record.session_id,  # type: ignore[attr-defined]  # set through extra=
            "parent_session_id": record.parent_session_id,  # type: ignore[attr-defined]
            "action": record.action,  # type: ignore[attr-defined]
            "stage": record.stage,  # type: ignore[attr-defined]
            "status": "OK",
            "agent": "claude",
            "role": "benchmark-runner",
        }
        if record.duration_ms is not None:  # type: ignore[attr-defined]
            fields["duration_ms"] = record.duration_ms  # type: ignore[attr-defined]
        return json.dumps(fields)


def _calls(events: int) -> list[LogCall]:
    # Fresh sessions in every process: runs share one collector and root, and a cycle left open by
    # an earlier run would make this run's READ a backward transition.
    sessions = [f"agent-cpu-{os.getpid()}-{s:03d}" for s in range(10)]
    return log_calls(sessions, events // len(sessions))


def measure(
    variant: str, events: int, socket_path: str, root: str, workdir: Path, profiler: cProfile.Profile | None = None
) -> dict[str, float]:
    """Log ``events`` events with ``variant`` and return CPU seconds per event (process and thread).

    ``profiler``, when given, is enabled around the logging loop only (the calling thread: cProfile
    does not see the sender thread, whose share is process CPU minus ``thread_cpu``).
    """
    calls = _calls(events)
    events = len(calls)
    if variant == "logging":
        logger = logging.getLogger("bench.agent")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        handler = logging.FileHandler(workdir / "agent.log")
        handler.setFormatter(JsonFormatter())
        logger.addHandler(handler)
        cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        info = logger.info
        for sid, parent, action, stage, duration in calls:
            info(
                "stage event",
                extra={
                    "session_id": sid,
                    "parent_session_id": parent,
                    "action": action,
                    "stage": stage,
                    "duration_ms": duration,
                },
            )
        handler.close()
        if profiler is not None:
            profiler.disable()
    elif variant == "null_scope":
        import gz_ia.client as gz

        actions = [action for _, _, action, _, _ in calls]
        with gz.session("agent-cpu-null", agent="claude", client=gz.NullClient()) as scope:
            open_action = scope.action
            cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
            if profiler is not None:
                profiler.enable()
            for name in actions:
                with open_action(name):
                    pass
            if profiler is not None:
                profiler.disable()
    else:
        from gz_ia.client import Client, NullClient

        client: Client | NullClient
        if variant == "client":
            client = Client(socket_path=socket_path, root=root, max_events=events + 1, max_bytes=1 << 30)
        else:
            client = NullClient()
        cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        log_all(client.log, calls)
        if profiler is not None:
            profiler.disable()
        if not client.flush(timeout=120):
            raise RuntimeError(f"flush timed out: {client.stats()}")
        stats = client.stats()
        if variant == "client" and stats.accepted != events:
            raise RuntimeError(f"not every event was accepted: {stats}")
    cpu, thread, wall = time.process_time() - cpu0, time.thread_time() - thread0, time.perf_counter() - wall0
    return {
        "events": events,
        "cpu_per_event_us": cpu / events * 1e6,
        "thread_cpu_per_event_us": thread / events * 1e6,
        "wall_seconds": wall,
    }


def main(argv: list[str]) -> None:
    """Entry point of the measuring subprocess; writes its result as JSON to OUTFILE."""
    variant, events, socket_path, root, out = argv[:5]
    profile_to = argv[6] if len(argv) > 6 and argv[5] == "--profile" else None
    workdir = Path(out).parent
    if profile_to:
        profiler = cProfile.Profile()
        result = measure(variant, int(events), socket_path, root, workdir, profiler)
        profiler.dump_stats(profile_to)
    else:
        result = measure(variant, int(events), socket_path, root, workdir)
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
