"""The collector's HTTP doors against the attackers that would use them, each for real.

- another uid (``setpriv`` on Debian's interpreter: it cannot run the project's under root's 0700
  home), against a collector run by root as the test suite is: it sends whole requests and closes
  at once (the kernel's table then reports the socket's leftover as uid 0), floods the port with
  silent connections, holds half-sent requests on ``/metrics``, takes the hook port first, plants a
  ``.harness`` above the user's workspace;
- a page of another site (tests/integration/test_doors_browser.py drives a real Chromium);
- a page that rebound its host name to 127.0.0.1: its requests name that host in ``Host``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import SYSTEM_PYTHON, CollectorProcess, system_python_path, wait_for

REPO = Path(__file__).resolve().parents[2]
CAPTURED = REPO / "tests" / "fixtures" / "claude_code" / "captured"
INTRUDER = 12345
PROMETHEUS = 65534
"""Another uid that reads /metrics (as Prometheus does), beside the intruder."""


def as_uid(uid: int, program: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", SYSTEM_PYTHON, "-c", program, *args]


def run_as(uid: int, program: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        as_uid(uid, program, *args),
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": system_python_path()},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def hook_request(port: int, key: str, session_id: str, root: Path, *, host: str | None = None) -> bytes:
    """A whole Claude Code hook post, as gz-ia's installed http hook sends it (the key included)."""
    payload = json.loads((CAPTURED / "B-UserPromptSubmit.json").read_text())
    payload.update(session_id=session_id, cwd=str(root.parent))
    body = json.dumps(payload).encode()
    head = (
        f"POST /hooks/claude-code HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\nX-Gz-Ia-Key: {key}\r\n"
        f"X-Gz-Ia-Root: {root}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def answer_of(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def thread_count(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


SEND_AND_CLOSE = """
import socket, sys, threading, urllib.request
port, metrics_port, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
requests = [bytes.fromhex(line) for line in sys.stdin.read().split()]
done = threading.Event()

def scrape():  # keeps the collector busy, so that each request's socket is gone before it is judged
    while not done.is_set():
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
        except OSError:
            pass

scrapers = [threading.Thread(target=scrape) for _ in range(4)]
for each in scrapers:
    each.start()
for raw in requests[:count]:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(raw)
    sock.close()  # gone at once: the kernel keeps a leftover that reports uid 0
done.set()
for each in scrapers:
    each.join()
print("sent", count)
"""


def test_another_uid_that_sends_and_closes_at_once_never_writes_as_root(collector: CollectorProcess) -> None:
    """A collector run by root, another uid holding even the user's key (as if it had leaked): 200
    hook posts each sent whole and closed at once while /metrics is scraped, not one written."""
    assert os.getuid() == 0, "the attack is on a collector run by root"
    count = 200
    requests = [hook_request(collector.http_port, collector.key, f"intruder-{n}", collector.root) for n in range(count)]
    attack = subprocess.run(
        as_uid(INTRUDER, SEND_AND_CLOSE, str(collector.http_port), str(collector.metrics_port), str(count)),
        input="\n".join(raw.hex() for raw in requests),
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert attack.returncode == 0, attack.stderr
    metrics = collector.metrics()

    def refused() -> float:
        text = collector.metrics()
        return sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("gzia_http_refused_total{") and ("unknown_peer" in line or "other_uid" in line)
        )

    wait_for(lambda: refused() >= count, message=f"all {count} connections refused ({metrics})")
    assert not [name for name in collector.all_sessions() if name.startswith("intruder")]
    # The user's own post, sent the same way but kept open until answered, is heard.
    mine = answer_of(collector.http_port, hook_request(collector.http_port, collector.key, "mine", collector.root))
    assert mine.startswith(b"HTTP/1.1 200"), mine[:200]
    wait_for(lambda: "mine" in collector.all_sessions(), message="the user's own hook")


HOLD_SILENT = """
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(count):
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    except OSError:
        pass
print(len(held), flush=True)
time.sleep(120)
"""

HOLD_HALF_SENT = """
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
held = []
for _ in range(count):
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: 127.0.0.1:%d\\r\\n" % port)  # never ends its head
        held.append(sock)
    except OSError:
        pass
print(len(held), flush=True)
time.sleep(120)
"""


@contextlib.contextmanager
def _held(uid: int, program: str, port: int, count: int) -> Iterator[None]:
    """Another uid holding ``count`` connections to ``port`` (as ``program`` leaves them) meanwhile."""
    holder = subprocess.Popen(
        as_uid(uid, program, str(port), str(count)),
        env={"PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert int(holder.stdout.readline()) > 0, "the other uid could not connect at all"
        yield
    finally:
        holder.kill()
        holder.communicate()


def test_another_uids_silent_connections_neither_fill_nor_slow_the_users_hooks(collector: CollectorProcess) -> None:
    """300 silent connections of another uid held open: each of the user's 15 hook posts is answered
    200 and written (the bound on connections is counted per uid, after the uid is known)."""
    with _held(INTRUDER, HOLD_SILENT, collector.http_port, 300):
        for n in range(15):
            raw = hook_request(collector.http_port, collector.key, f"mine-{n}", collector.root)
            answer = answer_of(collector.http_port, raw)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        wait_for(lambda: {f"mine-{n}" for n in range(15)} <= set(collector.all_sessions()), message="every hook")


def test_metrics_holds_its_bounds_against_another_uid_and_still_answers_others(collector: CollectorProcess) -> None:
    """Another uid holding 300 half-sent requests on /metrics: the collector's threads stay few (no
    thread per connection), the user's scrape and a third uid's (Prometheus runs as one) are answered."""
    assert collector.proc is not None
    before = thread_count(collector.proc.pid)
    with _held(INTRUDER, HOLD_HALF_SENT, collector.metrics_port, 300):
        time.sleep(0.5)
        assert thread_count(collector.proc.pid) <= before + 4
        assert "gzia_events_written_total" in collector.metrics()
        probe = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=30).status)"
        scraped = run_as(PROMETHEUS, probe, f"http://127.0.0.1:{collector.metrics_port}/metrics")
        assert (scraped.returncode, scraped.stdout.strip()) == (0, "200"), scraped.stderr


@pytest.mark.parametrize(
    ("method", "path", "which"),
    [
        ("POST", "/hooks/claude-code", "http"),
        ("POST", "/v1/logs", "http"),
        ("POST", "/v1/traces", "http"),
        ("GET", "/", "http"),
        ("GET", "/ui/", "http"),
        ("GET", "/live", "http"),
        ("GET", "/metrics", "metrics"),
    ],
)
def test_a_rebinding_page_is_refused_on_every_route(
    collector: CollectorProcess, method: str, path: str, which: str
) -> None:
    """A page that rebound ``attacker.test`` to 127.0.0.1 sends ``Host: attacker.test:PORT``: refused
    403 on every route, even were it to hold the key, and nothing of its body is written."""
    port = collector.http_port if which == "http" else collector.metrics_port
    body = hook_request(port, collector.key, "rebound", collector.root).split(b"\r\n\r\n", 1)[1]
    length = len(body) if method == "POST" else 0
    raw = (
        f"{method} {path}?key={collector.key} HTTP/1.1\r\nHost: attacker.test:{port}\r\n"
        f"X-Gz-Ia-Key: {collector.key}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode() + (body if method == "POST" else b"")
    answer = answer_of(port, raw)
    assert answer.startswith(b"HTTP/1.1 403") and b"X-Gz-Ia-Refused: wrong_host" in answer, answer[:300]
    assert "rebound" not in collector.all_sessions()


def test_a_request_never_makes_a_root_where_it_points(collector: CollectorProcess, short_tmp: Path) -> None:
    """X-Gz-Ia-Root naming a path that does not exist, the collector's own configuration file, or a
    directory that is no root: nothing is made there; the events go to the default root, and the
    collector says so. A restart after it works."""
    config = collector.base / "config" / "gz-ia" / "collector.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("")
    home = short_tmp / "home-dir"
    home.mkdir()
    targets = {
        "nowhere": short_tmp / "nowhere" / "deep" / ".harness",
        "config": config,
        "home": home,
    }
    for name, target in targets.items():
        request = urllib.request.Request(
            f"{collector.http_url}/hooks/claude-code",
            data=hook_request(collector.http_port, collector.key, f"pointed-{name}", target).split(b"\r\n\r\n", 1)[1],
            headers=collector.http_headers(**{"X-Gz-Ia-Root": str(target), "Content-Type": "application/json"}),
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200
    assert not (short_tmp / "nowhere").exists()
    assert config.is_file()
    assert os.listdir(home) == []
    default = Path(os.environ["XDG_DATA_HOME"]) / "gz-ia" / ".harness" / "sessions"
    wait_for(
        lambda: (
            {f"pointed-{name}.events.jsonl" for name in targets} <= set(os.listdir(default))
            if default.exists()
            else False
        ),
        message="the events in the default root",
    )
    assert "Claude Code hook events written under" in collector.log()
    collector.restart()  # the configuration file is still a file: the collector starts
    assert collector.gz_ia("status", check=True).returncode == 0


THIEF = """
import socket, sys, time
sock = socket.create_server(("127.0.0.1", int(sys.argv[1])))
print("listening", flush=True)
sock.settimeout(float(sys.argv[2]))
got = b""
try:
    while True:
        conn, _ = sock.accept()
        conn.settimeout(2)
        try:
            while chunk := conn.recv(65536):
                got += chunk
        except OSError:
            pass
except OSError:
    pass
print(len(got), flush=True)
"""


def test_a_port_taken_by_another_uid_gets_nothing_and_the_collector_says_who(
    make_collector: Any, short_tmp: Path
) -> None:
    """Another uid listens first on the port the user's collector is configured for: the collector
    names the holder and what to do (its log and `gz-ia status`), and `gz-ia hook claude-code --http`
    sends nothing there: the SessionStart goes over the socket instead."""
    from tests.conftest import free_port

    port = free_port()
    thief = subprocess.Popen(
        as_uid(INTRUDER, THIEF, str(port), "8"), env={"PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE, text=True
    )
    assert thief.stdout is not None
    try:
        assert thief.stdout.readline().strip() == "listening"
        collector = make_collector("--http-address", f"127.0.0.1:{port}")
        report = json.loads(collector.gz_ia("status", "--json", check=True).stdout)
        assert f"held by uid {INTRUDER}, ANOTHER USER" in report["http_error"]
        assert f"held by uid {INTRUDER}, ANOTHER USER" in collector.log()
        payload = json.loads((CAPTURED / "B-SessionStart.json").read_text())
        payload["cwd"] = str(collector.workspace)
        environment = dict(collector.env)
        hook = [SYSTEM_PYTHON, "-c", "from gz_ia.collector.entry import main; main()", "hook", "claude-code"]
        environment["PYTHONPATH"] = system_python_path()
        result = subprocess.run(
            [*hook, "--http", f"http://127.0.0.1:{port}/hooks/claude-code"],
            input=json.dumps(payload), env=environment, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 0 and f"held by uid {INTRUDER}, not by you" in result.stderr, result.stderr
        wait_for(lambda: payload["session_id"] in collector.all_sessions(), message="the SessionStart over the socket")
    finally:
        received = thief.communicate(timeout=30)[0].split()
        thief.kill()
    assert received == ["0"], "the thief received bytes"


PLANT = """
import os, sys
os.mkdir(sys.argv[1], 0o777)
os.chmod(sys.argv[1], 0o777)
"""


def test_a_harness_planted_above_the_workspace_loses_nothing(collector: CollectorProcess, short_tmp: Path) -> None:
    """Another uid made ``.harness`` in a shared directory above the user's workspace: the user's agent
    passes it over, says so, and its event is written in the user's own default root."""
    short_tmp.chmod(0o755)
    shared = short_tmp / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: anyone may make something in it
    planted = shared / ".harness"
    made = run_as(INTRUDER, PLANT, str(planted))
    assert made.returncode == 0, made.stderr
    workspace = shared / "project"
    workspace.mkdir()
    environment = dict(collector.env)
    environment.pop("GZ_IA_ROOT")
    agent = (
        "from gz_ia.client import Client, build_event\n"
        "client = Client()\n"
        "print('seq', client.send(build_event(session_id='planted-ws', action='a', stage='READ', agent='x')).seq)\n"
        "client.close()\n"
    )
    import sys

    result = subprocess.run(
        [sys.executable, "-c", agent], cwd=workspace, env=environment, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "seq 1", result.stdout
    assert f"passing over {planted}" in result.stderr
    assert os.listdir(planted) == []
    default = Path(environment["XDG_DATA_HOME"]) / "gz-ia" / ".harness"
    assert (default / "sessions" / "planted-ws.events.jsonl").exists()


def test_a_refused_subscriber_says_why(collector: CollectorProcess) -> None:
    """Another uid that may reach the socket but is not allowed to subscribe is told why, not only
    "Broken pipe"."""
    for directory in (collector.base.parent, collector.base, collector.socket.parent):
        directory.chmod(0o755)
    collector.socket.chmod(0o666)
    program = (
        "import sys\n"
        "from gz_ia.client.live import Subscriber, SubscriptionRefused\n"
        "try:\n"
        "    Subscriber(sys.argv[2], socket_path=sys.argv[1])\n"
        "except SubscriptionRefused as exc:\n"
        "    print('refused:', exc)\n"
    )
    result = subprocess.run(
        as_uid(INTRUDER, program, str(collector.socket), str(collector.root)),
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": system_python_path()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.startswith("refused:") and f"uid {INTRUDER}" in result.stdout, (result.stdout, result.stderr)


def test_the_credentials_are_private_drawn_once_and_the_port_is_not_the_uids(tmp_path: Path) -> None:
    """The key and port are drawn once (a second load reads them), kept 0600; two users' ports are not
    a function of their uid; a file open to others, or a link, is refused, never used."""
    from gz_ia.collector.credentials import CREDENTIALS_FILE, CredentialsUnusable, load_credentials

    first = load_credentials(tmp_path / "a")
    assert load_credentials(tmp_path / "a") == first
    path = tmp_path / "a" / CREDENTIALS_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    ports = {load_credentials(tmp_path / f"user-{n}").port for n in range(8)}
    assert len(ports) > 1  # drawn, not derived from the (same) uid
    path.chmod(0o644)
    with pytest.raises(CredentialsUnusable, match="only you may read"):
        load_credentials(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / CREDENTIALS_FILE).symlink_to(path)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        load_credentials(tmp_path / "b")


def test_gz_ia_ui_gives_the_browser_a_private_file_never_the_key(collector: CollectorProcess, short_tmp: Path) -> None:
    """`gz-ia ui` starts the browser on a 0600 file that leads to the page; the key is in the file,
    not on the browser's command line (which every user may read in /proc)."""
    recorded = short_tmp / "argv.json"
    browser = short_tmp / "browser"
    browser.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {recorded}\n")
    browser.chmod(0o755)
    result = collector.gz_ia("ui", env={**collector.env, "BROWSER": str(browser)}, check=True)
    argv = recorded.read_text()
    assert collector.key not in argv and collector.key not in result.stdout
    page = Path(argv.strip().removeprefix("file://"))
    assert page.stat().st_mode & 0o777 == 0o600
    assert collector.key in page.read_text()


def test_session_view_writes_a_page_only_its_owner_may_read(collector: CollectorProcess, short_tmp: Path) -> None:
    """The timeline page holds what the session's files hold: 0600, as they are, even over a file
    that was readable before."""
    from tests.conftest import send_events

    from gz_ia.client import build_event

    send_events(collector, [build_event(session_id="viewed", action="a", stage="READ", agent="x")])
    page = short_tmp / "viewed.html"
    page.write_text("")
    page.chmod(0o644)
    collector.gz_ia("session", "view", "viewed", "-o", str(page), check=True)
    assert page.stat().st_mode & 0o777 == 0o600 and "viewed" in page.read_text()
