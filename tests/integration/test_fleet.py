"""The fleet with a real NATS server: machines ship, a hub writes every machine's sessions exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec
import pytest
from tests.conftest import free_port, send_events, wait_for
from tests.fixtures.chromium import chromium, open_page
from tests.integration.nats_harness import NatsServer, events, fleet_env, hub_env, read_root, wait_equal


@pytest.fixture(name="nats_server")
def _nats_server(short_tmp: Path) -> Iterator[NatsServer]:
    """One real NATS server with JetStream, this test's own."""
    server = NatsServer(short_tmp / "nats")
    server.start()
    yield server
    server.close()


def test_two_machines_reach_the_hub_exactly_once_and_apart_and_a_forged_host_is_refused(
    make_collector: Any, nats_server: NatsServer, short_tmp: Path
) -> None:
    """Two machines with a session id in common: the hub keeps each machine's session apart, equal to it;
    a message whose subject names another host than the one it claims is refused and counted."""
    environment, hub_root = hub_env(nats_server.url, short_tmp, GZ_IA_DURABILITY="fsync")
    hub = make_collector(env=environment)
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
    # Nothing of it reaches another local user: the hub's root and each machine's positions are its own.
    positions = list((short_tmp / "laptop-state").rglob("ship-*.json"))
    shipped = [*positions, *hub_root.rglob("*")]
    assert positions and all(path.stat().st_mode & 0o077 == 0 for path in [hub_root, *shipped]), [
        (str(path), oct(path.stat().st_mode)) for path in shipped if path.stat().st_mode & 0o077
    ]

    # A message claiming a host its subject does not name (hand-published: no collector sends one).
    line = (laptop.root / "sessions" / "s1.events.jsonl").read_text().splitlines()[0]

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

    # Reading on the hub: host on sessions and events in --json, host=NAME in logs, --host for a shared id.
    on_hub = {**hub.env, "GZ_IA_ROOT": str(hub_root)}

    def gz_ia(*args: str) -> list[dict[str, Any]]:
        result = hub.gz_ia(*args, env=on_hub)
        assert result.returncode == 0, result.stderr
        return [json.loads(line) for line in result.stdout.splitlines()]

    sessions = {row["session_id"]: row["host"] for row in gz_ia("sessions", "--json")}
    assert sessions == {"laptop.s1": "laptop", "laptop.sub1": "laptop", "ci-runner.s1": "ci-runner"}
    runner_events = gz_ia("logs", "--json", "host=ci-runner")
    assert len(runner_events) == 25 and {event["host"] for event in runner_events} == {"ci-runner"}
    shared = gz_ia("session", "logs", "s1", "--host", "ci-runner", "--json")
    assert [event["attrs"]["n"] for event in shared] == list(range(25))
    assert [event["parent_session_id"] for event in gz_ia("session", "logs", "sub1", "--json")] == ["laptop.s1"] * 6
    # The answers read the hub's sessions as they read one machine's: the runner's last cycle is open.
    hung = gz_ia("sessions", "--hung", "--after", "0s", "--json")
    assert [(row["session_id"], [cycle["action"] for cycle in row["hung"]]) for row in hung] == [
        ("ci-runner.s1", ["step-12"])
    ]
    ambiguous = hub.gz_ia("session", "logs", "s1", env=on_hub)
    assert ambiguous.returncode != 0 and "--host" in ambiguous.stderr and "ci-runner, laptop" in ambiguous.stderr
    # The answers take a machine's own id as the reading commands do.
    why = hub.gz_ia("session", "why", "s1", "--host", "laptop", env=on_hub)
    assert why.returncode == 1 and "no cycle of session laptop.s1" in why.stderr, why.stderr
    why = hub.gz_ia("session", "why", "sub1", env=on_hub)
    assert why.returncode == 1 and "laptop.sub1" in why.stderr, why.stderr
    assert "--host" in hub.gz_ia("session", "why", "s1", env=on_hub).stderr
    assert "HOST.SESSION_ID" in hub.gz_ia("session", "diff", "s1", "sub1", env=on_hub).stderr
    (compared,) = gz_ia("session", "diff", "laptop.s1", "ci-runner.s1", "--json")
    assert (compared["totals"]["a"]["actions"], compared["totals"]["b"]["actions"]) == (20, 13)

    # The page's API: every machine's sessions, each with its host, and host=NAME as a match.
    from tests.integration.test_web import request

    address = hub.gz_ia("ui", "--no-browser", env=on_hub, check=True).stdout.strip()
    query = parse_qs(urlsplit(address).query)
    key, root = query["key"][0], query["root"][0]
    assert root == str(hub_root)
    _code, headers, _ = request(hub.http_url, f"/ui/?key={key}&root={root}")
    jar = {"Cookie": headers["set-cookie"].split(";")[0]}
    _code, _, body = request(hub.http_url, f"/ui/api/sessions?root={root}&match=host=laptop", jar)
    rows = {row["session_id"]: row["host"] for row in json.loads(body)["sessions"]}
    assert rows == {"laptop.s1": "laptop", "laptop.sub1": "laptop"}

    # The page: each session shows its machine, and a click on it filters the list to that machine.
    from playwright.sync_api import expect

    with chromium() as browser:
        page = open_page(browser, address)
        listed = page.locator("#sessions tbody tr")
        expect(listed).to_have_count(3)
        page.click("#sessions tbody tr[data-session='ci-runner.s1'] button.host")
        expect(listed).to_have_count(1)
        assert listed.first.get_attribute("data-session") == "ci-runner.s1"
        assert page.input_value("#query") == "host=ci-runner"


