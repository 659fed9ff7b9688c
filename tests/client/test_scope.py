"""Scopes carry attribution and turn a block of code into a READ/PENDING/FINISH cycle."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from typing import Any

import msgspec
import pytest

import gz_ia.client as gz
from gz_ia.client import Stage, Status
from gz_ia.client.testing import CapturingClient, capture_events


def test_an_action_logs_read_pending_and_finish_ok_with_duration() -> None:
    """READ on entry, PENDING when asked, FINISH OK with the elapsed time on exit; attribution from the session."""
    with capture_events() as events, gz.session("s1", agent="claude", role="planner") as scope:
        with scope.action("Index deps") as act:
            act.pending(files=3)
            act.set(tokens=120)
    assert [(e.stage, e.status) for e in events] == [
        (Stage.READ, Status.OK),
        (Stage.PENDING, Status.OK),
        (Stage.FINISH, Status.OK),
    ]
    assert {(e.session_id, e.agent, e.role, e.action) for e in events} == {("s1", "claude", "planner", "Index deps")}
    assert events[1].attrs == {"files": 3}
    assert events[2].attrs == {"tokens": 120}
    assert events[2].duration_ms is not None and events[2].duration_ms >= 0
    assert events[0].parent_session_id is None


def test_an_exception_finishes_failed_with_the_error_and_is_reraised() -> None:
    """The action's FINISH is FAILED with the exception text as error, and the exception propagates."""
    with capture_events() as events, gz.session("s1", agent="a") as scope:
        with pytest.raises(KeyError), scope.action("Parse"):
            raise KeyError("missing")
    assert events[-1].stage is Stage.FINISH
    assert events[-1].status is Status.FAILED
    assert events[-1].error == "KeyError: 'missing'"


def test_fail_marks_failure_without_raising() -> None:
    """act.fail() turns the closing FINISH into FAILED without an exception."""
    with capture_events() as events, gz.session("s1", agent="a") as scope:
        with scope.action("Lint") as act:
            act.fail("3 errors")
    assert (events[-1].status, events[-1].error) == (Status.FAILED, "3 errors")


def test_action_can_start_in_pending() -> None:
    """An action that changes things from the start opens with PENDING."""
    with capture_events() as events, gz.session("s1", agent="a"):
        with gz.action("Write file", start=Stage.PENDING):
            pass
    assert [e.stage for e in events] == [Stage.PENDING, Stage.FINISH]


def test_subagent_sessions_name_their_parent() -> None:
    """A subagent scope, or a session opened inside another, carries parent_session_id."""
    with capture_events() as events, gz.session("root", agent="claude") as scope:
        with scope.subagent("agy", role="tester", session_id="child") as child:
            child.log("Run tests", Stage.PENDING)
        with gz.session("nested", agent="x") as nested:
            nested.log("Look", Stage.READ)
    assert [(e.session_id, e.parent_session_id, e.agent) for e in events] == [
        ("child", "root", "agy"),
        ("nested", "root", "x"),
    ]


def test_subagents_of_subagents_name_the_root_of_their_tree() -> None:
    """Below the first level, events carry root_session_id (the top of the chain); a root's own
    events and its direct subagents' carry none. A scope exports the root for child processes while
    it is open, and what the process inherited comes back after."""
    inherited = os.environ.get("GZ_IA_ROOT_SESSION_ID")
    with capture_events() as events, gz.session("root", agent="a") as root:
        root.log("x", "READ")
        assert os.environ["GZ_IA_ROOT_SESSION_ID"] == "root"
        with root.subagent(session_id="middle") as middle:
            middle.log("x", "READ")
            with gz.session("grandchild", agent="a") as grandchild:
                assert os.environ["GZ_IA_ROOT_SESSION_ID"] == "root"
                grandchild.log("x", "READ")
                grandchild.subagent(session_id="deeper").log("x", "READ")
            assert middle.child_env({})["GZ_IA_ROOT_SESSION_ID"] == "root"
    assert [(e.session_id, e.parent_session_id, e.root_session_id) for e in events] == [
        ("root", None, None),
        ("middle", "root", None),
        ("grandchild", "middle", "root"),
        ("deeper", "grandchild", "root"),
    ]
    assert os.environ.get("GZ_IA_ROOT_SESSION_ID") == inherited


