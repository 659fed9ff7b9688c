"""Connections are limited in total and per uid: the excess is refused ``busy`` at once, counted,
and every connection already open (and every one after a slot frees) is served."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import CollectorProcess, first_reply

from gz_ia.client import build_event
from gz_ia.client.protocol import PROTOCOL_VERSION, Error, Hello, RejectReason, Welcome, encode_frame
from gz_ia.collector.service.admission import MIN_CONNECTIONS


def _connect(collector: CollectorProcess) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(20)
    sock.connect(str(collector.socket))
    return sock


def _hello(sock: socket.socket, collector: CollectorProcess) -> Any:
    """Say hello and return the first reply: a welcome, or the refusal sent as it connected (when the
    collector closed the connection before the hello arrived, the refusal is still there to read)."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(encode_frame(Hello(proto=PROTOCOL_VERSION, producer="abc", pid=1, root=str(collector.root))))
    return first_reply(sock)


@contextlib.contextmanager
def _held(collector: CollectorProcess, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections, each welcomed, held open for the block."""
    held = [_connect(collector) for _ in range(count)]
    try:
        for sock in held:
            assert isinstance(_hello(sock, collector), Welcome)
        yield held
    finally:
        for sock in held:
            sock.close()


def _over_limit(collector: CollectorProcess, limit: str) -> float:
    return collector.metric(f'gzia_connections_over_limit_total{{limit="{limit}"}}')


def _send_one(collector: CollectorProcess, session_id: str) -> None:
    client = collector.client()
    try:
        client.send(build_event(session_id=session_id, action="a", stage="READ", agent="t"), timeout=20)
    finally:
        client.close()


@pytest.mark.shards(1, 2)
def test_connections_past_max_connections_are_refused_busy_and_the_others_served(
    make_collector: Any,
) -> None:
    collector = make_collector(env={"GZ_IA_MAX_CONNECTIONS": "6"})
    with _held(collector, 6) as held:
        extra = _connect(collector)
        reply = first_reply(extra)
        assert isinstance(reply, Error) and reply.reason == RejectReason.BUSY and reply.fatal
        assert "max_connections" in reply.detail and "6" in reply.detail
        assert extra.recv(1) == b"", "the refused connection is closed"
        extra.close()
        assert _over_limit(collector, "total") == 1
        held.pop().close()
        _send_one(collector, "after-a-slot-freed")  # a freed slot serves the next client
        assert [line["action"] for line in collector.session_lines("after-a-slot-freed")] == ["a"]


@pytest.mark.shards(1, 2)
def test_a_uid_past_max_connections_per_uid_is_refused_busy(make_collector: Any) -> None:
    collector = make_collector(env={"GZ_IA_MAX_CONNECTIONS": "10", "GZ_IA_MAX_CONNECTIONS_PER_UID": "3"})
    with _held(collector, 3):
        extra = _connect(collector)
        reply = first_reply(extra)
        assert isinstance(reply, Error) and reply.reason == RejectReason.BUSY
        assert "max_connections_per_uid" in reply.detail
        extra.close()
        assert _over_limit(collector, "per_uid") == 1


def test_the_default_limit_follows_the_descriptor_limit(make_collector: Any) -> None:
    """Under ``prlimit --nofile=256``, idle connections past the derived limit are refused busy
    instead of exhausting the descriptors: the collector keeps serving events."""
    collector = make_collector(start=False)
    collector.prefix = ["prlimit", "--nofile=256:256", "--"]
    collector.start()
    idle: list[socket.socket] = []
    refused = 0
    try:
        for _ in range(300):
            sock = _connect(collector)
            reply = _hello(sock, collector)
            if isinstance(reply, Welcome):  # admitted; then it stays idle
                idle.append(sock)
                continue
            assert isinstance(reply, Error) and reply.reason == RejectReason.BUSY, reply
            refused += 1
            sock.close()
            if refused == 5:
                break
        assert MIN_CONNECTIONS <= len(idle) < 256
        assert _over_limit(collector, "total") == 5
        for sock in idle[:3]:
            sock.close()
        del idle[:3]
        _send_one(collector, "still-served")
        assert len(collector.session_lines("still-served")) == 1
    finally:
        for sock in idle:
            sock.close()


def test_status_at_the_limit_says_the_collector_is_busy(make_collector: Any) -> None:
    """``gz-ia status`` refused ``busy`` exits 69 and says the collector is there but busy, not that
    none is reachable."""
    collector = make_collector(env={"GZ_IA_MAX_CONNECTIONS": "2"})
    with _held(collector, 2):
        result = collector.gz_ia("status")
        assert result.returncode == 69
        assert f"the collector at {collector.socket} is busy" in result.stderr
        assert "max_connections" in result.stderr
        assert "no collector is reachable" not in result.stderr
