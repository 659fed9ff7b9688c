"""The collector's loopback HTTP side as a user meets it: where it is, and who it serves.

Two real uids: the collector runs as the test's user; the stranger is uid 65534 (nobody), run with
``setpriv`` on Debian's interpreter (it cannot run the project's under root's 0700 home).
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from typing import Any

from tests.conftest import SYSTEM_PYTHON, CollectorProcess, free_port

STRANGER = 65534
PROBE = """
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=30) as answer:
        print(answer.status, answer.read().decode())
except urllib.error.HTTPError as error:
    print(error.code, error.headers.get("X-Gz-Ia-Refused"), error.read().decode())
"""


def status(collector: CollectorProcess) -> Any:
    return json.loads(collector.gz_ia("status", "--json", check=True).stdout)


def get_json(collector: CollectorProcess, path: str) -> Any:
    request = urllib.request.Request(collector.http_url + path, headers=collector.http_headers())
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200
        return json.loads(answer.read())


def test_status_lists_the_http_side_and_it_answers_its_own_user(collector: CollectorProcess) -> None:
    report = status(collector)
    assert report["endpoints"]["http"] == collector.http_url
    assert report["http_error"] is None
    index = get_json(collector, "/")
    assert index["service"] == "gz-ia-collector" and index["endpoints"]["http"] == collector.http_url
    assert 'gzia_http_requests_total{code="200",endpoint="/"} 1.0' in collector.metrics()


def test_another_uid_is_refused_and_counted(collector: CollectorProcess) -> None:
    as_stranger = ["setpriv", f"--reuid={STRANGER}", f"--regid={STRANGER}", "--clear-groups"]
    probe = subprocess.run(
        [*as_stranger, SYSTEM_PYTHON, "-c", PROBE, collector.http_url + "/"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    )
    status, reason, body = probe.stdout.split(" ", 2)
    assert (status, reason) == ("403", "other_uid")
    assert "only its own user's processes" in body
    assert 'gzia_http_refused_total{reason="other_uid"} 1.0' in collector.metrics()
    assert f"refusing a connection from uid {STRANGER}" in collector.log()
    assert get_json(collector, "/")["service"] == "gz-ia-collector"  # the user still is


def test_a_busy_port_leaves_the_events_served_and_says_so(make_collector: Any) -> None:
    first = make_collector()
    second = make_collector()
    second.stop()
    second.args += ["--http-address", f"127.0.0.1:{first.http_port}"]  # the later flag wins
    second.start()
    report = status(second)
    assert report["endpoints"] == {}
    assert f"cannot listen on 127.0.0.1:{first.http_port}" in report["http_error"]
    assert report["healthy"] is True


def test_http_address_must_be_loopback(collector: CollectorProcess) -> None:
    proc = subprocess.run(
        [*collector.command(), "--http-address", f"0.0.0.0:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=collector.env,
        check=False,
    )
    assert proc.returncode != 0
    assert "not a loopback address" in proc.stderr


def test_http_off_serves_nothing(make_collector: Any) -> None:
    quiet = make_collector("--http-address", "off")
    report = status(quiet)
    assert report["endpoints"] == {} and report["http_error"] is None