def test_a_child_process_inherits_its_parent_session_from_the_environment() -> None:
    """A process started inside a session scope opens subagent sessions without code changes."""
    code = (
        "import json, gz_ia.client as gz\n"
        "from gz_ia.client.testing import capture_events\n"
        "with capture_events() as events, gz.session(agent='child') as s:\n"
        "    s.log('x', 'READ')\n"
        "print(json.dumps([events[0].parent_session_id, events[0].session_id]))\n"
    )
    siblings: list[gz.SessionScope] = []
    with gz.session("parent-1", agent="a", client=CapturingClient()):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        # Another thread of this process has no enclosing scope: it must not adopt our own export.
        thread = threading.Thread(target=lambda: siblings.append(gz.session(agent="a")))
        thread.start()
        thread.join()
    parent, child = json.loads(result.stdout)
    assert parent == "parent-1"
    assert child != "parent-1"
    assert siblings[0].parent_session_id is None
    assert "GZ_IA_PARENT_SESSION_ID" not in os.environ


def test_child_env_makes_a_launched_process_a_subagent_without_entering_the_scope() -> None:
    """``child_env()`` gives a launcher the environment a scope would export, from any base, without
    the exporting process's pid (a child that execs in place must not take its own sessions for siblings)."""
    code = (
        "import json, gz_ia.client as gz\n"
        "from gz_ia.client.testing import capture_events\n"
        "with capture_events() as events, gz.session(agent='child') as s:\n"
        "    s.log('x', 'READ')\n"
        "print(json.dumps(events[0].parent_session_id))\n"
    )
    scope = gz.session("parent-2", agent="a", client=CapturingClient())
    child_env = scope.child_env({**os.environ, "GZ_IA_PARENT_PID": str(os.getpid())})
    assert "GZ_IA_PARENT_PID" not in child_env
    result = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == "parent-2"
    assert "GZ_IA_PARENT_SESSION_ID" not in os.environ


def test_action_outside_a_session_is_a_clear_programming_error() -> None:
    """gz.action() with no session scope raises at once with a message saying what to do."""
    with pytest.raises(RuntimeError, match="no gz-ia session is active"):
        gz.action("x")


def test_the_null_client_does_nothing_and_never_raises() -> None:
    """With tracing off, scopes and calls run and produce nothing."""
    null = gz.NullClient()
    with gz.session("s", agent="a", client=null) as scope, scope.action("x") as act:
        act.pending()
    assert null.flush() is True
    assert null.stats().accepted == 0


def test_the_null_action_scope_makes_no_system_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """With tracing off an action scope draws no cycle id: ``os.urandom`` (a getrandom system call)
    is never called, whatever the scope is asked to do, failing included."""
    null = gz.NullClient()
    with gz.session("s", agent="a", client=null) as scope:

        def no_system_call(size: int) -> bytes:
            raise AssertionError(f"os.urandom({size}) called on the null path")

        monkeypatch.setattr(os, "urandom", no_system_call)
        with scope.action("x") as act:
            act.pending(files=1)
            act.set(tokens=2**64)
        with pytest.raises(KeyError), scope.action("y", start=Stage.PENDING):
            raise KeyError("k")
        with scope.action("z") as act:
            act.fail("no")


def test_action_scopes_draw_their_cycle_ids_without_a_system_call_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cycle ids are the process's random prefix and a number: every scope's id is its own, and
    ``os.urandom`` is called at most once for all of them (for the prefix)."""
    from gz_ia.client import _scope

    calls: list[int] = []
    real = os.urandom

    here = threading.current_thread()

    def counted(size: int) -> bytes:
        if threading.current_thread() is here:  # not another test's sender thread, still running
            calls.append(size)
        return real(size)

    # Patched once the capturing client is installed: the default client that capture_events()
    # may make first draws a producer id of its own.
    with capture_events() as events, gz.session("s", agent="a") as scope:
        monkeypatch.setattr(os, "urandom", counted)
        for _ in range(100):
            with scope.action("same"):
                pass
    cycles = {event.cycle for event in events}
    assert len(cycles) == 100
    assert len(calls) <= 1
    assert all(cycle is not None and cycle.startswith(_scope._cycle_prefix) for cycle in cycles)


def test_a_forked_child_draws_cycle_ids_apart_from_its_parent() -> None:
    """A forked child draws a prefix of its own: its scopes never reuse the parent's ids."""
    with capture_events() as events, gz.session("s", agent="a") as scope:
        with scope.action("before fork"):
            pass
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report one cycle id and leave at once
            with scope.action("in child"):
                pass
            os.write(write_end, (events[-1].cycle or "").encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            child_cycle = pipe.read().decode()
        os.waitpid(pid, 0)
        with scope.action("after fork"):
            pass
    parent_prefix = (events[0].cycle or "")[:10]
    assert child_cycle and not child_cycle.startswith(parent_prefix)
    assert (events[-1].cycle or "").startswith(parent_prefix)


def test_disabled_by_environment_gives_the_null_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """GZ_IA_DISABLED=1 makes the default client the null client."""
    monkeypatch.setenv("GZ_IA_DISABLED", "1")
    previous = gz.get_client()
    try:
        gz.configure(None, enabled=False)
        assert isinstance(gz.get_client(), gz.NullClient)
    finally:
        gz.configure(previous)


def test_scopes_work_with_async_with() -> None:
    """Async agents use the same scopes with async with; tasks keep their own current session."""

    async def agent(name: str) -> None:
        async with gz.session(name, agent="a") as scope, scope.action("step"):
            await asyncio.sleep(0)
            assert gz.current_session() is scope

    with capture_events() as events:

        async def main() -> None:
            await asyncio.gather(agent("t1"), agent("t2"))

        asyncio.run(main())
    assert sorted(e.session_id for e in events) == ["t1", "t1", "t2", "t2"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gz.session("bad/id", agent="a"), "session id"),
        (lambda: gz.session("." + "x", agent="a"), "session id"),
        (lambda: gz.session("s", agent=""), "agent"),
        (lambda: gz.session("s", agent="a" * 129), "agent"),
        (lambda: gz.session("s", agent="a", role="r" * 129), "role"),
        (lambda: gz.session("s", agent="a", parent_session_id="../up"), "parent session id"),
        (lambda: gz.session("s", agent="a").subagent(""), "agent"),
        (lambda: gz.session("s", agent="a").subagent(session_id="bad/id"), "session id"),
        (lambda: gz.session("s", agent="a").subagent(role="r" * 200), "role"),
    ],
)
def test_invalid_ids_raise_in_the_scope_constructor(make: Any, message: str) -> None:
    """An id the collector would refuse fails where the caller sees it, not silently at delivery."""
    with capture_events() as events, pytest.raises(ValueError, match=message):
        make()
    assert events == []


