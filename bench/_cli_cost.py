"""What one ``gz-ia session log`` and one ``gz-ia hook claude-code`` cost, as a ratio to ``python -I -c pass``.

Both run once per event (from scripts, and before and after every tool call of Claude Code), so
their wall time is mostly the interpreter's start and the imports. Each is run as a fresh process,
interleaved with the bare interpreter so that a busy machine slows them alike; the figures are the
medians. The target is at most 3x the bare interpreter.

``python -m bench._cli_cost SOCKET ROOT RUNS`` prints the result as JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_GZ_IA = Path(sys.executable).with_name("gz-ia")


def _time(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> float:
    started = time.perf_counter()
    subprocess.run(argv, input=stdin, env=env, capture_output=True, check=True)
    return time.perf_counter() - started


def cli_cost(socket: Path, root: Path, runs: int) -> dict[str, float]:
    """Median wall times (ms) and their ratios to the bare interpreter, over ``runs`` rounds."""
    with tempfile.TemporaryDirectory(prefix="gzcli") as spool:
        env = {**os.environ, "GZ_IA_SOCKET": str(socket), "GZ_IA_ROOT": str(root), "GZ_IA_SPOOL_DIR": spool}
        bare: list[float] = []
        log: list[float] = []
        hook: list[float] = []
        for index in range(runs):
            bare.append(_time([sys.executable, "-I", "-c", "pass"], env))
            stage = "READ" if index % 2 == 0 else "FINISH"
            log.append(_time([str(_GZ_IA), "session", "log", "bench-cli", "--action", "a", "--stage", stage,
                              "--agent", "bench", "-q"], env))  # fmt: skip
            event = "PreToolUse" if index % 2 == 0 else "PostToolUse"
            payload = {
                "session_id": "bench-hook",
                "hook_event_name": event,
                "cwd": str(root.parent),
                "tool_name": "Bash",
                "tool_use_id": f"toolu_{index // 2}",
                "tool_input": {"command": "ls"},
            }
            hook.append(_time([str(_GZ_IA), "hook", "claude-code"], env, json.dumps(payload).encode()))
    base = statistics.median(bare)
    return {
        "python_ms": base * 1000,
        "session_log_ms": statistics.median(log) * 1000,
        "hook_ms": statistics.median(hook) * 1000,
        "session_log_ratio": statistics.median(log) / base,
        "hook_ratio": statistics.median(hook) / base,
    }


if __name__ == "__main__":
    print(json.dumps(cli_cost(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])), indent=2))
