"""Without a collector the client neither blocks nor crashes the agent, and its memory is bounded."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gz_ia.client import Client, CollectorUnavailable, LogEvent, Stage, Status, _batcher, _sender, build_event


def _event(n: int) -> dict[str, object]:
    return {"session_id": "s", "action": f"a{n}", "stage": "READ", "agent": "agy"}


def test_log_returns_without_a_collector_and_counts_what_it_drops(short_tmp: Path) -> None:
    """Without a spool, past its bound the client drops the oldest events and counts them; log() never raises."""
    client = Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness", max_events=100, spool=False)
    for n in range(1_000):
        client.log(**_event(n))  # type: ignore[arg-type]
    stats = client.stats()
    assert stats.queued + stats.unacknowledged <= 100
    assert stats.dropped == 1_000 - stats.queued - stats.unacknowledged
    assert stats.connected is False
    assert "cannot connect" in (stats.last_error or "") or stats.last_error is None
    assert client.flush(timeout=0.2) is False
    client.close(timeout=0)


def test_the_byte_bound_holds_as_well(short_tmp: Path) -> None:
    """A few huge events cannot exceed the byte bound of the buffer."""
    client = Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness", max_bytes=50_000, spool=False)
    for n in range(100):
        client.log(session_id="s", action=f"a{n}", stage="READ", agent="agy", error="x" * 5_000)
    stats = client.stats()
    assert stats.dropped >= 100 - 11
    client.close(timeout=0)


def test_send_reports_an_unreachable_collector(short_tmp: Path) -> None:
    """The waiting call raises CollectorUnavailable naming the socket, promptly."""
    client = Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness")
    event = build_event(session_id="s", action="a", stage="READ", agent="agy")
    with pytest.raises(CollectorUnavailable) as caught:
        client.send(event, timeout=30)
    assert caught.value.socket_path == str(short_tmp / "missing.sock")
    # Reported from the failed connection attempt itself, not from running out the timeout.
    assert "No such file or directory" in str(caught.value)
    client.close(timeout=0)


def test_invalid_arguments_are_counted_not_raised_unless_asked(short_tmp: Path) -> None:
    """A bad call (FAILED without error, unknown stage) never crashes the agent by default."""
    client = Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness")
    client.log(session_id="s", action="a", stage="FINISH", status="FAILED", agent="agy")
    client.log(session_id="s", action="a", stage="WRITING", agent="agy")
    assert client.stats().invalid == 2
    strict = Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness", raise_on_error=True)
    with pytest.raises(ValueError, match="non-empty error"):
        strict.log(session_id="s", action="a", stage="FINISH", status="FAILED", agent="agy")
    with pytest.raises(ValueError, match="stage must be READ, PENDING or FINISH"):
        strict.log(session_id="s", action="a", stage="WRITING", agent="agy")
    with pytest.raises(ValueError, match="status must be OK or FAILED"):
        strict.log(session_id="s", action="a", stage="READ", status="MAYBE", agent="agy")
    assert strict.stats().invalid == 0
    client.close(timeout=0)
    strict.close(timeout=0)


class _Unhashable(str):
    """A stage whose hash fails with what no lookup expects: the agent's object, not ours."""

    __slots__ = ()

    def __hash__(self) -> int:
        raise RuntimeError("no hash today")


def test_a_call_whose_values_fail_in_any_way_is_counted_and_delivery_goes_on(silent_socket: Path) -> None:
    """Whatever a deferred call's own values raise when the call is judged, that call alone is
    counted invalid: neither log() nor the thread that moves the queue raises."""
    client = Client(socket_path=silent_socket, root=silent_socket.parent / ".harness", linger=3600, spool=False)
    client.log(session_id="s", action="a", stage=_Unhashable("READ"), agent="agy")
    client.log(session_id="s", action="b", stage="READ", agent="agy")
    stats = client.stats()
    assert (stats.invalid, stats.queued + stats.unacknowledged) == (1, 1)
    assert "no hash today" in (stats.last_error or "")
    client.close(timeout=0)


def test_a_bad_call_left_for_the_sender_is_counted_with_its_reason(silent_socket: Path) -> None:
    """log() leaves a plain call to be judged when the queue is next moved: an unknown stage or
    status, or FAILED without an error, is counted invalid with its reason by the time stats()
    returns, and the good calls around it are queued in order."""
    client = Client(socket_path=silent_socket, root=silent_socket.parent / ".harness", linger=3600, spool=False)
    client.log(session_id="s", action="first", stage="READ", agent="agy")
    client.log(session_id="s", action="a", stage="READ", status="MAYBE", agent="agy")
    client.log(session_id="s", action="last", stage="FINISH", agent="agy")
    stats = client.stats()
    assert (stats.invalid, stats.queued) == (1, 2)
    assert "status must be OK or FAILED, not 'MAYBE'" in (stats.last_error or "")
    actions = [msgspec.msgpack.decode(item.body)["action"] for item in client._sender._events.items]
    assert actions == ["first", "last"]
    client.close(timeout=0)


