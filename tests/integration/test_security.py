"""Security of the collector, against a real process: who may connect, and what input may become a path.

Another uid is simulated with ``setpriv --reuid/--regid`` (no passwd entry needed). That uid cannot
run the pyenv interpreter under /root, so the probe runs on ``/usr/bin/python3`` with the source
trees and the workspace's site-packages (for msgspec) on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gz_ia.client import build_event
from gz_ia.client.errors import CollectorUnavailable, EventRejected

# The write and delivery path: run against one process and against a sharded collector.
pytestmark = pytest.mark.shards(1, 2)

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "fixtures" / "agents" / "uid_probe.py"
OTHER_UID = 12345
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(autouse=True)
def _private_spool(monkeypatch: pytest.MonkeyPatch, short_tmp: Path) -> None:
    """Clients and collectors of this test spool into the test's own directory, never ~/.local/state."""
    monkeypatch.setenv("GZ_IA_SPOOL_DIR", str(short_tmp / "spool"))


def _probe_path() -> str:
    site = sysconfig.get_paths()["purelib"]  # the workspace venv's site-packages: msgspec lives there
    return os.pathsep.join([str(REPO / "client" / "src"), str(REPO / "collector" / "src"), site])


def run_as_other_uid(collector: Any, root: Path, session_id: str, uid: int = OTHER_UID) -> dict[str, Any]:
    """Run the probe as ``uid`` against ``collector`` and return its JSON report."""
    result = subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            SYSTEM_PYTHON,
            str(PROBE),
            str(collector.socket),
            str(root),
            session_id,
        ],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": _probe_path(),
            "GZ_IA_EXIT_TIMEOUT": "0",
            "HOME": str(root.parent),  # a home of its own (the uid has no passwd entry)
            "GZ_IA_SPOOL_DIR": str(root.parent / "spool"),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"probe failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["uid"] == uid
    return report


def open_socket_to_everyone(collector: Any) -> None:
    """Let any uid reach the socket: search on every directory above it, write on the socket."""
    for directory in (collector.base.parent, collector.base, collector.socket.parent):
        directory.chmod(0o755)
    collector.socket.chmod(0o666)


def root_for_other_uid(base: Path, uid: int = OTHER_UID) -> Path:
    workspace = base / f"ws-{uid}"
    root = workspace / ".harness"
    root.mkdir(parents=True)
    for directory in (workspace, root):
        os.chown(directory, uid, uid)
    return root


def metric_value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def tree(path: Path) -> set[str]:
    """Every path under ``path`` (symlinks not followed)."""
    return {str(p) for p in path.rglob("*")}


def send(collector: Any, timeout: float = 5.0, **fields: Any) -> Any:
    """Send one event from a fresh client and return its verdict (raising what the client raises)."""
    client = collector.client()
    event = build_event(agent=fields.pop("agent", "sec"), **fields)
    try:
        return client.send(event, timeout=timeout)
    finally:
        client.close(timeout=0)


# --- the socket and who may use it ------------------------------------------------------------------


def test_socket_directory_0700_and_socket_0600(make_collector: Any) -> None:
    """A socket directory the collector creates is 0700, and the socket is 0600."""
    collector = make_collector()
    directory = collector.socket.parent.lstat()
    sock = collector.socket.lstat()
    assert stat.S_ISDIR(directory.st_mode)
    assert stat.S_IMODE(directory.st_mode) == 0o700
    assert stat.S_ISSOCK(sock.st_mode)
    assert stat.S_IMODE(sock.st_mode) == 0o600
    assert directory.st_uid == os.getuid()
    assert sock.st_uid == os.getuid()


def test_every_state_file_is_private_whatever_the_umask(make_collector: Any) -> None:
    """Started with umask 022, the collector still writes every file of its state (roots.json, a
    sharded collector's share configuration), of the root and beside its socket 0600, in 0700 directories."""
    collector = make_collector(start=False)
    collector.prefix = ["sh", "-c", 'umask 022 && exec "$@"', "sh"]
    collector.start()
    assert send(collector, session_id="private", action="a", stage="READ").seq == 1
    state = collector.base.parent / f"{collector.base.name}-state"
    assert (state / "roots.json").exists()
    made = [state, *state.rglob("*"), *collector.socket.parent.rglob("*"), *collector.root.rglob("*")]
    if collector.shards > 1:
        assert any(path.name.startswith("config") for path in made), made
    modes = {str(path): stat.S_IMODE(path.lstat().st_mode) for path in made if not path.is_socket()}
    expected = {path: 0o700 if Path(path).is_dir() else 0o600 for path in modes}
    assert modes == expected


