"""A tree is found from its root even when the sessions between the root and a subagent never logged:
each subagent's events name the root of their tree (``root_session_id``), in-process and across
processes. Real collector, real agent programs in subprocesses, the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

_BOUND = 60.0
"""Safety bound (seconds) on a subprocess; a passing run needs a fraction of it."""

GRANDCHILD = """
import gz_ia.client as gz

with gz.session("{session}", agent="grandchild") as scope:
    with scope.action("work"):
        pass
"""

ACROSS_PROCESSES = """
import subprocess, sys
import gz_ia.client as gz

with gz.session("{root}", agent="root") as root:
    if {root_logs}:
        with root.action("plan"):
            pass
    with root.subagent("middle", session_id="{middle}") as middle:
        subprocess.run([sys.executable, "-c", {child!r}], env=middle.child_env(), check=True)
"""

IN_PROCESS = """
import gz_ia.client as gz

with gz.session("{root}", agent="root") as root:
    if {root_logs}:
        with root.action("plan"):
            pass
    with gz.session("{middle}", agent="middle"):
        with gz.session(agent="grandchild", session_id="{grandchild}") as grandchild:
            with grandchild.action("work"):
                pass
"""

ONE_SHOT = """
import subprocess, sys
import gz_ia.client as gz

with gz.session("{root}", agent="root") as root:
    with root.subagent("middle", session_id="{middle}") as middle:
        for stage in ("READ", "FINISH"):
            command = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()", "session", "log",
                       "{grandchild}", "--action", "work", "--stage", stage, "--agent", "grandchild", "-q"]
            subprocess.run(command, env=middle.child_env(), check=True)
"""


def _run_agent(collector: Any, program: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", program], env=collector.env, capture_output=True, text=True, timeout=_BOUND, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]


def _agent(how: str, *, root: str, middle: str, grandchild: str, root_logs: bool) -> str:
    if how == "processes":
        child = GRANDCHILD.format(session=grandchild)
        return ACROSS_PROCESSES.format(root=root, middle=middle, child=child, root_logs=root_logs)
    if how == "one-shot":
        return ONE_SHOT.format(root=root, middle=middle, grandchild=grandchild)
    return IN_PROCESS.format(root=root, middle=middle, grandchild=grandchild, root_logs=root_logs)


def _shape(node: dict[str, Any]) -> tuple[str, int, list[Any]]:
    return (node["session_id"], node["events"], [_shape(child) for child in node["children"]])


@pytest.mark.parametrize("how", ["processes", "in-process", "one-shot"])
def test_the_root_of_a_tree_whose_middle_never_logged_holds_the_whole_tree(collector: Any, how: str) -> None:
    """R and M never log, G (a subagent of M, itself a subagent of R) does: from R, the tree holds M
    and G, R and M marked as having no events of their own; G's events are R's tree's."""
    _run_agent(collector, _agent(how, root="r", middle="m", grandchild="g", root_logs=False))
    assert set(collector.all_sessions()) == {"g"}
    line = collector.session_lines("g")[0]
    assert (line["parent_session_id"], line["root_session_id"]) == ("m", "r")

    tree = collector.gz_ia("session", "tree", "r", "--json")
    assert tree.returncode == 0, tree.stderr
    assert _shape(json.loads(tree.stdout)) == ("r", 0, [("m", 0, [("g", 2, [])])])
    text = collector.gz_ia("session", "tree", "r", "--color", "never")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) == 3, text.stdout
    assert lines[0].startswith("r ") and "(no events of its own)" in lines[0]
    assert "└── m " in lines[1] and "(no events of its own)" in lines[1]
    assert "└── g " in lines[2] and "(2 events)" in lines[2]
    # The middle session's own tree is still its own (M under nothing, G under M).
    middle = collector.gz_ia("session", "tree", "m", "--json")
    assert _shape(json.loads(middle.stdout)) == ("m", 0, [("g", 2, [])])

    logs = collector.gz_ia("session", "logs", "r", "--tree", "--json")
    assert logs.returncode == 0, logs.stderr
    assert [json.loads(item)["session_id"] for item in logs.stdout.splitlines()] == ["g", "g"]

    view = collector.gz_ia("session", "view", "r", "--tree", "-o", "-")
    assert view.returncode == 0, view.stderr
    assert "grandchild" in view.stdout

    listed = collector.gz_ia("sessions", "--json")
    assert listed.returncode == 0, listed.stderr
    (summary,) = [json.loads(item) for item in listed.stdout.splitlines()]
    assert (summary["session_id"], summary["parent_session_id"], summary["root_session_id"]) == ("g", "m", "r")


@pytest.mark.parametrize("how", ["processes", "in-process"])
def test_a_root_that_logged_holds_the_subagents_of_a_middle_that_did_not(collector: Any, how: str) -> None:
    """R logs, M does not, G does: G sits under M under R; R keeps its own events."""
    _run_agent(collector, _agent(how, root="r", middle="m", grandchild="g", root_logs=True))
    tree = collector.gz_ia("session", "tree", "r", "--json")
    assert tree.returncode == 0, tree.stderr
    assert _shape(json.loads(tree.stdout)) == ("r", 2, [("m", 0, [("g", 2, [])])])
    logs = collector.gz_ia("session", "logs", "r", "--tree", "--json")
    assert sorted(json.loads(item)["session_id"] for item in logs.stdout.splitlines()) == ["g", "g", "r", "r"]
    # R is the root of its own tree: its events carry no root, nor do a root's direct subagents'.
    assert "root_session_id" not in collector.session_lines("r")[0]
