"""The linger: events logged apart share a frame, and nothing that waits is held back by it.

The frame counts are read from a stand-in speaking the wire protocol through the client's own
msgspec types, because what is asserted is the frames themselves, which a real collector does not
show; what a caller waits for (send, flush, close) is checked against a real collector.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gz_ia.client import Client, build_event, protocol
from gz_ia.client import _sender as sender_module
from gz_ia.client import env as client_env


class StandIn:
    """Answers one client connection: Welcome, then Verdicts for every Batch, keeping each Batch."""

    def __init__(self, path: Path) -> None:
        self.batches: list[protocol.Batch] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(1)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with self._server, self._server.accept()[0] as connection:
            reader = protocol.FrameReader()
            while data := connection.recv(1 << 16):
                for body in reader.feed(data):
                    message = protocol.client_message_decoder.decode(body)
                    if isinstance(message, protocol.Hello):
                        connection.sendall(protocol.encode_frame(protocol.Welcome(proto=1, version="stand-in")))
                        continue
                    assert isinstance(message, protocol.Batch)
                    self.batches.append(message)
                    count = len(message.events)
                    verdicts = protocol.Verdicts(first=message.first, count=count, seqs=list(range(1, count + 1)))
                    connection.sendall(protocol.encode_frame(verdicts))

    @property
    def events(self) -> int:
        """Events received so far, in every batch."""
        return sum(len(batch.events) for batch in self.batches)


def _log(client: Client, n: int) -> None:
    client.log(session_id="s", action=f"a{n}", stage="READ", agent="agy")


def _wait(predicate: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_events_logged_apart_share_one_frame_within_the_linger(short_tmp: Path) -> None:
    """Ten events a few milliseconds apart go out as one batch when the linger outlasts them."""
    stand_in = StandIn(short_tmp / "c.sock")
    client = Client(socket_path=short_tmp / "c.sock", root=short_tmp / ".harness", linger=3600, spool=False)
    _log(client, 0)
    _wait(lambda: client.stats().connected, "the connection")
    for n in range(1, 10):
        time.sleep(0.003)
        _log(client, n)
    assert stand_in.batches == []  # held: nothing forces them out
    assert client.flush(timeout=10)
    assert [len(batch.events) for batch in stand_in.batches] == [10]
    client.close(timeout=1)


def test_without_a_linger_each_event_logged_alone_goes_at_once(short_tmp: Path) -> None:
    """With a linger of 0 (``GZ_IA_LINGER_MS=0``) an event goes out without waiting for the next."""
    stand_in = StandIn(short_tmp / "c.sock")
    client = Client(socket_path=short_tmp / "c.sock", root=short_tmp / ".harness", linger=0, spool=False)
    for n in range(3):
        _log(client, n)
        _wait(lambda n=n: stand_in.events == n + 1, f"event {n}")
    assert len(stand_in.batches) == 3
    client.close(timeout=1)


def test_a_frames_worth_of_events_goes_without_waiting_out_the_linger(short_tmp: Path) -> None:
    """Once a frame's worth is queued it is sent, however long the linger: a busy agent is not slowed."""
    stand_in = StandIn(short_tmp / "c.sock")
    client = Client(socket_path=short_tmp / "c.sock", root=short_tmp / ".harness", linger=3600, spool=False)
    _log(client, 0)
    _wait(lambda: client.stats().connected, "the connection")
    for n in range(1, 2 * sender_module._LINGER_EVENTS):
        _log(client, n)
    _wait(lambda: stand_in.events >= sender_module._LINGER_EVENTS, "a frame's worth")
    client.close(timeout=5)
    assert stand_in.events == 2 * sender_module._LINGER_EVENTS


