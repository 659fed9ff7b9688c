"""The reader's tests read what a real writer wrote: a synchronous one rotating at 4 KiB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.collector.storage.test_rotation import Harness


@pytest.fixture(name="harness")
def _harness(tmp_path: Path) -> Any:
    """A synchronous writer rotating at 4 KiB (about 25 events per segment)."""
    made = Harness(tmp_path)
    yield made
    made.writer.close()