def test_kill_of_the_shipping_collector_and_of_the_hub_mid_load_loses_and_doubles_nothing(
    make_collector: Any, nats_server: NatsServer, short_tmp: Path
) -> None:
    """SIGKILL of the machine's collector while it ships, then of the hub while it writes: every session equal."""
    environment, hub_root = hub_env(nats_server.url, short_tmp, GZ_IA_FLEET_ACK_WAIT="1", GZ_IA_DURABILITY="fsync")
    hub = make_collector(env=environment)
    laptop = make_collector(env=fleet_env(nats_server.url, "laptop", short_tmp / "laptop-state"))
    load = [event for number in range(20) for event in events(f"k{number}", 150)]
    send_events(laptop, load[:1500])
    assert _lines(hub_root) < 1500, "the first half was shipped before the kill: make the load larger"
    laptop.kill()  # while shipping: positions not saved yet, so acknowledged events go out again
    laptop.start()

    def kill_the_hub() -> (
        None
    ):  # as soon as it writes the second half: what it took and did not acknowledge comes again
        wait_for(lambda: _lines(hub_root) > 1500, interval=0.002, message="the hub to be writing the second half")
        hub.kill()

    killer = threading.Thread(target=kill_the_hub)
    killer.start()
    send_events(laptop, load[1500:])
    killer.join()
    hub.start()
    wait_equal(laptop.root, "laptop", hub_root)
    assert sum(len(lines) for lines in read_root(hub_root).values()) == len(load)


def test_a_page_cut_otherwise_after_a_crash_lands_exactly_once(
    make_collector: Any, nats_server: NatsServer, short_tmp: Path
) -> None:
    """A machine that crashed between the stream's acknowledgement and saving its position publishes
    again from the saved one, and cuts its pages otherwise when more was written meanwhile: the new
    message (another id, so the stream keeps it) overlaps what the hub holds, which drops that part
    event by event and writes the rest. The crash's state is made by hand (the positions file deleted
    while the server is down, so the re-publish is certain to be one message of events 1-30 over the
    stream's 1-15); everything else is real."""
    environment, hub_root = hub_env(nats_server.url, short_tmp, GZ_IA_DURABILITY="fsync")
    hub = make_collector(env=environment)
    laptop = make_collector(env=fleet_env(nats_server.url, "laptop", short_tmp / "laptop-state"))
    send_events(laptop, events("cut", 15))
    wait_equal(laptop.root, "laptop", hub_root)
    nats_server.stop()
    laptop.kill()
    positions = list((short_tmp / "laptop-state" / "fleet").glob("ship-*.json"))
    assert len(positions) == 1
    positions[0].unlink()
    laptop.start()
    send_events(laptop, events("cut", 15, start=15))
    nats_server.start()
    wait_equal(laptop.root, "laptop", hub_root)
    assert hub.metric('gzia_fleet_hub_events_total{outcome="written"}') == 30
    assert hub.metric('gzia_fleet_hub_events_total{outcome="duplicate"}') == 15