@pytest.mark.parametrize("mode", [0o755, 0o1777], ids=["own-0755", "sticky-1777"])
def test_an_existing_socket_directory_keeps_its_mode(make_collector: Any, mode: int) -> None:
    """Pointed at an existing directory (a home, or ``/tmp``: sticky and world-writable), the
    collector binds its 0600 socket there and leaves the directory's mode alone. It once made
    ``/tmp`` 0700 for ``--socket /tmp/x.sock``, which locked every other user out of it."""
    collector = make_collector(start=False)
    collector.socket.parent.mkdir()
    collector.socket.parent.chmod(mode)
    collector.start()
    assert stat.S_IMODE(collector.socket.parent.lstat().st_mode) == mode
    assert stat.S_IMODE(collector.socket.lstat().st_mode) == 0o600
    assert send(collector, session_id="mode", action="a", stage="READ").seq == 1


def test_a_socket_directory_writable_by_others_is_refused(make_collector: Any) -> None:
    """Others could replace the socket in a directory they may write without the sticky bit."""
    collector = make_collector(start=False)
    collector.socket.parent.mkdir()
    collector.socket.parent.chmod(0o777)
    collector.start(wait=False)
    assert collector.proc is not None
    assert collector.proc.wait(20) != 0
    assert "is writable by others (mode 777)" in collector.log()
    assert stat.S_IMODE(collector.socket.parent.lstat().st_mode) == 0o777


def test_other_uid_refused_even_when_it_can_reach_the_socket(collector: Any) -> None:
    """A peer of another uid (SO_PEERCRED) is refused with permission_denied and nothing is written."""
    open_socket_to_everyone(collector)
    root = root_for_other_uid(collector.base)
    report = run_as_other_uid(collector, root, "intruder-1")
    assert report["raw"].get("reason") == "permission_denied", report
    assert report["raw"].get("fatal") is True, report
    assert report["client"]["outcome"] != "accepted", report
    assert not (root / "sessions").exists() or not list((root / "sessions").iterdir())
    assert metric_value(collector.metrics(), "gzia_connections_refused_total") >= 2
    assert "refused a connection from uid 12345" in collector.log()


@pytest.mark.parametrize("how", ["env", "config"])
def test_other_uid_allowed_when_listed(make_collector: Any, how: str) -> None:
    """A uid listed in allow_uids (GZ_IA_ALLOW_UIDS or the config key) is served into its own root."""
    if how == "env":
        collector = make_collector(start=False, env={"GZ_IA_ALLOW_UIDS": str(OTHER_UID)})
    else:
        collector = make_collector(start=False)
        collector.write_config(f"allow_uids = [{OTHER_UID}]\n")
    collector.start()
    open_socket_to_everyone(collector)
    root = root_for_other_uid(collector.base)
    report = run_as_other_uid(collector, root, "guest-1")
    assert report["raw"] == {"welcome": True}, report
    assert report["client"] == {"outcome": "accepted", "seq": 1}, report
    lines = (root / "sessions" / "guest-1.events.jsonl").read_text().splitlines()
    assert [json.loads(line)["action"] for line in lines] == ["probe"]


# --- paths from the wire ----------------------------------------------------------------------------


BAD_SESSION_IDS = [
    "../x",
    "../../etc/gz-ia-escape",
    "a/b",
    ".hidden",
    "..",
    ".",
    "/tmp/gz-ia-abs-escape",
    "a\x00b",
    "x" * 129,
    "",
    "a\\b",
    "ok\n",
]


