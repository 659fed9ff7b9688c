"""The Prometheus endpoint of a real collector: one port per user by default, never fatal, loud when
it cannot bind or binds beyond loopback; and log lines journald can filter by priority.

Other users are simulated with ``setpriv --reuid/--regid`` (no passwd entry needed). They cannot run
the pyenv interpreter under /root, so their collectors run on ``/usr/bin/python3`` with the source
trees and the workspace's site-packages on ``PYTHONPATH`` (as in test_security.py).
"""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import CollectorProcess, OtherUidCollector

from gz_ia.client import build_event
from gz_ia.collector.config import default_metrics_port


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture(name="two_users")
def _two_users(short_tmp: Path) -> Iterator[list[OtherUidCollector]]:
    """Two uids whose default metrics ports are free on this machine, each with a collector (not started)."""
    short_tmp.chmod(0o755)  # let the other uids reach their own directories below it
    uids = [uid for uid in range(54321, 54400) if _port_is_free(default_metrics_port(uid))][:2]
    made = []
    for uid in uids:
        base = short_tmp / f"u{uid}"
        base.mkdir()
        made.append(OtherUidCollector(base, uid))
    yield made
    for process in made:
        process.close()


def test_two_users_run_side_by_side_with_default_metrics(two_users: list[OtherUidCollector]) -> None:
    """Two uids' collectors with default settings both start, each serving metrics on its own port,
    which its log and ``gz-ia status`` name."""
    for process in two_users:
        process.start()
    urls = []
    for process in two_users:
        url = f"http://127.0.0.1:{default_metrics_port(process.uid)}/metrics"
        assert process.log_lines(f"metrics on {url}"), process.log()
        report = process.status()
        assert report["metrics_endpoint"] == {"address": url.split("/")[2], "url": url, "error": None}
        with urllib.request.urlopen(url, timeout=5) as response:
            assert "gzia_build_info" in response.read().decode()
        urls.append(url)
    assert urls[0] != urls[1]


def test_a_busy_metrics_port_never_stops_the_event_service(make_collector: Any) -> None:
    """With the metrics port taken, the collector starts anyway: an error in the log and in
    ``gz-ia status``, and events are accepted."""
    collector: CollectorProcess = make_collector(start=False)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", collector.metrics_port))
        squatter.listen()
        collector.start()
        address = f"127.0.0.1:{collector.metrics_port}"
        (line,) = collector.log_lines("metrics NOT served")
        assert f"ERROR metrics NOT served: cannot listen on {address}" in line
        assert "events are still accepted" in line
        client = collector.client()
        try:
            assert client.send(build_event(session_id="busy-1", action="a", stage="READ", agent="t"), timeout=20)
        finally:
            client.close()
        assert [event["action"] for event in collector.session_lines("busy-1")] == ["a"]
        result = collector.gz_ia("status")
        assert result.returncode == 0, result.stderr
        assert f"metrics: NOT SERVED: cannot listen on {address}: " in result.stdout
        report = json.loads(collector.gz_ia("status", "--json").stdout)
        assert report["metrics_endpoint"]["url"] is None
        assert "Address already in use" in report["metrics_endpoint"]["error"]


def test_metrics_beyond_loopback_is_a_warning(make_collector: Any) -> None:
    """``--metrics-address 0.0.0.0:PORT`` is served, with a warning that it is reachable from outside."""
    collector: CollectorProcess = make_collector(start=False)
    collector.args = ["--metrics-address", f"0.0.0.0:{collector.metrics_port}"]
    collector.start()
    (line,) = collector.log_lines("beyond loopback")
    assert line.startswith(
        f"gz-ia-collector: WARNING metrics are served beyond loopback on 0.0.0.0:{collector.metrics_port}"
    )
    assert "gzia_build_info" in collector.metrics()
    assert collector.log_lines("WARNING") == [line]


def test_loopback_metrics_log_no_warning(collector: CollectorProcess) -> None:
    """On loopback (the tests' 127.0.0.1:PORT) the endpoint is logged at INFO only."""
    assert collector.log_lines(f"INFO metrics on http://127.0.0.1:{collector.metrics_port}/metrics")
    assert collector.log_lines("WARNING") == []


# --- log priorities for journald ---------------------------------------------------------------------


def _journal_stream(path: Path) -> str:
    st = path.stat()
    return f"{st.st_dev}:{st.st_ino}"


def _collector_lines(collector: CollectorProcess) -> list[str]:
    return [line for line in collector.log().splitlines() if not line.startswith("--- start")]


def test_log_lines_carry_priorities_when_stderr_is_the_journal(make_collector: Any) -> None:
    """With JOURNAL_STREAM naming stderr, every line starts with its sd-daemon priority:
    <3> for errors, <6> for information."""
    collector: CollectorProcess = make_collector(start=False)
    collector.log_path.touch()  # the file stderr is opened on, so that its inode is known now
    collector.extra_env["JOURNAL_STREAM"] = _journal_stream(collector.log_path)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", collector.metrics_port))
        collector.start()
    lines = _collector_lines(collector)
    assert lines and all(line[:3] in ("<3>", "<4>", "<6>", "<7>") for line in lines), lines
    assert any(line.startswith("<3>gz-ia-collector: ERROR metrics NOT served") for line in lines), lines
    assert any(line.startswith("<6>gz-ia-collector: INFO listening on ") for line in lines), lines


@pytest.mark.parametrize("journal_stream", [None, "1:1", "nonsense"])
def test_log_lines_are_plain_when_stderr_is_not_the_journal(make_collector: Any, journal_stream: str | None) -> None:
    """Without JOURNAL_STREAM, or when it names another stream (stderr redirected), lines carry no prefix."""
    collector: CollectorProcess = make_collector(start=False)
    if journal_stream is not None:
        collector.extra_env["JOURNAL_STREAM"] = journal_stream
    collector.start()
    lines = _collector_lines(collector)
    assert lines and all(line.startswith("gz-ia-collector: ") for line in lines), lines
