"""The answers beyond records: `gz-ia sessions --hung`, `gz-ia session why`, `gz-ia session diff`.

Each session is written by the Python client in a process of its own, as an agent would: the
process ends with its cycle still open, or with a failure in a subagent it spawned.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

pytestmark = pytest.mark.needs_collector


def run_agent(collector: Any, body: str) -> None:
    """Run ``body`` in a real Python process with a client ``client`` of the collector, then flush."""
    script = "import time\nfrom gz_ia.client import Client, session\n"
    script += "client = Client(socket_path=__import__('os').environ['GZ_IA_SOCKET'])\n"
    script += textwrap.dedent(body)
    script += "\nassert client.flush(10)\nclient.close()\n"
    done = subprocess.run(
        [sys.executable, "-c", script], env=collector.env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_hung_lists_a_cycle_a_process_left_open(collector: Any) -> None:
    """A READ without FINISH, older than --after, is listed with its action, stage and age (the open
    cycle it began inside is not: activity stopped in the inner one); a finished session and a cycle
    open for less than --after are not."""
    run_agent(
        collector,
        """
        with session("stuck-1", agent="claude", client=client) as agent:
            agent.log("session", "READ")  # a container: open while the agent works inside it
            time.sleep(0.01)
            agent.log("wait for build", "READ")
        with session("done-1", agent="codex", client=client) as agent:
            with agent.action("edit"):
                pass
        """,
    )
    time.sleep(3.2)  # fresh-1, opened after it, keeps 3 s of slack on a loaded machine
    run_agent(
        collector,
        """
        with session("fresh-1", agent="claude", client=client) as agent:
            agent.log("just started", "PENDING")
        """,
    )
    listed = collector.gz_ia("sessions", "--hung", "--after", "3s", "--json")
    assert listed.returncode == 0, listed.stderr
    lines = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [line["session_id"] for line in lines] == ["stuck-1"]
    (line,) = lines
    every = json.loads(collector.gz_ia("sessions", "--json").stdout.splitlines()[0])
    assert set(line) == {*every, "hung"}  # the object of `gz-ia sessions --json`, plus `hung`
    (cycle,) = line["hung"]
    assert set(cycle) == {"action", "stage", "open_for_s"}
    assert (cycle["action"], cycle["stage"]) == ("wait for build", "READ")
    assert 3.0 <= cycle["open_for_s"] < 60
    # The default (5m) lists none of them; the plain text names the action and the session.
    assert collector.gz_ia("sessions", "--hung", "--json").stdout == ""
    text = collector.gz_ia("sessions", "--hung", "--after", "0s")
    assert text.returncode == 0, text.stderr
    assert "wait for build" in text.stdout and "stuck-1" in text.stdout and "fresh-1" in text.stdout
    assert "done-1" not in text.stdout
    assert collector.gz_ia("sessions", "--hung", "--after", "soon").returncode == 2
    # The checkpoint carries where the session waits, so that --hung reads no session file.
    collector.stop()
    checkpoint = json.loads((collector.root / "state" / "stuck-1.session.json").read_text())
    assert [(action, cycle) for action, cycle, _since in checkpoint["open_since"]] == [
        ("session", None),
        ("wait for build", None),
    ]
    assert checkpoint["latest_begun"] == checkpoint["open_since"][1][2]


SUBAGENT = """
import os, time
from gz_ia.client import Client, session
client = Client(socket_path=os.environ["GZ_IA_SOCKET"])
with session("why-child", agent="codex", role="tester", client=client) as child:  # parent: from the env
    with child.action("run tests") as act:
        act.fail("3 tests failed")
    time.sleep(0.01)
    with child.action("rerun") as act:
        act.set(input_tokens=7, output_tokens=3)  # the plain key family, as hand-written attrs have it
assert client.flush(10)
client.close()
"""

WHY_RUN = f"""
import subprocess, sys
with session("why-root", agent="claude", client=client) as root:
    with root.action("plan"):
        time.sleep(0.01)
    # The subagent is another process, told its parent through the environment.
    subprocess.run([sys.executable, "-c", {SUBAGENT!r}], env=root.child_env(), check=True)
    with root.action("retry") as act:
        act.usage(input_tokens=100, output_tokens=20, cost_usd=0.5)
