"""The one admission of a new client connection (:func:`gz_ia.collector.service.admission.admit`):
who may connect, how many per uid and in all, and what is answered, counted and logged when refused.
The single process and the sharded front both admit through it (the integration tests of
test_connection_limits.py and test_security.py run against both)."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from gz_ia.client.protocol import RejectReason
from gz_ia.collector.config import CollectorConfig
from gz_ia.collector.metrics import Metrics
from gz_ia.collector.service import admission, connection
from gz_ia.collector.service.admission import ConnectionLimits, admit
from gz_ia.collector.sharding import front_client

OWN = os.getuid()
OTHER = OWN + 12345


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry(), version="v", process_metrics=False)


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield ours
    ours.close()
    theirs.close()


def _as(monkeypatch: pytest.MonkeyPatch, uid: int, pid: int = 4242) -> None:
    """Make the peer's credentials say ``uid`` (a socketpair's peer is this process)."""
    monkeypatch.setattr(admission, "peer_credentials", lambda _sock: (pid, uid, uid))


def _count(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    value = metrics.registry.get_sample_value(name, labels or {})
    return value or 0.0


def test_own_uid_is_admitted_and_counted(sock: socket.socket, metrics: Metrics) -> None:
    config = CollectorConfig()
    limits = ConnectionLimits(config, metrics.connections_over_limit)
    pid, uid, refusal = admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits)
    assert (pid, uid, refusal) == (os.getpid(), OWN, None)
    assert limits.open == 1
    assert _count(metrics, "gzia_connections_total") == 1
    assert _count(metrics, "gzia_connections_refused_total") == 0


def test_other_uid_is_refused_permission_denied_counted_and_logged(
    sock: socket.socket, metrics: Metrics, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _as(monkeypatch, OTHER)
    config = CollectorConfig()
    limits = ConnectionLimits(config, metrics.connections_over_limit)
    with caplog.at_level(logging.WARNING, logger="gz_ia.collector"):
        result = admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits)
    assert result == (4242, OTHER, (RejectReason.PERMISSION_DENIED, f"uid {OTHER} may not use this collector"))
    assert limits.open == 0, "a refused uid is not counted against the limits"
    assert _count(metrics, "gzia_connections_refused_total") == 1
    assert _count(metrics, "gzia_connections_total") == 0
    assert f"refused a connection from uid {OTHER} (pid 4242): not allowed" in caplog.text


def test_unreadable_credentials_are_refused_as_uid_minus_one(
    sock: socket.socket, metrics: Metrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_sock: socket.socket) -> tuple[int, int, int]:
        raise OSError("no credentials")

    monkeypatch.setattr(admission, "peer_credentials", broken)
    config = CollectorConfig()
    result = admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=None)
    assert result == (0, -1, (RejectReason.PERMISSION_DENIED, "uid -1 may not use this collector"))


def test_other_uid_in_allow_uids_is_admitted(
    sock: socket.socket, metrics: Metrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    _as(monkeypatch, OTHER)
    config = CollectorConfig(allow_uids=[OTHER])
    limits = ConnectionLimits(config, metrics.connections_over_limit)
    assert admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits) == (4242, OTHER, None)
    assert _count(metrics, "gzia_connections_total") == 1


def test_per_uid_limit_refuses_busy_and_other_uids_still_come_in(
    sock: socket.socket, metrics: Metrics, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config = CollectorConfig(max_connections=10, max_connections_per_uid=2, allow_uids=[OTHER])
    limits = ConnectionLimits(config, metrics.connections_over_limit)
    for _ in range(2):
        assert admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits).refusal is None
    with caplog.at_level(logging.WARNING, logger="gz_ia.collector"):
        refusal = admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits).refusal
    assert refusal == (
        RejectReason.BUSY,
        f"uid {OWN} holds its limit of 2 connections (max_connections_per_uid); retry later",
    )
    assert _count(metrics, "gzia_connections_over_limit_total", {"limit": "per_uid"}) == 1
    assert "refusing connections: uid" in caplog.text
    _as(monkeypatch, OTHER)
    assert admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits).refusal is None
    assert _count(metrics, "gzia_connections_total") == 3
    limits.release(OWN)
    monkeypatch.undo()
    assert admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits).refusal is None


def test_total_limit_refuses_busy_whoever_asks(
    sock: socket.socket, metrics: Metrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = CollectorConfig(max_connections=3, max_connections_per_uid=3, allow_uids=[OTHER])
    limits = ConnectionLimits(config, metrics.connections_over_limit)
    for _ in range(3):
        assert admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits).refusal is None
    _as(monkeypatch, OTHER)
    refusal = admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits).refusal
    assert refusal == (
        RejectReason.BUSY,
        "the collector holds its limit of 3 connections (max_connections); retry later",
    )
    assert _count(metrics, "gzia_connections_over_limit_total", {"limit": "total"}) == 1
    assert _count(metrics, "gzia_connections_total") == 3


def test_the_uid_check_comes_before_the_limits(
    sock: socket.socket, metrics: Metrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = CollectorConfig(max_connections=1)
    limits = ConnectionLimits(config, metrics.connections_over_limit)
    assert admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits).refusal is None
    _as(monkeypatch, OTHER)
    refusal = admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=limits).refusal
    assert refusal is not None and refusal[0] == RejectReason.PERMISSION_DENIED
    assert _count(metrics, "gzia_connections_over_limit_total", {"limit": "total"}) == 0


def test_without_limits_only_the_uid_is_checked(sock: socket.socket, metrics: Metrics) -> None:
    """A share behind a front holds no limits of its own (``limits=None``)."""
    config = CollectorConfig(max_connections=1)
    for _ in range(3):
        assert admit(sock, own_uid=OWN, config=config, metrics=metrics, limits=None).refusal is None


def test_the_single_process_and_the_front_admit_through_it() -> None:
    """Neither writes its own: each module's ``admit`` is this one (imported by name, not exported)."""
    assert vars(connection)["admit"] is admit
    assert vars(front_client)["admit"] is admit
