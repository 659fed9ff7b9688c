"""The README's one-command scripts, for real: the run command keeps what the test command installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gz_ia.collector.cli._common import version

REPO = Path(__file__).resolve().parents[2]


def test_scripts_collector_keeps_the_mcp_and_otel_extras() -> None:
    """After ``scripts/collector`` syncs the workspace, the [mcp] and [otel] extras that
    ``scripts/test`` installed are still there, so ``gz-ia mcp`` and ``gz-ia export otel`` work
    (an exact ``uv sync`` without ``--all-extras`` uninstalled them)."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("GZ_IA_")}
    result = subprocess.run(
        [str(REPO / "scripts" / "collector"), "--version"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert version() in result.stdout
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import mcp.server, opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http; "
            "import gz_ia.collector.mcp.server, gz_ia.collector.otel.export",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