"""


def test_why_finds_the_subagents_failure_and_what_came_after(collector: Any) -> None:
    run_agent(collector, WHY_RUN)
    answered = collector.gz_ia("session", "why", "why-root", "--json")
    assert answered.returncode == 0, answered.stderr
    answer = json.loads(answered.stdout)
    failure = answer["first_failure"]
    assert {key: failure[key] for key in ("session_id", "action", "error")} == {
        "session_id": "why-child",
        "action": "run tests",
        "error": "3 tests failed",
    }
    assert failure["timestamp"].endswith("Z")
    assert answer["chain"] == ["why-root", "why-child"]
    after = answer["after"]
    assert (after["actions"], after["tokens"], after["cost_usd"]) == (2, 130, 0.5)
    assert after["duration_ms"] >= 10
    text = collector.gz_ia("session", "why", "why-root")
    assert text.returncode == 0
    assert "run tests" in text.stdout and "why-root > why-child" in text.stdout


def test_why_of_a_tree_that_never_failed_exits_1_with_a_sentence(collector: Any) -> None:
    run_agent(
        collector,
        """
        with session("fine-root", agent="claude", client=client) as agent:
            with agent.action("plan"):
                pass
        """,
    )
    answered = collector.gz_ia("session", "why", "fine-root", "--json")
    assert answered.returncode == 1
    assert answered.stdout == ""
    assert "no cycle of session fine-root or its subagents failed" in answered.stderr
    assert collector.gz_ia("session", "why", "nobody").returncode == 1


def test_diff_aligns_two_runs_and_names_where_they_part(collector: Any) -> None:
    run_agent(
        collector,
        """
        def run(session_id, agent, tools, fail=None):
            with session(session_id, agent=agent, client=client) as scope:
                for tool in tools:
                    with scope.action("tool call") as act:
                        act.set(tool=tool)
                        if tool == fail:
                            act.fail("exit code 1")
        run("run-a", "claude", ["Read", "Grep", "Bash"])
        run("run-b", "codex", ["Read", "Grep", "Edit", "Bash"], fail="Bash")
        """,
    )
    answered = collector.gz_ia("session", "diff", "run-a", "run-b", "--json")
    assert answered.returncode == 0, answered.stderr
    answer = json.loads(answered.stdout)
    divergence = answer["first_divergence"]
    assert divergence["index"] == 2
    assert divergence["a"] is None
    assert (divergence["b"]["action"], divergence["b"]["tool"]) == ("tool call", "Edit")
    assert [row["tag"] for row in answer["cycles"]] == ["=", "=", "+", "="]
    totals = answer["totals"]
    assert set(totals["a"]) == {"actions", "failed", "duration_ms", "tokens", "cost_usd"}
    assert (totals["a"]["actions"], totals["a"]["failed"]) == (3, 0)
    assert (totals["b"]["actions"], totals["b"]["failed"]) == (4, 1)
    same = json.loads(collector.gz_ia("session", "diff", "run-a", "run-a", "--json").stdout)
    assert same["first_divergence"] is None
    text = collector.gz_ia("session", "diff", "run-a", "run-b")
    assert "first divergence at step 2" in text.stdout


def scrape(collector: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The collector's /metrics, parsed by Prometheus's own client parser."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{collector.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.shards(1, 2)
def test_metrics_give_the_oldest_open_cycle_by_agent_and_the_hung_count(make_collector: Any) -> None:
    """`--hung-after 3s`: a cycle a process left open counts as hung once 3 seconds old (the margin a
    loaded machine needs between the event and the first scrape); the oldest
    open cycle's age is by agent; a finished cycle is in neither. Sharded, one share reads the root
    for all, so the front's sum counts each cycle once."""
    collector = make_collector("--hung-after", "3s")
    run_agent(
        collector,
        """
        with session("stuck-m", agent="claude", client=client) as agent:
            agent.log("long tool call", "PENDING")
        with session("done-m", agent="codex", client=client) as agent:
            with agent.action("edit"):
                pass
        """,
    )
    young = scrape(collector)
    assert young[("gzia_hung_actions", ())] == 0
    assert 0 <= young[("gzia_oldest_open_action_seconds", (("agent", "claude"),))] < 3
    time.sleep(3.2)
    old = scrape(collector)
    assert old[("gzia_hung_actions", ())] == 1
    assert old[("gzia_oldest_open_action_seconds", (("agent", "claude"),))] >= 3
    assert not any(
        name == "gzia_oldest_open_action_seconds" and labels == (("agent", "codex"),) for name, labels in old
    )
