"""A root removed or made read-only under a running collector: it stays up, keeps what it could not
write with the clients, and resumes by itself when the fault clears."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for
from tests.integration.fault_harness import metric_value, tmpfs

from gz_ia.client import Client

# The write and delivery path: run against one process and against a sharded collector.
pytestmark = pytest.mark.shards(1, 2)


def _write_errors(collector: Any, kind: str) -> float:
    return metric_value(collector.metrics(), "gzia_write_errors_total", {"kind": kind})


def _log(client: Any, first: int, count: int, session_id: str = "work") -> None:
    for n in range(first, first + count):
        client.log(session_id=session_id, action="step", stage="PENDING", agent="agy", attrs={"n": n})


def test_a_removed_root_is_recreated_and_nothing_sent_after_is_lost(collector: Any, schema_validator: Any) -> None:
    """rm -r .harness mid-run: later events land once in the recreated root; the collector never restarts."""
    client = collector.client()
    _log(client, 0, 50)
    assert client.flush(timeout=30)
    pid = collector.proc.pid
    shutil.rmtree(collector.root)
    _log(client, 50, 50)
    assert client.flush(timeout=60)
    client.close()
    lines = collector.session_lines("work")
    for line in lines:
        schema_validator.validate(line)
    assert sorted(line["attrs"]["n"] for line in lines) == list(range(50, 100))
    assert [line["seq"] for line in lines] == list(range(1, 51)), "a fresh session starts at seq 1"
    assert collector.proc.pid == pid and collector.proc.poll() is None
    assert _write_errors(collector, "ENOENT") >= 1
    assert "was removed" in collector.log()


def test_a_client_idle_while_its_root_was_removed_loses_nothing_sent_after(collector: Any) -> None:
    """Client b says nothing while the removal is noticed (through client a's events); what it sends
    next lands in the recreated root, not in the removed file it had open."""
    first, second = collector.client(), collector.client()
    _log(first, 0, 20, "work-a")
    _log(second, 0, 20, "work-b")
    assert first.flush(timeout=30) and second.flush(timeout=30)
    shutil.rmtree(collector.root)
    _log(first, 20, 20, "work-a")
    assert first.flush(timeout=60)
    assert "was removed" in collector.log()
    _log(second, 20, 20, "work-b")
    assert second.flush(timeout=60)
    for client in (first, second):
        client.close()
    for session_id in ("work-a", "work-b"):
        lines = collector.session_lines(session_id)
        assert sorted(line["attrs"]["n"] for line in lines) == list(range(20, 40)), session_id


@pytest.fixture(name="small_disk")
def _small_disk(short_tmp: Path) -> Any:
    """A tmpfs mounted for the test (we are root), always unmounted at the end."""
    mount_point = short_tmp / "disk"
    mount_point.mkdir()
    with tmpfs(mount_point, 4):
        yield mount_point


def test_a_read_only_root_holds_events_until_it_is_writable_again(
    collector: Any, small_disk: Path, schema_validator: Any
) -> None:
    """EROFS: nothing acknowledged that was not written, errors counted; after remount rw all lands once."""
    root = small_disk / ".harness"
    root.mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    client = Client(socket_path=collector.socket, root=root)
    try:
        _log(client, 0, 30)
        # The collector has met the read-only root on this client's behalf: from then on, none of
        # its events may be acknowledged.
        wait_for(
            lambda: _write_errors(collector, "EROFS") >= 1,
            timeout=30,
            message="the collector to count the read-only root",
        )
        assert client.flush(timeout=0) is False, "nothing can be acknowledged while the root is read-only"
        stats = client.stats()
        assert (stats.accepted, stats.rejected, stats.dropped) == (0, 0, 0)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    assert client.flush(timeout=60)
    client.close()
    lines = [json.loads(line) for line in (root / "sessions" / "work.events.jsonl").read_text().splitlines()]
    for line in lines:
        schema_validator.validate(line)
    assert sorted(line["attrs"]["n"] for line in lines) == list(range(30))
    assert [line["seq"] for line in lines] == list(range(1, 31))
    assert collector.proc.poll() is None


def test_a_fifo_under_a_session_files_name_fails_that_session_alone(collector: Any) -> None:
    """A FIFO where a session's active file belongs, with nobody reading it: the collector does not
    wait in open() for a reader (which held every session); that session's events fail, loudly, and
    stay with their client, while the other sessions are written."""
    import os

    other = collector.client()
    _log(other, 0, 10, "fine")
    assert other.flush(timeout=30)
    os.mkfifo(collector.root / "sessions" / "piped.events.jsonl")
    blocked = collector.client()
    _log(blocked, 0, 3, "piped")
    _log(other, 10, 10, "fine")
    assert other.flush(timeout=30)
    other.close()
    assert [line["attrs"]["n"] for line in collector.session_lines("fine")] == list(range(20))
    wait_for(lambda: "cannot write piped.events.jsonl" in collector.log(), message="the failed write in the log")
    assert not blocked.flush(timeout=1)  # never acknowledged
    blocked.close(timeout=1)
    assert collector.proc.poll() is None
