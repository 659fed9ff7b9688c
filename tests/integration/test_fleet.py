"""The fleet with a real NATS server: machines ship, a hub writes every machine's sessions exactly once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import send_events
from tests.integration.nats_harness import NatsServer, events, fleet_env, wait_equal


@pytest.fixture(name="nats_server")
def _nats_server(short_tmp: Path) -> Iterator[NatsServer]:
    """One real NATS server with JetStream, this test's own."""
    server = NatsServer(short_tmp / "nats")
    server.start()
    yield server
    server.close()


def test_two_machines_reach_the_hub_exactly_once_and_apart(
    make_collector: Any, nats_server: NatsServer, short_tmp: Path
) -> None:
    """Two machines with a session id in common: the hub keeps each machine's session apart, equal to it."""
    hub_root = short_tmp / "hub" / ".harness"
    hub = make_collector(
        env=fleet_env(
            nats_server.url,
            "hub",
            short_tmp / "hub-state",
            GZ_IA_FLEET_HUB="true",
            GZ_IA_FLEET_HUB_ROOT=str(hub_root),
            GZ_IA_DURABILITY="fsync",
        )
    )
    laptop = make_collector(env=fleet_env(nats_server.url, "laptop", short_tmp / "laptop-state"))
    runner = make_collector(env=fleet_env(nats_server.url, "ci-runner", short_tmp / "runner-state"))
    send_events(laptop, [*events("s1", 40), *events("sub1", 6, parent="s1")])
    send_events(runner, events("s1", 25))
    wait_equal(laptop.root, "laptop", hub_root)
    wait_equal(runner.root, "ci-runner", hub_root)
    status = json.loads(laptop.gz_ia("status", "--json", check=True).stdout)["fleet"]
    assert status["role"] == "ship" and status["host"] == "laptop" and status["url"] == nats_server.url
    assert status["connected"] is True and status["lag_events"] == 0
    hub_status = json.loads(hub.gz_ia("status", "--json", check=True).stdout)["fleet"]
    assert hub_status["role"] == "hub" and hub_status["connected"] is True
    assert hub.metric('gzia_fleet_hub_events_total{outcome="written"}') == 40 + 6 + 25