def test_log_encodes_the_same_event_as_a_log_event() -> None:
    """log() builds a positional record; it must encode to the map a LogEvent encodes to."""
    from gz_ia.client._client import _LogRecord

    stamp = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    full = LogEvent(
        timestamp=stamp,
        session_id="s-1",
        parent_session_id="p-1",
        action="run the tests",
        stage=Stage.FINISH,
        status=Status.FAILED,
        agent="agy",
        role="tester",
        duration_ms=1234,
        error="two failed",
        attrs={"tokens": 10, "ok": False, "ratio": 0.5, "note": "x"},
    )
    record = _LogRecord(
        stamp, "s-1", "run the tests", Stage.FINISH, Status.FAILED, "agy", "p-1", "tester", 1234, "two failed",
        {"tokens": 10, "ok": False, "ratio": 0.5, "note": "x"},
    )  # fmt: skip
    minimal = _LogRecord(stamp, "s-1", "a", Stage.READ, Status.OK, "agy", None, None, None, None, None)
    decode = msgspec.msgpack.decode
    assert decode(msgspec.msgpack.encode(record)) == decode(msgspec.msgpack.encode(full))
    assert decode(msgspec.msgpack.encode(record), type=LogEvent) == full
    assert decode(msgspec.msgpack.encode(minimal)) == decode(
        msgspec.msgpack.encode(
            LogEvent(timestamp=stamp, session_id="s-1", action="a", stage=Stage.READ, status=Status.OK, agent="agy")
        )
    )


EXIT_HANDLER_AGENT = """
import atexit
import gz_ia.client as gz

atexit.register(lambda: gz.get_client().log(session_id="late", action="at exit", stage="READ", agent="agy"))
gz.get_client().log(session_id="late", action="first", stage="READ", agent="agy")
"""


def test_an_event_logged_by_an_exit_handler_registered_before_the_first_client_is_delivered(collector: Any) -> None:
    """atexit runs the handler registered last first: the client's own (deliver, then spool, then
    close) is registered when the package is imported, not when its first client is made, so that an
    agent's handler registered in between still logs into an open client."""
    subprocess.run([sys.executable, "-c", EXIT_HANDLER_AGENT], env=collector.env, check=True, timeout=60)
    assert [line["action"] for line in collector.session_lines("late")] == ["first", "at exit"]


def test_an_agent_logging_faster_than_the_sender_sends_gives_it_a_turn(
    collector: Any, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy agent thread holds the GIL but for the switch interval, and the sender thread needs it
    after every system call: log() gives it a turn, from the agent's thread, once per inbox of events
    while the queue lags behind the connection (here: the collector is stopped, the window full)."""
    turns: list[bool] = []

    def give_way() -> None:
        turns.append(threading.current_thread() is threading.main_thread())

    monkeypatch.setattr(_sender, "_give_way", give_way)
    client = collector.client(max_events=100_000)
    client.log(**_event(0))
    assert client.flush(timeout=10) and client.stats().connected
    collector.proc.send_signal(signal.SIGSTOP)
    try:
        for n in range(1, 20_001):  # spread over sessions: each may hold 10,000 open actions
            client.log(session_id=f"s{n % 50}", action=f"a{n}", stage="READ", agent="agy")
    finally:
        collector.proc.send_signal(signal.SIGCONT)
    lagging = 20_000 - _batcher.WINDOW_EVENTS - _sender._LAGGING_EVENTS
    assert lagging // _sender._TURN_EVENTS - 1 <= len(turns) <= 20_000 // _sender._TURN_EVENTS
    assert all(turns)
    assert client.flush(timeout=30)
    assert client.stats().accepted == 20_001
    client.close()

    # Not connected, the sender has nothing to send: an agent is not slowed for it.
    turns.clear()
    offline = Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness", max_events=100_000)
    for n in range(20_000):
        offline.log(**_event(n))  # type: ignore[arg-type]
    assert turns == []
    offline.close(timeout=0)


@pytest.mark.parametrize(
    "fields",
    [
        {"attrs": ["x" * 100]},
        {"attrs": {1: "x"}},
        {"action": None},
        {"agent": 7},
        {"error": b"e" * 20_000, "status": "FAILED"},
        {"session_id": 42},
    ],
    ids=["attrs-list", "attrs-int-key", "action-none", "agent-int", "error-bytes", "session-int"],
)
def test_log_never_raises_whatever_it_is_handed(short_tmp: Path, fields: dict[str, Any]) -> None:
    """Arguments of the wrong type are never raised by log(): the event is counted invalid or rejected,
    or queued for the collector to judge (a list of attrs), and never lost uncounted."""
    client = Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness", spool=False)
    client.log(**{"session_id": "s", "action": "a", "stage": "READ", "agent": "agy", **fields})
    stats = client.stats()
    assert stats.invalid + stats.rejected + stats.queued == 1, stats
    client.close(timeout=0)