@pytest.mark.parametrize("session_id", BAD_SESSION_IDS, ids=repr)
def test_path_traversal_session_ids_refused(collector: Any, session_id: str) -> None:
    """Unsafe session ids are refused with invalid_session_id and no file appears outside the root."""
    before = tree(collector.base)
    with pytest.raises(EventRejected) as caught:
        send(collector, session_id=session_id, action="escape", stage="READ")
    assert caught.value.reason == "invalid_session_id"
    created = tree(collector.base) - before
    inside = str(collector.root) + os.sep
    assert sorted(path for path in created if not path.startswith(inside)) == []
    sessions = collector.root / "sessions"
    assert sorted(sessions.iterdir()) == [] if sessions.exists() else True
    assert [r["reason"] for r in collector.rejects()] == ["invalid_session_id"]
    assert not Path("/tmp/gz-ia-abs-escape.events.jsonl").exists()
    assert not Path("/tmp/gz-ia-abs-escape").exists()
    assert not Path("/etc/gz-ia-escape.events.jsonl").exists()


@pytest.mark.parametrize("field", ["parent_session_id", "root_session_id"])
@pytest.mark.parametrize("parent", ["../x", "a/b", ".hidden", "x" * 129])
def test_path_traversal_parent_session_id_refused(collector: Any, parent: str, field: str) -> None:
    """An unsafe parent_session_id (or root_session_id) is refused with invalid_session_id too."""
    ids: dict[str, Any] = {field: parent} if field == "parent_session_id" else {"parent_session_id": "p", field: parent}
    with pytest.raises(EventRejected) as caught:
        send(collector, session_id="child-1", action="a", stage="READ", **ids)
    assert caught.value.reason == "invalid_session_id"
    assert not collector.session_file("child-1").exists()


def _refused_root(collector: Any, root: Path) -> EventRejected:
    """What the collector answers a client whose hello names ``root``."""
    client = collector.client()
    client._sender.root = root
    with pytest.raises(EventRejected) as caught:
        client.send(build_event(session_id="s-1", action="a", stage="READ", agent="sec"), timeout=10)
    client.close(timeout=0)
    return caught.value


def test_symlinked_root_refused(collector: Any) -> None:
    """A root that is a symlink is refused with root_not_allowed; nothing is written at its target."""
    real = collector.base / "real" / ".harness"
    real.mkdir(parents=True)
    link = collector.base / "link-harness"
    link.symlink_to(real, target_is_directory=True)
    assert _refused_root(collector, link).reason == "root_not_allowed"
    assert list(real.iterdir()) == []


def test_root_of_another_uid_refused(collector: Any) -> None:
    """A root owned by another uid than the sender's is refused with root_not_allowed."""
    root = root_for_other_uid(collector.base)
    assert _refused_root(collector, root).reason == "root_not_allowed"
    assert list(root.iterdir()) == []


def test_a_directory_of_other_files_is_never_made_a_root(collector: Any) -> None:
    """A client naming a directory of other things as its root (a home, a project, /etc for root) is
    refused with root_not_allowed and a sentence saying what to name; nothing is written into it."""
    project = collector.base / "project"
    project.mkdir()
    (project / "main.py").write_text("print()\n")
    refused = _refused_root(collector, project)
    assert refused.reason == "root_not_allowed"
    assert "name an empty directory or a .harness" in str(refused)
    assert sorted(path.name for path in project.iterdir()) == ["main.py"]


def test_planted_session_symlink_never_followed(collector: Any) -> None:
    """A symlink planted at <root>/sessions/<id>.events.jsonl is never written through nor read through."""
    outside = collector.base / "outside.txt"
    outside.write_text("precious\n")
    before = outside.stat()
    assert send(collector, session_id="warmup", action="a", stage="READ").seq == 1
    plant = collector.root / "sessions" / "plant.events.jsonl"
    plant.symlink_to(outside)
    outcome: str
    try:
        verdict = send(collector, timeout=5, session_id="plant", action="a", stage="READ")
        outcome = f"accepted seq {verdict.seq}"
    except (EventRejected, CollectorUnavailable) as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    assert outside.read_text() == "precious\n", f"written through the symlink ({outcome})"
    assert outside.stat().st_mtime_ns == before.st_mtime_ns
    assert plant.is_symlink() or not plant.exists()
    shown = collector.gz_ia("session", "logs", "plant", "--json")
    assert "precious" not in shown.stdout
    assert collector.proc.poll() is None, f"collector died ({outcome}):\n{collector.log()}"
    assert send(collector, session_id="after-plant", action="a", stage="READ").seq == 1


# --- sizes ------------------------------------------------------------------------------------------