def test_pages_are_cut_to_the_servers_max_payload(make_collector: Any, short_tmp: Path) -> None:
    """A server whose ``max_payload`` is far below a page's bytes: the machine cuts its pages into messages
    that fit (the server would refuse a larger one), and the hub holds every event once."""
    server = NatsServer(short_tmp / "nats", config="max_payload: 4096\n")
    server.start()
    try:
        environment, hub_root = hub_env(server.url, short_tmp)
        make_collector(env=environment)
        laptop = make_collector(env=fleet_env(server.url, "laptop", short_tmp / "laptop-state"))
        # About a kilobyte a line: a page of 24 is about 24 KiB.
        large = [
            msgspec.structs.replace(event, attrs={**(event.attrs or {}), "pad": "x" * 900})
            for event in events("large", 24)
        ]
        send_events(laptop, large)
        wait_equal(laptop.root, "laptop", hub_root)

        async def stored() -> list[int]:
            import nats

            client = await nats.connect(server.url)
            try:
                js = client.jetstream()
                count = (await js.stream_info("GZIA")).state.messages
                return [len((await js.get_msg("GZIA", seq)).data or b"") for seq in range(1, count + 1)]
            finally:
                await client.close()

        sizes = asyncio.run(stored())
        assert len(sizes) >= 8 and max(sizes) <= 4096 - 1024, sizes  # three lines a message at most
    finally:
        server.close()


@pytest.mark.shards(1, 2)
def test_an_outage_of_the_server_is_caught_up(
    make_collector: Any, nats_server: NatsServer, short_tmp: Path, soak: Any
) -> None:
    """The server stops for minutes (``GZ_IA_SOAK_SECONDS`` bounds them) while an agent keeps logging at a
    pace: the machine keeps accepting, says it is behind, and catches up once the server is back."""
    environment, hub_root = hub_env(nats_server.url, short_tmp)
    make_collector(env=environment)
    laptop = make_collector(env=fleet_env(nats_server.url, "laptop", short_tmp / "laptop-state"))
    send_events(laptop, events("before", 20))
    wait_equal(laptop.root, "laptop", hub_root)
    nats_server.stop()
    written = 0
    outage_ends = time.monotonic() + soak(180.0)
    while written < 30 or time.monotonic() < outage_ends:
        send_events(laptop, events("during", 6, start=written))
        written += 6
        time.sleep(0.5)
    send_events(laptop, events("before", 10, start=20))
    behind = written + 10
    wait_for(lambda: _fleet(laptop)["lag_events"] == behind, message="the lag to count the events written meanwhile")
    assert _fleet(laptop)["connected"] is False
    assert "fleet: ship as laptop on nats://127.0.0.1:" in (text := laptop.gz_ia("status", check=True).stdout)
    assert f"NOT CONNECTED (events are kept and shipped later), {behind} events behind" in text
    assert laptop.metric('gzia_fleet_lag_events{role="ship"}') == behind
    nats_server.start()
    wait_equal(laptop.root, "laptop", hub_root)
    wait_for(lambda: _fleet(laptop)["lag_events"] == 0, message="the lag back to 0")


def _lines(root: Path) -> int:
    """Lines in a root's active session files (cheap enough to poll while the hub writes)."""
    return sum(path.read_bytes().count(b"\n") for path in (root / "sessions").glob("*.events.jsonl"))


def _fleet(collector: Any) -> dict[str, Any]:
    return dict(json.loads(collector.gz_ia("status", "--json", check=True).stdout)["fleet"])


