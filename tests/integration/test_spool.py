"""When the collector stays away: the client spools to disk, reports losses, and the collector adopts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from tests.conftest import spool_dir, wait_for

# The write and delivery path: run against one process and against a sharded collector.
pytestmark = pytest.mark.shards(1, 2)


def test_events_past_the_memory_bound_are_spooled_then_delivered_once(make_collector: Any) -> None:
    """With no collector, events beyond the memory bound go to disk; all arrive once it starts."""
    collector = make_collector(start=False)
    client = collector.client(max_events=50)
    for n in range(600):
        client.log(session_id="spooled", action="work", stage="PENDING", agent="agy", attrs={"n": n})
        if n % 10 == 0:
            # An agent does other work between events: the sender thread gets to run, and spills
            # the overflow long before the queue reaches the bound past which it drops.
            time.sleep(0.01)
    assert client.flush(timeout=0.5) is False
    assert list(spool_dir().glob("*.spool")), "the overflow went to the disk spool"
    assert client.stats().dropped == 0
    collector.start()
    assert client.flush(timeout=60)
    client.close()
    lines = collector.session_lines("spooled")
    assert sorted(line["attrs"]["n"] for line in lines) == list(range(600))
    assert [line["seq"] for line in lines] == list(range(1, 601))
    assert not list(spool_dir().glob("*.spool")), "acknowledged segments are deleted"


def test_past_the_spool_bound_losses_are_counted_and_written_into_the_session(make_collector: Any) -> None:
    """Dropped events are never silent: a READ + FINISH FAILED 'gz-ia.dropped' pair lands in the session."""
    collector = make_collector(start=False)
    client = collector.client(max_events=20, max_spool_bytes=16_384)
    for n in range(3_000):
        client.log(session_id="lossy", action="work", stage="PENDING", agent="agy", attrs={"n": n})
    collector.start()
    assert client.flush(timeout=60)
    stats = client.stats()
    client.close()
    assert stats.dropped > 0
    lines = collector.session_lines("lossy")
    notices = [line for line in lines if line["action"].startswith("gz-ia.dropped")]
    assert [(line["stage"], line["status"]) for line in notices][:2] == [("READ", "OK"), ("FINISH", "FAILED")]
    reported = sum(line["attrs"]["dropped"] for line in notices if line["stage"] == "FINISH")
    assert reported == stats.dropped
    assert all(line["agent"] == "gz-ia" and "dropped" in line["error"] for line in notices if line["stage"] == "FINISH")
    delivered = [line["attrs"]["n"] for line in lines if line["action"] == "work"]
    assert len(delivered) + stats.dropped == 3_000
    assert len(set(delivered)) == len(delivered)
    assert delivered[-1] == 2_999, "the oldest events are the ones dropped"
    assert collector.metric("gzia_client_dropped_events_total") == stats.dropped


AGENT = """
import sys, time
from gz_ia.client import Client
client = Client(max_events=10)
for n in range(int(sys.argv[1])):
    client.log(session_id="orphan", action="work", stage="PENDING", agent="agy", attrs={"n": n})
    time.sleep(0.001)
"""


def test_a_client_that_exits_before_delivering_is_adopted_by_the_collector(make_collector: Any) -> None:
    """An agent that exits while no collector runs leaves a spool; the next collector delivers it once."""
    collector = make_collector(start=False)
    environment = {**collector.env, "GZ_IA_EXIT_TIMEOUT": "0.2"}
    subprocess.run([sys.executable, "-c", AGENT, "250"], env=environment, check=True, timeout=60)
    segments = list(spool_dir().glob("*.spool"))
    assert segments, "what could not be delivered at exit was spooled"
    saved = spool_dir().parent / "saved"
    shutil.copytree(spool_dir(), saved)
    collector.start()
    lines = collector.session_lines("orphan")
    assert sorted(line["attrs"]["n"] for line in lines) == list(range(250))
    assert not list(spool_dir().glob("*.spool")) and not list(spool_dir().glob("*.lock"))
    assert collector.metric("gzia_spool_adopted_events_total") == 250
    # A crash between writing and deleting leaves the spool behind: adopting it again adds nothing.
    collector.stop()
    shutil.rmtree(spool_dir())
    shutil.copytree(saved, spool_dir())
    collector.start()
    again = collector.session_lines("orphan")
    assert len(again) == 250
    assert collector.metric("gzia_events_duplicate_total") == 250


FLOOD = """
import sys, time
from gz_ia.client import Client
client = Client(max_events=10)
if sys.argv[2] == "in-flight":  # welcomed first: then the collector freezes with events in flight
    client.log(session_id="warm", action="up", stage="READ", agent="agy")
    assert client.flush(20)
    print("welcomed", flush=True)
    sys.stdin.readline()
