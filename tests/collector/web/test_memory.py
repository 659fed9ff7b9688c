"""The web view's sessions from the collector's memory agree with the reader's from the files."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gz_ia.collector import reading
from gz_ia.collector.web.memory import summaries_in_memory

_spec = importlib.util.spec_from_file_location(
    "rotation_harness", Path(__file__).parents[1] / "storage" / "test_rotation.py"
)
assert _spec is not None and _spec.loader is not None
_rotation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rotation)


@pytest.fixture(name="harness")
def _harness(tmp_path: Path) -> Any:
    made = _rotation.Harness(tmp_path)
    yield made
    made.writer.close()


def test_memory_summaries_match_the_files(harness: Any) -> None:
    """Each session held in memory is summarised as list_sessions summarises its files, and
    list_sessions takes ``known`` summaries instead of reading those files."""
    harness.emit("root", 60)  # rotates: several segments
    harness.emit("child", 3, failed=True, parent="root")
    harness.emit("grandchild", 2, parent="child")
    harness.writer.flush()
    from_files = {item.session_id: item for item in reading.list_sessions(harness.root)}
    in_memory = summaries_in_memory(harness.writer.roots, os.path.realpath(harness.root))
    assert set(in_memory) == set(from_files) == {"root", "child", "grandchild"}
    for session_id, summary in in_memory.items():
        assert msgspec.to_builtins(summary) == msgspec.to_builtins(from_files[session_id]), session_id
    planted = msgspec.structs.replace(in_memory["child"], agent="from-memory")
    listed = {item.session_id: item for item in reading.list_sessions(harness.root, known={"child": planted})}
    assert listed["child"].agent == "from-memory"
    assert listed["root"] == from_files["root"]
    tree = reading.session_tree(harness.root, "root", known={"child": planted})
    assert tree.children[0].summary.agent == "from-memory"
    assert summaries_in_memory(harness.writer.roots, "/elsewhere") == {}