_PERMISSIONS = """
authorization {
  users = [
    {user: laptop, password: "laptop-pw", permissions: {
      publish: {allow: ["gzia.events.laptop.>", "$JS.API.STREAM.INFO.GZIA"]}, subscribe: {allow: ["_INBOX.>"]}}}
    {user: hub, password: "hub-pw", permissions: {
      publish: {allow: ["$JS.API.>", "$JS.ACK.GZIA.>"]}, subscribe: {allow: ["_INBOX.>"]}}}
  ]
}
"""


def test_a_machine_can_publish_only_as_itself_over_tls(make_collector: Any, short_tmp: Path) -> None:
    """Per-subject permissions (docs/operations.md), over TLS: the laptop's user ships its own subject
    and no other; the certificate is made here by openssl, the servers' and clients' real TLS."""
    tls = short_tmp / "tls"
    tls.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tls / "key.pem"), "-out", str(tls / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    config = f'tls {{ cert_file: "{tls / "cert.pem"}", key_file: "{tls / "key.pem"}" }}\n' + _PERMISSIONS
    server = NatsServer(short_tmp / "nats", config=config)
    server.start()
    try:
        ca = {"GZ_IA_FLEET_TLS_CA": str(tls / "cert.pem")}
        environment, hub_root = hub_env(f"tls://hub:hub-pw@127.0.0.1:{server.port}", short_tmp, **ca)
        hub = make_collector(env=environment)
        laptop_url = f"tls://laptop:laptop-pw@127.0.0.1:{server.port}"
        laptop = make_collector(env=fleet_env(laptop_url, "laptop", short_tmp / "laptop-state", **ca))
        send_events(laptop, events("own", 6))
        wait_equal(laptop.root, "laptop", hub_root)
        assert _fleet(laptop)["url"] == f"tls://laptop:***@127.0.0.1:{server.port}"
        assert "laptop-pw" not in laptop.gz_ia("status", "--json", check=True).stdout

        async def impersonate() -> None:
            import ssl

            import nats

            context = ssl.create_default_context(cafile=str(tls / "cert.pem"))
            client = await nats.connect(laptop_url, tls=context)
            try:
                headers = {"Nats-Msg-Id": "x", "Gz-Ia-Host": "mallory"}
                with pytest.raises(Exception):  # noqa: B017, PT011  (the server drops it: no acknowledgement comes)
                    await client.jetstream().publish("gzia.events.mallory.abcdef", b"{}", timeout=1, headers=headers)
            finally:
                await client.close()

        asyncio.run(impersonate())
        log = server.log_path.read_text()
        assert "TLS required for client connections" in log
        assert 'Publish Violation - Subject "gzia.events.mallory.abcdef"' in log
        assert not any(name.startswith("mallory.") for name in read_root(hub_root))
        assert hub.metric('gzia_fleet_hub_events_total{outcome="written"}') == 6
    finally:
        server.close()


def test_each_machine_is_its_nkey_and_a_wrong_seed_is_refused(make_collector: Any, short_tmp: Path) -> None:
    """Users known by NKEY (docs/operations.md): the server holds each machine's public key and the
    machine signs its challenge with the seed in ``fleet.nkey_seed``, so the laptop's key ships the
    laptop's subject, and a machine whose seed the server does not know is refused (its events stay home).
    The keys are drawn here with ``nkeys``, the package nats-py signs with."""
    import nkeys

    seeds: dict[str, Path] = {}
    public: dict[str, str] = {}
    for name in ("laptop", "hub", "stranger"):
        seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
        seeds[name] = short_tmp / f"{name}.nk"
        seeds[name].write_bytes(seed)
        seeds[name].chmod(0o600)
        public[name] = nkeys.from_seed(bytearray(seed)).public_key.decode()
    config = _PERMISSIONS.replace('user: laptop, password: "laptop-pw"', f'nkey: "{public["laptop"]}"').replace(
        'user: hub, password: "hub-pw"', f'nkey: "{public["hub"]}"'
    )
    server = NatsServer(short_tmp / "nats", config=config)
    server.start()
    try:
        environment, hub_root = hub_env(server.url, short_tmp, GZ_IA_FLEET_NKEY_SEED=str(seeds["hub"]))
        hub = make_collector(env=environment)
        laptop = make_collector(
            env=fleet_env(server.url, "laptop", short_tmp / "laptop-state", GZ_IA_FLEET_NKEY_SEED=str(seeds["laptop"]))
        )
        stranger = make_collector(
            env=fleet_env(
                server.url, "laptop", short_tmp / "stranger-state", GZ_IA_FLEET_NKEY_SEED=str(seeds["stranger"])
            )
        )
        send_events(laptop, events("own", 6))
        send_events(stranger, events("posing", 4))
        wait_equal(laptop.root, "laptop", hub_root)
        refused = f'authentication error - Nkey "{public["stranger"]}"'
        wait_for(lambda: refused in server.log_path.read_text(), message="the server's refusal")
        assert _fleet(laptop)["connected"] is True and _fleet(stranger)["connected"] is False
        # Never let in, it still says how far behind it is: every event it wrote.
        wait_for(lambda: _fleet(stranger)["lag_events"] == 4, message="the refused machine's lag")
        assert "laptop.posing" not in read_root(hub_root)
        assert hub.metric('gzia_fleet_hub_events_total{outcome="written"}') == 6
    finally:
        server.close()


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def test_with_client_certificates_each_machine_is_its_certificate(make_collector: Any, short_tmp: Path) -> None:
    """Mutual TLS with no password (docs/operations.md): the server maps each client certificate to its
    user (``verify_and_map``), so the laptop's certificate ships the laptop's subject and no other, and
    a client without a certificate is refused. The CA and certificates are made here by openssl."""
    tls = short_tmp / "tls"
    tls.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=gz-ia test CA",
             "-keyout", str(tls / "ca.key"), "-out", str(tls / "ca.pem"))  # fmt: skip
    extensions = {"server": "subjectAltName=IP:127.0.0.1", "laptop": "extendedKeyUsage=clientAuth",
                  "hub": "extendedKeyUsage=clientAuth"}  # fmt: skip
    for name, extension in extensions.items():
        (tls / f"{name}.ext").write_text(extension + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(tls / f"{name}.key"),
                 "-out", str(tls / f"{name}.csr"))  # fmt: skip
        _openssl("x509", "-req", "-in", str(tls / f"{name}.csr"), "-CA", str(tls / "ca.pem"), "-CAkey",
                 str(tls / "ca.key"), "-CAcreateserial", "-days", "1", "-extfile", str(tls / f"{name}.ext"),
                 "-out", str(tls / f"{name}.pem"))  # fmt: skip
    config = (
        f'tls {{ cert_file: "{tls / "server.pem"}", key_file: "{tls / "server.key"}", '
        f'ca_file: "{tls / "ca.pem"}", verify_and_map: true }}\n'
        + _PERMISSIONS.replace('user: laptop, password: "laptop-pw"', 'user: "CN=laptop"').replace(
            'user: hub, password: "hub-pw"', 'user: "CN=hub"'
        )
    )
    server = NatsServer(short_tmp / "nats", config=config)
    server.start()
    try:
        url = f"tls://127.0.0.1:{server.port}"

        def identity(name: str) -> dict[str, str]:
            return {
                "GZ_IA_FLEET_TLS_CA": str(tls / "ca.pem"),
                "GZ_IA_FLEET_TLS_CERT": str(tls / f"{name}.pem"),
                "GZ_IA_FLEET_TLS_KEY": str(tls / f"{name}.key"),
            }

        environment, hub_root = hub_env(url, short_tmp, **identity("hub"))
        hub = make_collector(env=environment)
        laptop = make_collector(env=fleet_env(url, "laptop", short_tmp / "laptop-state", **identity("laptop")))
        send_events(laptop, events("own", 6))
        wait_equal(laptop.root, "laptop", hub_root)

        async def as_laptop_claiming(host: str) -> None:
            import ssl

            import nats

            context = ssl.create_default_context(cafile=str(tls / "ca.pem"))
            context.load_cert_chain(str(tls / "laptop.pem"), str(tls / "laptop.key"))
            client = await nats.connect(url, tls=context)
            try:
                headers = {"Nats-Msg-Id": "x", "Gz-Ia-Host": host}
                with pytest.raises(Exception):  # noqa: B017, PT011  (the server drops it: no acknowledgement comes)
                    await client.jetstream().publish(f"gzia.events.{host}.abcdef", b"{}", timeout=1, headers=headers)
            finally:
                await client.close()

        async def without_a_certificate() -> None:
            import ssl

            import nats

            context = ssl.create_default_context(cafile=str(tls / "ca.pem"))
            with pytest.raises(Exception):  # noqa: B017, PT011  (refused in the handshake)
                await nats.connect(url, tls=context, max_reconnect_attempts=0, connect_timeout=2, allow_reconnect=False)

        asyncio.run(as_laptop_claiming("mallory"))
        asyncio.run(without_a_certificate())
        log = server.log_path.read_text()
        assert 'Publish Violation - Subject "gzia.events.mallory.abcdef"' in log
        assert not any(name.startswith("mallory.") for name in read_root(hub_root))
        assert hub.metric('gzia_fleet_hub_events_total{outcome="written"}') == 6
    finally:
        server.close()