def test_field_limits_exact(collector: Any) -> None:
    """Fields at their limits are accepted: action 512 chars, error 16 KiB, 32 attrs."""
    assert send(collector, session_id="lim-1", action="a" * 512, stage="READ").seq == 1
    assert (
        send(collector, session_id="lim-1", action="a" * 512, stage="FINISH", status="FAILED", error="e" * 16384).seq
        == 2
    )
    attrs = {f"k{i}": i for i in range(32)}
    assert send(collector, session_id="lim-1", action="b", stage="READ", attrs=attrs).seq == 3


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"action": "a" * 513, "stage": "READ"}, "field_too_long"),
        ({"action": "a", "stage": "PENDING", "agent": "g" * 129}, "field_too_long"),
        ({"action": "f", "stage": "READ", "role": "r" * 129}, "field_too_long"),
        ({"action": "e", "stage": "READ", "status": "FAILED", "error": "e" * (16 * 1024 + 1)}, "field_too_long"),
        ({"action": "k", "stage": "READ", "attrs": {f"k{i}": i for i in range(33)}}, "attrs_too_large"),
        ({"action": "v", "stage": "READ", "attrs": {"big": "x" * 1025}}, "attrs_too_large"),
        ({"action": "w", "stage": "READ", "attrs": {"k" * 65: 1}}, "attrs_too_large"),
    ],
    ids=["action", "agent", "role", "error", "attrs-count", "attr-value", "attr-key"],
)
def test_oversized_fields_refused(collector: Any, fields: dict[str, Any], reason: str) -> None:
    """Oversized fields are refused with their reason and never written.

    Sent as a client that does not cut them would send them (the Python client cuts them first)."""
    client = collector.client()
    event = {"timestamp": datetime.now(UTC), "session_id": "big-1", "agent": "sec", "status": "OK", **fields}
    verdict: Future[Any] = Future()
    client._sender.submit(msgspec.msgpack.encode(event), "big-1", verdict)
    with pytest.raises(EventRejected) as caught:
        verdict.result(timeout=5)
    client.close(timeout=0)
    assert caught.value.reason == reason, caught.value.detail
    assert not collector.session_file("big-1").exists()
    assert [r["reason"] for r in collector.rejects()] == [reason]


def test_oversized_frame_closes_connection(collector: Any) -> None:
    """A length prefix above 1 MiB gets a fatal frame_too_large error and the connection is closed."""
    from gz_ia.client.protocol import MAX_FRAME, Error, FrameReader, collector_message_decoder

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(collector.socket))
        sock.sendall((MAX_FRAME + 1).to_bytes(4, "big") + b"\0" * 1024)
        reader = FrameReader()
        replies = []
        while chunk := sock.recv(65536):
            replies += [collector_message_decoder.decode(body) for body in reader.feed(chunk)]
    assert len(replies) == 1, replies
    assert isinstance(replies[0], Error), replies
    assert replies[0].reason == "frame_too_large"
    assert replies[0].fatal


# --- the metrics endpoint ---------------------------------------------------------------------------


def _listening_inet_sockets(pid: int) -> list[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:  # the process's namespace
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:
                found.append(f"{table}:{parts[1]}")
    return found


def test_metrics_endpoint_on_loopback_by_default(make_collector: Any) -> None:
    """Without a metrics address the Prometheus endpoint listens on 127.0.0.1 only.

    The collector runs in a network namespace of its own (``unshare -n``, as root), so that the
    default port it binds is never the one of a collector of the same uid running on this machine."""
    collector = make_collector(start=False)
    collector.command = lambda: [
        "unshare",
        "--net",
        "sh",
        "-c",
        'ip link set lo up && exec "$0" "$@"',
        sys.executable,
        "-m",
        "gz_ia.collector",
        "--socket",
        str(collector.socket),
    ]
    collector.start()
    deadline = time.monotonic() + 10
    listening: list[str] = []
    while time.monotonic() < deadline and not listening:
        listening = _listening_inet_sockets(collector.proc.pid)
        time.sleep(0.05)
    assert listening, f"no metrics listener found:\n{collector.log()}"
    loopback = ("tcp:0100007F:", "tcp6:00000000000000000000000001000000:")
    assert all(entry.startswith(loopback) for entry in listening), listening
