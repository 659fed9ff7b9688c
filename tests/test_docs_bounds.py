"""The reference pages stay references: docs/performance.md says what is measured, how to run it, the
current figures and the limits, in at most 250 lines (a run log belongs in ``bench/results/``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_performance_md_is_at_most_250_lines() -> None:
    lines = (REPO / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"docs/performance.md has {len(lines)} lines; keep it a reference of at most 250"
