"""What one ``gz-ia session log`` and one ``gz-ia hook claude-code|codex|gemini`` cost, as a ratio to
``python -I -c pass``.

They run once per event (from scripts, and before and after every tool call of the agents), so
their wall time is mostly the interpreter's start and the imports. They are measured as a user runs
them: from a virtual environment holding the two distributions built as wheels and installed with
their runtime dependencies only (no editable ``.pth`` files, none of the workspace's dev tools such
as ``typing_extensions``, which msgspec imports when it finds it), with bytecode compiled. That
environment is cached under ``bench/.cache/`` and rebuilt when a source or a pyproject changes.

Each command is run as a fresh process, interleaved with the bare interpreter of the same
environment so that a busy machine slows them alike; the figures are the medians. The target is at
most 3x the bare interpreter.

``python -m bench._cli_cost SOCKET ROOT RUNS [--workspace]`` prints the result as JSON
(``--workspace``: the workspace's own ``gz-ia`` instead, editable and with the dev packages).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

_REPO: Final = Path(__file__).resolve().parent.parent
_CACHE: Final = _REPO / "bench" / ".cache" / "cli-venv"
_SOURCES: Final = ("client/pyproject.toml", "collector/pyproject.toml", "client/src", "collector/src")


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for name in _SOURCES:
        top = _REPO / name
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(_REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def user_install(cache: Path = _CACHE) -> Path:
    """The ``bin`` directory of a virtual environment set up as a user's install; built if missing or stale.

    The wheels are built with ``uv build`` and installed non-editable with ``uv pip install
    --compile-bytecode`` into a ``uv venv`` of the interpreter running this (no pip, no setuptools).
    """
    stamp = cache / "sources.sha256"
    digest = _sources_digest()
    venv = cache / "venv"
    if stamp.exists() and stamp.read_text() == digest and (venv / "bin" / "gz-ia").exists():
        return venv / "bin"
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    base = getattr(sys, "_base_executable", sys.executable)
    _uv("build", "--all-packages", "--wheel", "-q", "-o", str(cache / "dist"))
    _uv("venv", "-q", "--python", base, str(venv))
    wheels = sorted(str(path) for path in (cache / "dist").glob("*.whl"))
    _uv("pip", "install", "-q", "--python", str(venv / "bin" / "python"), "--compile-bytecode", *wheels)
    stamp.write_text(digest)
    return venv / "bin"


def _uv(*args: str) -> None:
    subprocess.run(["uv", *args], capture_output=True, check=True, cwd=_REPO)


def _time(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> float:
    started = time.perf_counter()
    subprocess.run(argv, input=stdin, env=env, capture_output=True, check=True)
    return time.perf_counter() - started


def cli_cost(socket: Path, root: Path, runs: int, *, bin_dir: Path | None = None) -> dict[str, float]:
    """Median wall times (ms) and their ratios to the bare interpreter, over ``runs`` rounds.

    Args:
        bin_dir: where ``python`` and ``gz-ia`` are; default :func:`user_install`.
    """
    bin_dir = bin_dir or user_install()
    python, gz_ia = str(bin_dir / "python"), str(bin_dir / "gz-ia")
    with tempfile.TemporaryDirectory(prefix="gzcli") as spool:
        env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env |= {"GZ_IA_SOCKET": str(socket), "GZ_IA_ROOT": str(root), "GZ_IA_SPOOL_DIR": spool}
        bare: list[float] = []
        log: list[float] = []
        hook: list[float] = []
        agent_hooks: dict[str, list[float]] = {"codex": [], "gemini": []}
        for index in range(runs):
            bare.append(_time([python, "-I", "-c", "pass"], env))
            stage = "READ" if index % 2 == 0 else "FINISH"
            log.append(_time([gz_ia, "session", "log", "bench-cli", "--action", "a", "--stage", stage,
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
            hook.append(_time([gz_ia, "hook", "claude-code"], env, json.dumps(payload).encode()))
            codex = {**payload, "session_id": "bench-codex", "model": "gpt-bench"}
            agent_hooks["codex"].append(_time([gz_ia, "hook", "codex"], env, json.dumps(codex).encode()))
            gemini = {
                "session_id": "bench-gemini",
                "hook_event_name": "BeforeTool" if index % 2 == 0 else "AfterTool",
                "cwd": str(root.parent),
                "timestamp": "2026-12-01T23:39:13.000Z",
                "tool_name": "run_shell_command",
                "tool_input": {"command": "ls"},
            }
            agent_hooks["gemini"].append(_time([gz_ia, "hook", "gemini"], env, json.dumps(gemini).encode()))
    base = statistics.median(bare)
    cost = {
        "python_ms": base * 1000,
        "session_log_ms": statistics.median(log) * 1000,
        "hook_ms": statistics.median(hook) * 1000,
        "session_log_ratio": statistics.median(log) / base,
        "hook_ratio": statistics.median(hook) / base,
    }
    for agent, times in agent_hooks.items():
        cost[f"{agent}_hook_ms"] = statistics.median(times) * 1000
        cost[f"{agent}_hook_ratio"] = statistics.median(times) / base
    return cost


if __name__ == "__main__":
    workspace = Path(sys.executable).parent if "--workspace" in sys.argv[4:] else None
    print(json.dumps(cli_cost(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), bin_dir=workspace), indent=2))
