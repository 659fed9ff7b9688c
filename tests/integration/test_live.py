"""Live subscriptions on a real collector's socket: replay then live, filters, restarts, refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import REPO, SYSTEM_PYTHON, send_events

from gz_ia.client import build_event
from gz_ia.client.live import Gap, LiveEvent, Subscriber, SubscriptionRefused

OTHER_UID = 65534


def _events(session: str, count: int, *, parent: str | None = None, agent: str = "t") -> list[Any]:
    events = []
    for index in range(count):
        events.append(
            build_event(
                session_id=session,
                parent_session_id=parent,
                action=f"step-{index}",
                stage="READ",
                agent=agent,
            )
        )
    return events


def _take(subscriber: Subscriber, count: int) -> list[LiveEvent | Gap]:
    """The next ``count`` items of the subscription (bounded: a hang fails the test)."""
    subscriber.settimeout(30)
    items: list[LiveEvent | Gap] = []
    while len(items) < count:
        items += subscriber.receive()
    return items


def _actions(items: list[LiveEvent | Gap]) -> list[str]:
    return [json.loads(item.line)["action"] for item in items if isinstance(item, LiveEvent)]


def test_subscriber_gets_replay_then_live_with_the_stored_lines(collector: Any) -> None:
    """A subscriber from since_seq 0 gets what is buffered, then new events, each exactly as stored."""
    with Subscriber(collector.root, socket_path=collector.socket) as live:  # the collector buffers from now on
        assert live.newest_seq == 0
        epoch = live.epoch
        send_events(collector, _events("s1", 3))
    with Subscriber(collector.root, since_seq=0, epoch=epoch, socket_path=collector.socket) as replay:
        first = _take(replay, 3)
        assert [item.seq for item in first] == [1, 2, 3]  # type: ignore[union-attr]
        send_events(collector, _events("s2", 2))
        rest = _take(replay, 2)
    stored = [line.encode() for line in collector.session_file("s1").read_text().splitlines()]
    assert [item.line for item in first] == stored  # type: ignore[union-attr]
    assert _actions(rest) == ["step-0", "step-1"]


def test_filters_select_a_session_subtree_and_field_values(collector: Any) -> None:
    """sessions + subtree follow a tree as it grows; FIELD=VALUE keeps matching events only."""
    with (
        Subscriber(collector.root, sessions=["top"], subtree=True, socket_path=collector.socket) as tree,
        Subscriber(collector.root, matches=["agent=b"], socket_path=collector.socket) as only_b,
    ):
        send_events(collector, _events("top", 1, agent="a"))
        send_events(collector, _events("other", 1, agent="b"))
        send_events(collector, _events("child", 1, parent="top", agent="b"))
        send_events(collector, _events("grandchild", 1, parent="child", agent="a"))
        send_events(collector, _events("top", 1, agent="a"))
        got = _take(tree, 4)
        assert [json.loads(item.line)["session_id"] for item in got] == ["top", "child", "grandchild", "top"]  # type: ignore[union-attr]
        assert [json.loads(item.line)["session_id"] for item in _take(only_b, 2)] == ["other", "child"]  # type: ignore[union-attr]


def test_since_seq_in_the_future_is_refused(collector: Any) -> None:
    """A since_seq past the newest frame of the collector's epoch is refused as invalid."""
    send_events(collector, _events("s1", 2))
    with Subscriber(collector.root, socket_path=collector.socket) as live:
        epoch = live.epoch
    with pytest.raises(SubscriptionRefused) as caught:
        Subscriber(collector.root, since_seq=3, epoch=epoch, socket_path=collector.socket)
    assert caught.value.reason == "invalid_subscription"
    with pytest.raises(SubscriptionRefused):
        Subscriber(collector.root, matches=["nosuchfield=1"], socket_path=collector.socket)


def test_a_restarted_collector_answers_an_old_epoch_with_epoch_changed(collector: Any) -> None:
    """After a restart (a new epoch) a resume is told epoch_changed, then gets what the new one buffered."""
    send_events(collector, _events("s1", 2))
    with Subscriber(collector.root, socket_path=collector.socket) as live:
        old_epoch, old_seq = live.epoch, live.newest_seq
    assert old_seq == 2
    collector.restart()
    with Subscriber(collector.root, socket_path=collector.socket):
        send_events(collector, _events("s2", 1))
    with Subscriber(collector.root, since_seq=old_seq, epoch=old_epoch, socket_path=collector.socket) as resumed:
        assert resumed.epoch != old_epoch
        items = _take(resumed, 2)
    assert items[0] == Gap(1, 1, epoch_changed=True)
    assert _actions(items[1:]) == ["step-0"]


def test_cancel_ends_the_subscription(collector: Any) -> None:
    """Cancel ends a subscription after its last frames: iteration stops."""
    with Subscriber(collector.root, socket_path=collector.socket) as live:
        send_events(collector, _events("s1", 1))
        assert _actions(_take(live, 1)) == ["step-0"]
        assert collector.metric("gzia_live_subscribers") == 1
        live.cancel()
        assert list(live) == []
    assert collector.metric("gzia_live_subscribers") == 0


def test_another_uid_cannot_subscribe(make_collector: Any) -> None:
    """A uid allowed to send events (allow_uids) is still refused a subscription: reading is the owner's."""
    collector = make_collector(start=False, env={"GZ_IA_ALLOW_UIDS": str(OTHER_UID)})
    collector.start()
    for directory in (collector.base.parent, collector.base, collector.socket.parent):
        directory.chmod(0o755)
    collector.socket.chmod(0o666)
    send_events(collector, _events("secret", 1))
    probe = (
        "import socket, sys\n"
        "from gz_ia.client.protocol import Subscribe, encode_frame, FrameReader, live_message_decoder\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
        "s.sendall(encode_frame(Subscribe(root=sys.argv[2], since_seq=0)))\n"
        "reader = FrameReader(); bodies = []\n"
        "while not bodies:\n"
        "    data = s.recv(65536)\n"
        "    if not data: break\n"
        "    bodies += reader.feed(data)\n"
        "for body in bodies: print(live_message_decoder.decode(body))\n"
    )
    site = sysconfig.get_paths()["purelib"]
    result = subprocess.run(
        ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", SYSTEM_PYTHON, "-c", probe,
         str(collector.socket), str(collector.root)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join([str(REPO / "client" / "src"), site])},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "permission_denied" in result.stdout, result.stdout
    assert "secret" not in result.stdout
    assert Path(collector.session_file("secret")).exists()


@pytest.mark.shards(2)
def test_a_sharded_collector_refuses_subscriptions(collector: Any) -> None:
    """With shards = 2 no process holds one ring per root: subscribe is refused (readers use the files)."""
    with pytest.raises(SubscriptionRefused) as caught:
        Subscriber(collector.root, socket_path=collector.socket)
    assert caught.value.reason == "invalid_subscription"
    assert "shards" in caught.value.detail