def test_ids_of_the_wrong_type_raise_type_error() -> None:
    """A session id or agent that is not a string is a TypeError, at once."""
    with pytest.raises(TypeError, match="agent"):
        gz.session("s", agent=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="session id"):
        gz.session(42, agent="a")  # type: ignore[arg-type]


def test_a_scope_hands_the_real_client_the_fields_log_would(short_tmp: Any) -> None:
    """Scopes call the real client by position (Client.log_fields): the event queued is the one
    Client.log makes of the same fields, the time aside."""
    client = gz.Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness", linger=3600, spool=False)
    scope = gz.session(
        "s-1", agent="agy", role="planner", parent_session_id="p-1", root_session_id="r-1", client=client
    )
    with scope.action("step", role="tool") as act:
        act.pending()
    scope.log("note", "READ", cycle="c1")
    client.log(session_id="s-1", parent_session_id="p-1", root_session_id="r-1", agent="agy", role="planner",
               action="note", stage="READ", cycle="c1")  # fmt: skip
    assert client.stats().queued == 5
    events = [msgspec.msgpack.decode(item.body) for item in client._sender._events.items]
    for event in events:
        del event["timestamp"]
    read, pending, finish, note, logged = events
    assert note == logged == {
        "session_id": "s-1", "parent_session_id": "p-1", "root_session_id": "r-1", "agent": "agy",
        "role": "planner", "action": "note", "stage": "READ", "status": "OK", "cycle": "c1",
    }  # fmt: skip
    assert [(e["stage"], e["role"], e["cycle"]) for e in (read, pending, finish)] == [
        ("READ", "tool", act.cycle), ("PENDING", "tool", act.cycle), ("FINISH", "tool", act.cycle)
    ]  # fmt: skip
    assert "duration_ms" in finish and finish["status"] == "OK"
    client.close(timeout=0)


def test_a_scope_judges_its_calls_as_its_client_does(short_tmp: Any) -> None:
    """A scope leaves a call in the sender's inbox itself only for a client that defers calls: a
    bad one is counted later, as Client.log's would be, and a client that raises on errors raises
    from the scope's log() at once."""
    lenient = gz.Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness", linger=3600, spool=False)
    scope = gz.session("s-1", agent="agy", client=lenient)
    scope.log("a", "WRITING")
    scope.log("b", "READ", "MAYBE")
    scope.log(42, "READ")  # type: ignore[arg-type]
    stats = lenient.stats()
    assert (stats.invalid, stats.queued) == (3, 0)
    # The last error is whichever call was judged last: the sender's thread judges deferred calls.
    judged = ("stage must be READ, PENDING or FINISH", "status must be OK or FAILED", "action must be a string")
    assert any(message in (stats.last_error or "") for message in judged), stats.last_error
    strict = gz.Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness", raise_on_error=True)
    with pytest.raises(ValueError, match="stage must be READ, PENDING or FINISH"):
        gz.session("s-1", agent="agy", client=strict).log("a", "WRITING")
    assert strict.stats().invalid == 0
    lenient.close(timeout=0)
    strict.close(timeout=0)