@pytest.mark.slow
def test_a_three_server_cluster_loses_one_server_mid_load(make_collector: Any, short_tmp: Path, soak: Any) -> None:
    """A stream replicated on three servers: SIGKILL of one while the machine ships and the hub writes."""
    cluster_ports = [free_port() for _ in range(3)]
    servers = [
        NatsServer(
            short_tmp / "cluster",
            name=f"n{index}",
            cluster=(port, [other for other in cluster_ports if other != port]),
        )
        for index, port in enumerate(cluster_ports)
    ]
    try:
        for server in servers:
            server.start(wait=False)
        for server in servers:
            wait_for(lambda server=server: "Server is ready" in server.log_path.read_text(), message="a server")
        url = ",".join(server.url for server in servers)
        environment, hub_root = hub_env(url, short_tmp, GZ_IA_FLEET_REPLICAS="3", GZ_IA_FLEET_ACK_WAIT="2")
        make_collector(env=environment)
        laptop = make_collector(env=fleet_env(url, "laptop", short_tmp / "laptop-state", GZ_IA_FLEET_REPLICAS="3"))
        send_events(laptop, [event for number in range(10) for event in events(f"c{number}", 20)])
        wait_equal(laptop.root, "laptop", hub_root)
        deadline = time.monotonic() + soak(2.0)
        batch = 1
        while batch < 3 or time.monotonic() < deadline:  # an agent's pace: 10 sessions, 10 events each 50 ms
            send_events(laptop, [event for number in range(10) for event in events(f"c{number}", 10, start=10 * batch)])
            if batch == 2:
                servers[0].stop(signal.SIGKILL)
            batch += 1
            time.sleep(0.05)
        hub = make_collector.made[0]

        def explain() -> str:
            return f"\nlaptop: {_fleet(laptop)}\n{laptop.log()[-4000:]}\nhub: {_fleet(hub)}\n{hub.log()[-4000:]}"

        wait_equal(laptop.root, "laptop", hub_root, timeout=90, explain=explain)
    finally:
        for server in servers:
            server.close()


def test_without_the_extra_the_collector_says_which_to_install(make_collector: Any, short_tmp: Path) -> None:
    """fleet.url set where nats-py is missing: the collector stops at start, naming the extra (nats-py hidden
    here by a package of that name that fails to import: no real installation lacks it in the workspace)."""
    shadow = short_tmp / "shadow" / "nats"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('nats-py is not installed here')\n")
    env = fleet_env("nats://127.0.0.1:1", "laptop", short_tmp / "state", PYTHONPATH=str(shadow.parent))
    collector = make_collector(env=env, start=False)
    collector.start(wait=False)
    assert collector.proc is not None
    assert collector.proc.wait(60) == 1
    assert "pip install 'gz-ia-collector[fleet]'" in collector.log()
