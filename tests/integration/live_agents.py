"""The live_agent fixture as a real process for the live tests: commands on stdin, ``done`` after each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

AGENT = Path(__file__).resolve().parents[1] / "fixtures" / "agents" / "live_agent.py"


class Agent:
    """``tests/fixtures/agents/live_agent.py SESSION`` run against ``collector`` (see its docstring)."""

    def __init__(self, collector: Any, session: str) -> None:
        self.session = session
        self.proc = subprocess.Popen(
            [sys.executable, str(AGENT), session], env=collector.env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def do(self, command: str) -> None:
        """Send one command and wait until what it logged is written."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