for n in range(int(sys.argv[1])):
    client.log(session_id="orphan", action="work", stage="PENDING", agent="agy", attrs={"n": n})
    if n % 10 == 9:
        # Wait until the sender thread has spilled the queue: faster, it would have to drop (by design),
        # and a loaded machine may not run the sender thread within any fixed pause.
        deadline = time.monotonic() + 30
        while client.stats().queued > 10 and time.monotonic() < deadline:
            time.sleep(0.001)
"""


@pytest.mark.parametrize("freeze", ["in-flight", "before-welcome"])
def test_events_in_flight_when_the_collector_froze_are_adopted_with_the_rest(make_collector: Any, freeze: str) -> None:
    """The collector stops answering (SIGSTOP) while events are in flight; the agent spills what
    follows, then exits and spools the unanswered window after the spilled segments. The next
    collector adopts every event: the spool is applied in producer order, not segment order, or the
    window's events would come after higher numbers of the same session and pass as duplicates.

    Frozen before it welcomed the agent, nothing is in flight (batches wait for the welcome): the
    agent must wake its sender thread to spill, not drop past four times its bound."""
    collector = make_collector()
    assert collector.proc is not None
    environment = {**collector.env, "GZ_IA_EXIT_TIMEOUT": "0.2"}
    if freeze == "before-welcome":
        os.kill(collector.proc.pid, signal.SIGSTOP)
    command = [sys.executable, "-c", FLOOD, "3000", freeze]
    with subprocess.Popen(command, env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as agent:
        try:
            if freeze == "in-flight":
                assert agent.stdin is not None and agent.stdout is not None
                assert agent.stdout.readline() == "welcomed\n"
                os.kill(collector.proc.pid, signal.SIGSTOP)
                agent.stdin.write("go\n")
                agent.stdin.flush()
            assert agent.wait(60) == 0
        finally:
            agent.kill()
            os.kill(collector.proc.pid, signal.SIGKILL)
            collector.proc.wait()
    assert list(spool_dir().glob("*.spool")), "what could not be delivered was spooled"
    collector.start()
    lines = collector.session_lines("orphan")
    assert sorted(line["attrs"]["n"] for line in lines) == list(range(3000))
    assert [line["seq"] for line in lines] == list(range(1, 3001))


def test_a_living_clients_spool_is_left_alone(make_collector: Any) -> None:
    """The collector adopts only spools whose owner died: a live client's lock keeps it out."""
    collector = make_collector(start=False)
    client = collector.client(max_events=5)
    for n in range(100):
        client.log(session_id="alive", action="work", stage="PENDING", agent="agy", attrs={"n": n})
        time.sleep(0.001)
        # The agent waits for the sender thread to spill: starved on a loaded machine, it would meet
        # four times the bound unspilled and drop the oldest (loudly, by design), which is not this test.
        wait_for(lambda: client.stats().queued <= 10, message="the sender to spill to its spool")
    assert client.flush(timeout=0.3) is False
    assert list(spool_dir().glob("*.spool"))
    collector.start()
    assert client.flush(timeout=60)
    client.close()
    lines = collector.session_lines("alive")
    assert sorted(line["attrs"]["n"] for line in lines) == list(range(100))
    assert collector.metric("gzia_spool_adopted_events_total") == 0


LOSSY_EXIT = """
import sys
from gz_ia.client import Client
client = Client(max_events=5, max_spool_bytes=8_192)
for n in range(2_000):
    client.log(session_id="lossy-exit", action="work", stage="PENDING", agent="agy", attrs={"n": n})
client.close(timeout=0.2)
print(client.stats().dropped)
"""


def test_drops_counted_before_an_exit_without_a_collector_leave_their_notice(make_collector: Any) -> None:
    """An agent that drops events while no collector runs and then exits spools its loss notices with
    its events: the adopting collector writes a gz-ia.dropped notice with the exact count."""
    collector = make_collector(start=False)
    result = subprocess.run(
        [sys.executable, "-c", LOSSY_EXIT], env=collector.env, capture_output=True, text=True, check=True, timeout=60
    )
    dropped = int(result.stdout)
    assert dropped > 0, "the tiny spool overflowed"
    collector.start()
    lines = collector.session_lines("lossy-exit")
    notices = [line for line in lines if line["action"].startswith("gz-ia.dropped") and line["stage"] == "FINISH"]
    assert notices, "the loss left a notice in its session"
    assert sum(line["attrs"]["dropped"] for line in notices) == dropped
    delivered = [line["attrs"]["n"] for line in lines if line["action"] == "work"]
    assert len(delivered) + dropped == 2_000
