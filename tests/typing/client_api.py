"""Typical uses of the client's public API, checked by mypy --strict (``test_typing.py``), never run.

Each ``assert_type`` pins what a public annotation promises, so that a wrong or missing one fails
the check instead of reaching an agent's type checker.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, assert_type

import msgspec

import gz_ia.client as gz
from gz_ia.client import env, schema, spool, testing
from gz_ia.client.protocol import RejectReason
from gz_ia.client.schema import AttrValue


def scopes() -> None:
    with gz.session(agent="claude", role="planner") as session:
        assert_type(session, gz.SessionScope)
        assert_type(session.session_id, str)
        assert_type(session.parent_session_id, str | None)
        assert_type(session.child_env(), dict[str, str])
        with session.action("Index dependencies") as act:
            assert_type(act, gz.ActionScope)
            act.pending(files=12, ratio=0.5, cached=True, note="warm")
            act.set(tokens=1200)
        with gz.action("Edit", start=gz.Stage.PENDING) as act:
            act.fail("tests still fail")
        with session.subagent("reviewer") as child:
            assert_type(child, gz.SessionScope)
        session.log("Plan", gz.Stage.FINISH, gz.Status.FAILED, error="no plan", duration_ms=3)
    assert_type(gz.current_session(), gz.SessionScope | None)
    assert_type(gz.new_session_id(), str)


async def async_scopes(client: gz.AsyncClient, event: gz.LogEvent) -> None:
    async with gz.session(agent="claude", client=client) as session, session.action("Fetch") as act:
        assert_type(act, gz.ActionScope)
    assert_type(await client.send(event), gz.Verdict)
    assert_type(await client.flush(timeout=1.0), bool)
    await client.aclose()


def clients(event: gz.LogEvent) -> None:
    client = gz.Client(socket_path="/run/user/1000/gz-ia/collector.sock", root=Path("."), spool=False)
    assert_type(client.socket_path, Path)
    client.log(session_id="s1", action="Read", stage="READ", agent="claude", attrs={"bytes": 10})
    verdict = client.send(event, timeout=2.0)
    assert_type(verdict.seq, int)
    assert_type(verdict.duplicate, bool)
    assert_type(client.send_future(event), concurrent.futures.Future[gz.Verdict])
    assert_type(client.flush(), bool)
    client.close()
    sinks: list[gz.EventSink] = [client, gz.NullClient(), testing.CapturingClient()]
    assert_type(gz.configure(sinks[1]), gz.EventSink)
    assert_type(gz.get_client(), gz.EventSink)


def stats(client: gz.Client | gz.NullClient) -> int:
    counters = client.stats()
    assert_type(counters, gz.SenderStats)
    assert_type(counters.connected, bool)
    assert_type(counters.last_error, str | None)
    return counters.queued + counters.unacknowledged + counters.spooled + counters.dropped + counters.rejected


def events() -> None:
    event = gz.build_event(session_id="s1", action="Read", stage=gz.Stage.READ, agent="claude")
    assert_type(event, gz.LogEvent)
    assert_type(event.stage, gz.Stage)
    assert_type(event.status, gz.Status)
    assert_type(event.timestamp, datetime)
    assert_type(event.attrs, dict[str, AttrValue] | None)
    stamped = gz.build_event(
        session_id="s1", action="Run", stage="FINISH", status="FAILED", agent="claude", error="exit 1",
        timestamp=datetime.now(UTC),
    )  # fmt: skip
    assert_type(msgspec.structs.replace(stamped, duration_ms=5), gz.LogEvent)
    assert_type(schema.storable(float("nan")), Any)
    assert_type(schema.is_safe_session_id("s1"), bool)
    assert_type(schema.cut_text("long", 2), str)


def captured() -> list[gz.LogEvent]:
    with testing.capture_events() as logged:
        assert_type(logged, list[gz.LogEvent])
        with gz.session(agent="test"), gz.action("Check"):
            pass
    return logged


def errors(exc: gz.GzIaError) -> str:
    if isinstance(exc, gz.EventRejected):
        assert_type(exc.reason, RejectReason)
        return exc.detail
    if isinstance(exc, gz.CollectorUnavailable):
        return exc.socket_path
    return str(exc)


def environment() -> None:
    assert_type(env.default_socket_path(), Path)
    assert_type(env.default_spool_dir(), Path)
    assert_type(env.find_root(), Path)
    assert_type(env.tracing_disabled(), bool)
    assert_type(env.linger(), float)
    assert_type(env.parent_session(), str | None)
    variables: list[str] = [env.GZ_IA_SOCKET, env.GZ_IA_ROOT, env.GZ_IA_SPOOL_DIR, env.GZ_IA_DISABLED]
    del variables


def spools(directory: Path) -> Iterator[spool.SpoolRecord]:
    for producer, lock_fd, segments in spool.orphaned_spools(directory):
        assert_type(producer, str)
        assert_type(lock_fd, int)
        for path in segments:
            header, records = spool.read_segment(path)
            assert_type(header.version, int)
            assert_type(header.socket, str)
            yield from records
    header = spool.SpoolHeader(version=spool.SPOOL_VERSION, producer="ab12", root="/tmp/r")
    record = spool.SpoolRecord(pseq=1, session_id="s1", body=msgspec.Raw(b"\x80"))
    assert_type(spool.frame_record(header) + spool.frame_record(record), bytes)