def test_send_flush_and_close_never_wait_for_the_linger(collector: Any) -> None:
    """A verdict waited for, a flush and a close go at once, with a linger far longer than the test."""
    client = collector.client(linger=3600)
    client.log(session_id="held", action="first", stage="READ", agent="agy")
    verdict = client.send(build_event(session_id="held", action="second", stage="READ", agent="agy"), timeout=30)
    assert verdict.seq == 2  # the held event went first, in order
    client.log(session_id="held", action="third", stage="READ", agent="agy")
    assert client.flush(timeout=30)
    assert client.stats().accepted == 3
    client.log(session_id="held", action="fourth", stage="READ", agent="agy")
    client.close(timeout=30)
    assert client.stats().accepted == 4
    assert [line["action"] for line in collector.session_lines("held")] == ["first", "second", "third", "fourth"]


def test_the_linger_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``GZ_IA_LINGER_MS`` in milliseconds; unset or unreadable, the default; negative, none."""
    monkeypatch.delenv(client_env.GZ_IA_LINGER_MS, raising=False)
    assert client_env.linger() == client_env.DEFAULT_LINGER_MS / 1000
    monkeypatch.setenv(client_env.GZ_IA_LINGER_MS, "250")
    assert client_env.linger() == 0.25
    monkeypatch.setenv(client_env.GZ_IA_LINGER_MS, "soon")
    assert client_env.linger() == client_env.DEFAULT_LINGER_MS / 1000
    monkeypatch.setenv(client_env.GZ_IA_LINGER_MS, "-5")
    assert client_env.linger() == 0.0


def test_close_says_how_many_events_it_left_in_the_spool(short_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Events no collector took by close() are spooled, counted in stats().spooled and named on stderr."""
    client = Client(socket_path=short_tmp / "missing.sock", root=short_tmp / ".harness", spool=True)
    for n in range(25):
        _log(client, n)
    client.close(timeout=0.2)
    stats = client.stats()
    assert (stats.spooled, stats.dropped, stats.queued, stats.unacknowledged) == (25, 0, 0, 0)
    said = capsys.readouterr().err
    assert "gz-ia: 25 event(s) not delivered within 0.2 s were spooled to " in said
    assert str(short_tmp / "missing.sock") in said
    client.close(timeout=0.2)  # as the exit handler does again: the same events are not named twice
    assert "spooled" not in capsys.readouterr().err


def test_close_says_nothing_when_everything_was_delivered(collector: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A close that delivered everything leaves no line on stderr and nothing spooled."""
    client = collector.client()
    for n in range(5):
        _log(client, n)
    client.close(timeout=30)
    assert client.stats().spooled == 0
    assert client.stats().accepted == 5
    assert "spooled" not in capsys.readouterr().err


def test_the_clients_inbox_bound_is_the_senders() -> None:
    """Client.log inlines the sender's fast path, with the sender's bound on the inbox."""
    from gz_ia.client import _client

    assert _client.INBOX_EVENTS == sender_module.INBOX_EVENTS


def test_a_call_that_cannot_be_built_is_counted_when_it_is_encoded(silent_socket: Path) -> None:
    """A deferred log() call whose event cannot be encoded is counted invalid, and the others go on."""
    client = Client(socket_path=silent_socket, root=silent_socket.parent / ".harness", spool=False)
    client.log(session_id="s", action="fine", stage="READ", agent="agy")
    client.log(session_id="s", action="bad", stage="READ", agent="agy", cycle=object())  # type: ignore[arg-type]
    client.log(session_id="s", action="fine too", stage="READ", agent="agy")
    stats = client.stats()
    assert stats.invalid == 1
    assert stats.queued + stats.unacknowledged == 2
    assert "invalid event" in (stats.last_error or "")
    client.close(timeout=0)


def test_verdicts_are_read_while_a_steady_trickle_keeps_the_linger_going(collector: Any) -> None:
    """Events logged a few milliseconds apart, for longer than many linger periods: the verdicts
    of each period's batch are read while the trickle goes on, not only once it stops."""
    client = collector.client(linger=0.05)
    deadline = time.monotonic() + 20
    logged = 0
    while client.stats().accepted < 10:
        assert time.monotonic() < deadline, f"no verdict read while trickling ({logged} events logged)"
        client.log(session_id="trickle", action=f"a{logged}", stage="READ", agent="agy")
        logged += 1
        time.sleep(0.01)
    client.close(timeout=30)
    assert client.stats().accepted == logged
