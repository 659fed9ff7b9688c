"""The fleet with a real NATS server: machines ship, a hub writes every machine's sessions exactly once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import send_events, wait_for
from tests.integration.nats_harness import NatsServer, events, fleet_env, read_root, wait_equal


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


def test_kill_of_the_shipping_collector_and_of_the_hub_mid_load_loses_and_doubles_nothing(
    make_collector: Any, nats_server: NatsServer, short_tmp: Path
) -> None:
    """SIGKILL of the machine's collector while it ships, then of the hub while it writes: every session equal."""
    hub_root = short_tmp / "hub" / ".harness"
    hub_env = fleet_env(
        nats_server.url,
        "hub",
        short_tmp / "hub-state",
        GZ_IA_FLEET_HUB="true",
        GZ_IA_FLEET_HUB_ROOT=str(hub_root),
        GZ_IA_FLEET_ACK_WAIT="1",
        GZ_IA_DURABILITY="fsync",
    )
    hub = make_collector(env=hub_env)
    laptop = make_collector(env=fleet_env(nats_server.url, "laptop", short_tmp / "laptop-state"))
    load = [event for number in range(20) for event in events(f"k{number}", 150)]
    send_events(laptop, load[:1500])
    assert _lines(hub_root) < 1500, "the first half was shipped before the kill: make the load larger"
    laptop.kill()  # while shipping: positions not saved yet, so acknowledged events go out again
    laptop.start()
    send_events(laptop, load[1500:])
    wait_for(lambda: _lines(hub_root) > 1700, message="the hub to be writing the second half")
    hub.kill()  # while writing: what it took and wrote but did not acknowledge comes again
    assert _lines(hub_root) < len(load), "the hub had it all before the kill: make the load larger"
    hub.start()
    wait_equal(laptop.root, "laptop", hub_root)
    assert sum(len(lines) for lines in read_root(hub_root).values()) == len(load)


def test_an_outage_of_the_server_is_caught_up(make_collector: Any, nats_server: NatsServer, short_tmp: Path) -> None:
    """The server stops: the machine keeps accepting, says it is behind, and catches up once the server is back."""
    hub_root = short_tmp / "hub" / ".harness"
    make_collector(
        env=fleet_env(
            nats_server.url, "hub", short_tmp / "hub-state", GZ_IA_FLEET_HUB="true", GZ_IA_FLEET_HUB_ROOT=str(hub_root)
        )
    )
    laptop = make_collector(env=fleet_env(nats_server.url, "laptop", short_tmp / "laptop-state"))
    send_events(laptop, events("before", 20))
    wait_equal(laptop.root, "laptop", hub_root)
    nats_server.stop()
    send_events(laptop, [*events("during", 30), *events("before", 10, start=20)])
    wait_for(lambda: _fleet(laptop)["lag_events"] == 40, message="the lag to count the events written meanwhile")
    assert _fleet(laptop)["connected"] is False
    assert laptop.metric('gzia_fleet_lag_events{role="ship"}') == 40
    nats_server.start()
    wait_equal(laptop.root, "laptop", hub_root)
    wait_for(lambda: _fleet(laptop)["lag_events"] == 0, message="the lag back to 0")


def test_a_message_whose_subject_names_another_host_is_refused_and_counted(
    make_collector: Any, nats_server: NatsServer, short_tmp: Path
) -> None:
    """A message claiming a host its subject does not name (hand-published: no collector sends one)."""
    hub_root = short_tmp / "hub" / ".harness"
    hub = make_collector(
        env=fleet_env(
            nats_server.url, "hub", short_tmp / "hub-state", GZ_IA_FLEET_HUB="true", GZ_IA_FLEET_HUB_ROOT=str(hub_root)
        )
    )
    laptop = make_collector(env=fleet_env(nats_server.url, "laptop", short_tmp / "laptop-state"))
    send_events(laptop, events("honest", 4))
    wait_equal(laptop.root, "laptop", hub_root)
    line = (laptop.root / "sessions" / "honest.events.jsonl").read_text().splitlines()[0]

    async def forge() -> None:
        import nats

        client = await nats.connect(nats_server.url)
        headers = {"Nats-Msg-Id": "forged-1", "Gz-Ia-Host": "laptop"}
        await client.jetstream().publish("gzia.events.mallory.abcdef", line.encode(), headers=headers)
        await client.close()

    asyncio.run(forge())
    wait_for(lambda: hub.metric('gzia_fleet_refused_total{reason="host_mismatch"}') == 1, message="the refusal")
    assert not any(name.startswith("mallory.") for name in read_root(hub_root))
    wait_equal(laptop.root, "laptop", hub_root)


def _lines(root: Path) -> int:
    """Lines in a root's active session files (cheap enough to poll while the hub writes)."""
    return sum(path.read_bytes().count(b"\n") for path in (root / "sessions").glob("*.events.jsonl"))


def _fleet(collector: Any) -> dict[str, Any]:
    return dict(json.loads(collector.gz_ia("status", "--json", check=True).stdout)["fleet"])
