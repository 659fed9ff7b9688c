"""`healthy` in gz-ia status is derived from what the collector observes: a root it cannot write
makes it unhealthy, with the reason and exit 1, until writes to that root succeed again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import spool_dir, wait_for
from tests.integration.fault_harness import fill_disk, tmpfs

from gz_ia.client import Client
from gz_ia.collector.cli._common import EXIT_UNHEALTHY

pytestmark = pytest.mark.shards(1, 2)


@pytest.fixture(name="small_disk")
def _small_disk(short_tmp: Path) -> Any:
    """A 1 MiB tmpfs mounted for the test (we are root), always unmounted at the end."""
    mount_point = short_tmp / "disk"
    mount_point.mkdir()
    with tmpfs(mount_point, 1):
        yield mount_point


def _status(collector: Any) -> tuple[int, dict[str, Any]]:
    result = collector.gz_ia("status", "--json")
    return result.returncode, json.loads(result.stdout)


def test_a_full_disk_makes_the_collector_unhealthy_until_writes_succeed(collector: Any, small_disk: Path) -> None:
    """ENOSPC on a root: status says unhealthy (JSON, text, exit 1) with the reason; once the
    disk has room again and the held events are written, it is healthy."""
    root = small_disk / ".harness"
    root.mkdir()
    client = Client(socket_path=collector.socket, root=root)
    try:
        client.log(session_id="full", action="first", stage="READ", agent="agy")
        assert client.flush(timeout=30)
        code, report = _status(collector)
        assert (code, report["healthy"], report["reasons"]) == (0, True, [])
        filler = small_disk / "filler"
        fill_disk(filler)
        for n in range(20):
            client.log(session_id="full", action="step", stage="READ", agent="agy", attrs={"n": n, "pad": "x" * 2000})
        assert client.flush(timeout=1) is False
        wait_for(lambda: _status(collector)[0] == EXIT_UNHEALTHY, timeout=30, message="an unhealthy status")
        code, report = _status(collector)
        assert report["healthy"] is False
        assert any(str(root) in reason and "disk is full" in reason for reason in report["reasons"]), report
        text = collector.gz_ia("status")
        assert text.returncode == EXIT_UNHEALTHY
        assert "UNHEALTHY" in text.stdout and "disk is full (ENOSPC)" in text.stdout, text.stdout
        filler.unlink()
        assert client.flush(timeout=60)
    finally:
        client.close()
    code, report = _status(collector)
    assert (code, report["healthy"], report["reasons"]) == (0, True, [])


_SPOOLING_AGENT = """
import sys
from gz_ia.client import Client
client = Client(root=sys.argv[1])
for n in range(20):
    client.log(session_id="spooled", action="step", stage="READ", agent="agy", attrs={"n": n, "pad": "x" * 2000})
client.flush(timeout=2)
"""


def test_health_follows_the_write_of_an_adopted_spool(make_collector: Any, small_disk: Path) -> None:
    """The disk fills, the only agent gives up and spools its events; once the disk has room the
    collector's spool adoption (looking every 2 s here, ``spool_adoption_interval``) writes them, and
    that write makes it healthy again."""
    collector = make_collector(env={"GZ_IA_SPOOL_ADOPTION_INTERVAL": "2"})
    root = small_disk / ".harness"
    root.mkdir()
    client = Client(socket_path=collector.socket, root=root)
    try:
        client.log(session_id="first", action="first", stage="READ", agent="agy")
        assert client.flush(timeout=30)
    finally:
        client.close()
    filler = small_disk / "filler"
    fill_disk(filler)
    environment = {**collector.env, "GZ_IA_EXIT_TIMEOUT": "0.2"}
    subprocess.run([sys.executable, "-c", _SPOOLING_AGENT, str(root)], env=environment, check=True, timeout=60)
    wait_for(lambda: _status(collector)[0] == EXIT_UNHEALTHY, timeout=30, message="an unhealthy status")
    assert list(spool_dir().glob("*.spool"))
    filler.unlink()
    # Adoption looks every 2 s: nothing else writes to the root meanwhile.
    wait_for(lambda: not list(spool_dir().glob("*.spool")), timeout=60, message="the spool to be adopted")
    assert len((root / "sessions" / "spooled.events.jsonl").read_text().splitlines()) == 20
    code, report = _status(collector)
    assert (code, report["healthy"], report["reasons"]) == (0, True, [])
