"""Listing sessions and their tree: parents, failures, open actions, across rotations."""

from __future__ import annotations

from typing import Any

import pytest

from gz_ia.collector import reading as reader


def test_list_sessions_and_tree_summarise_parents_failures_and_open_actions(harness: Any) -> None:
    """list_sessions reports agent, counts and parents; session_tree nests subagents under their parent."""
    harness.emit("root", 6)
    harness.emit("child", 3, failed=True, parent="root")
    harness.emit("grandchild", 2, parent="child")
    harness.emit("other", 3)
    harness.writer.close()
    summaries = {item.session_id: item for item in reader.list_sessions(harness.root)}
    assert set(summaries) == {"root", "child", "grandchild", "other"}
    assert summaries["child"].failures == 1
    assert summaries["child"].parent_session_id == "root"
    assert summaries["grandchild"].open_actions == 1
    assert summaries["root"].events == 6
    assert summaries["root"].agent == "claude"
    tree = reader.session_tree(harness.root, "root")
    assert [(depth, node.session_id) for depth, node in tree.walk()] == [(0, "root"), (1, "child"), (2, "grandchild")]
    assert tree.children[0].status == "failed"
    assert tree.children[0].children[0].status == "running"
    with pytest.raises(reader.SessionNotFound):
        reader.session_tree(harness.root, "missing")


def test_list_sessions_counts_across_rotations_without_rescanning_archives(harness: Any) -> None:
    """Summaries come from the checkpoint plus the active tail: wrecked archives do not change them."""
    for _ in range(30):
        harness.emit("s1", 5, failed=True)
    harness.writer.close()
    for name in harness.names():
        if name.startswith("s1.events.0"):
            (harness.sessions_dir() / name).write_bytes(b"x\n")
    (summary,) = reader.list_sessions(harness.root)
    assert summary.events == 150
    assert summary.failures == 150 // 3
    assert summary.segments == harness.rotated + 1
