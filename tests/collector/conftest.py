"""Fixtures of the collector's in-process tests (Writer and Ingest on a real directory)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(name="harness")
def _harness(tmp_path: Path) -> Path:
    """An empty session root (``.harness``) for a Writer running in the test's own process."""
    root = tmp_path / ".harness"
    root.mkdir()
    return root
