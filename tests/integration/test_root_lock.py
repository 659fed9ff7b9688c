"""One root, one writer: a collector refuses a root another one serves, and its lock dies with it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gz_ia.client import Client
from gz_ia.client.spool import read_segment

# A sharded collector takes roots at its front and writes them in its shares: run against both.
pytestmark = pytest.mark.shards(1, 2)


def _spool_dir() -> Path:
    return Path(os.environ["GZ_IA_SPOOL_DIR"])


def _log(client: Client, action: str) -> None:
    client.log(session_id="shared", action=action, stage="READ", agent="agy")


def _deliver(socket: Path, root: Path, action: str, timeout: float = 20) -> None:
    """Log one event of the session "shared" into ``root`` through ``socket``, and wait for its verdict."""
    client = Client(socket_path=socket, root=root)
    try:
        _log(client, action)
        assert client.flush(timeout=timeout)
    finally:
        client.close()


def test_a_second_collector_refuses_a_root_the_first_one_writes(make_collector: Any) -> None:
    """Collector B refuses A's root with root_locked, naming A; its client spools instead of losing the
    event, and B adopts that spool only once A is gone: every seq once, every event written."""
    first = make_collector()
    second = make_collector()
    assert first.proc is not None
    _deliver(first.socket, first.root, "a")
    other = Client(socket_path=second.socket, root=first.root)
    _log(other, "b")
    assert other.flush(timeout=2) is False
    error = other.stats().last_error or ""
    assert "root_locked" in error and f"pid {first.proc.pid}" in error and str(first.socket) in error
    other.close(timeout=0.2)
    spooled = [read_segment(path) for path in _spool_dir().glob("*.spool")]
    assert [(header.root, header.socket) for header, _ in spooled] == [(str(first.root), str(second.socket))]
    spooled_producer = spooled[0][0].producer
    assert second.log_lines("root_locked")
    refused = [line for line in second.metrics().splitlines() if 'rejected_total{reason="root_locked"}' in line]
    assert float(refused[0].split()[1]) >= 1
    _deliver(first.socket, first.root, "c")
    assert [(line["seq"], line["action"]) for line in first.session_lines("shared")] == [(1, "a"), (2, "c")]
    second.restart()  # the spool is meant for it, but the root is A's: left alone
    assert second.log_lines(f"cannot adopt the spool of {spooled_producer}")
    assert [(line["seq"], line["action"]) for line in first.session_lines("shared")] == [(1, "a"), (2, "c")]
    first.stop()
    second.restart()  # adopts its own spool now that it can take the root
    assert [(line["seq"], line["action"]) for line in first.session_lines("shared")] == [(1, "a"), (2, "c"), (3, "b")]


def test_a_killed_collectors_lock_goes_with_it(make_collector: Any) -> None:
    """SIGKILL leaves no lock behind: another collector takes the root at once (a sharded one's shares
    drain first, and meanwhile its client is asked to come back)."""
    first = make_collector()
    second = make_collector()
    _deliver(first.socket, first.root, "a")
    first.kill()
    _deliver(second.socket, first.root, "b", timeout=30)
    assert [(line["seq"], line["action"]) for line in first.session_lines("shared")] == [(1, "a"), (2, "b")]


def test_the_lock_names_the_collector_and_reading_needs_none(collector: Any) -> None:
    """The root's lock file names the collector that holds it; gz-ia logs reads the root meanwhile."""
    _deliver(collector.socket, collector.root, "a")
    holder = msgspec.json.decode((collector.root / "state" / "collector.lock").read_bytes())
    assert holder == {"pid": collector.proc.pid, "sockets": [str(collector.socket)]}
    shown = collector.gz_ia("logs", "-n", "all", check=True).stdout
    assert "shared" in shown
