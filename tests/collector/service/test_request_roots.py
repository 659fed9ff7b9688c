"""Which roots a page may wait for before their first event, and which it may not."""

from __future__ import annotations

import os
from pathlib import Path

from gz_ia.collector.service.request_roots import root_to_come

STRANGER = 65534


def test_a_harness_to_come_in_a_directory_of_ones_own_may_be_waited_for(tmp_path: Path) -> None:
    """An existing .harness, or one not made yet in one's own directory, may; nothing else may."""
    uid = os.getuid()
    assert root_to_come(str(tmp_path / ".harness"), uid) is None  # not made yet
    (tmp_path / ".harness").mkdir()
    assert root_to_come(str(tmp_path / ".harness"), uid) is None  # made, no event yet
    problem = root_to_come(str(tmp_path / "elsewhere"), uid)
    assert problem is not None and "nor a .harness to come" in problem
    assert root_to_come(str(tmp_path), uid) is not None  # an existing directory that is no root
    assert root_to_come(str(tmp_path / "missing" / ".harness"), uid) is not None  # no such directory
    assert root_to_come(str(tmp_path / ".harness"), uid + 1) is not None  # another uid's
    assert root_to_come(str(tmp_path / "other" / ".harness"), STRANGER if uid != STRANGER else 0) is not None
