"""A sharded collector (``shards = 2``) for real: a front process, two share processes, real sockets.

The tests of the write and delivery path run twice, with one process and with two shares
(``tests/conftest.py``); these check what only a sharded collector has: the routing of batches,
replies in order, the shares' lifecycle and the merged metrics.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.conftest import CollectorProcess, first_reply, wait_for

from gz_ia.client import build_event
from gz_ia.client.protocol import (
    PROTOCOL_VERSION,
    Batch,
    Error,
    FrameReader,
    Hello,
    Query,
    RejectReason,
    Route,
    Verdicts,
    Welcome,
    collector_message_decoder,
    encode_frame,
    owner_of,
)

pytestmark = pytest.mark.shards(2)
NOW = "2026-11-30T12:00:00Z"


def _event(session_id: str, action: str, stage: str) -> msgspec.Raw:
    event = {"timestamp": NOW, "session_id": session_id, "action": action, "stage": stage, "status": "OK", "agent": "t"}
    return msgspec.Raw(msgspec.msgpack.encode(event))


class RawClient:
    """The wire protocol by hand, to see exactly what the front answers."""

    def __init__(self, collector: CollectorProcess, producer: str = "abc", *, routes: bool = False) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(str(collector.socket))
        self.reader = FrameReader()
        self.pending: list[bytes] = []
        hello = Hello(proto=PROTOCOL_VERSION, producer=producer, pid=1, root=str(collector.root), routes=routes)
        self.sock.sendall(encode_frame(hello))
        self.welcome = self.receive()
        assert isinstance(self.welcome, Welcome)

    def receive(self) -> Any:
        while not self.pending:
            self.pending += self.reader.feed(self.sock.recv(1 << 16))
        return collector_message_decoder.decode(self.pending.pop(0))

    def batch(self, first: int, events: list[msgspec.Raw]) -> Verdicts:
        self.sock.sendall(encode_frame(Batch(first=first, events=events, verdicts=True)))
        reply = self.receive()
        assert isinstance(reply, Verdicts), reply
        return reply

    def send_routed(self, share: int, first: int, events: list[msgspec.Raw]) -> None:
        self.sock.sendall(
            encode_frame(Route(share=share)) + encode_frame(Batch(first=first, events=events, verdicts=True))
        )

    def close(self) -> None:
        self.sock.close()


def _status(collector: CollectorProcess) -> dict[str, Any]:
    result = collector.gz_ia("status", "--json")
    assert result.returncode == 0, result.stderr + collector.log()
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _share_socket(collector: CollectorProcess, share: int) -> Path:
    return collector.socket.parent / ".collector.sock.shares" / f"share-{share}.sock"


def test_a_client_that_does_not_route_has_each_batch_of_one_share_routed_and_a_mixed_one_refused(
    make_collector: Any,
) -> None:
    collector = make_collector()
    sessions = [f"split-{index}" for index in range(40)]
    by_share = {share: [s for s in sessions if owner_of(s, 2) == share] for share in (0, 1)}
    assert by_share[0] and by_share[1]
    client = RawClient(collector)
    try:
        first = 1
        for share in (0, 1):
            mine = by_share[share]
            events = [_event(session, "work", "READ") for session in mine for _ in range(3)]
            # A FINISH with no open cycle, and an event with no session id, which goes with the batch.
            events.append(_event(mine[0], "never-started", "FINISH"))
            events.append(msgspec.Raw(msgspec.msgpack.encode({"action": "no session"})))
            verdicts = client.batch(first, events)
            assert verdicts.count == len(events)
            rejected = {rejection.index: rejection.reason for rejection in verdicts.rejected}
            last = len(events) - 1
            assert rejected == {last - 1: RejectReason.FINISH_WITHOUT_START, last: RejectReason.MISSING_FIELD}
            assert verdicts.seqs == [seq for _ in mine for seq in (1, 2, 3)] + [0, 0]
            first += len(events)
        written = collector.all_sessions()
        assert sorted(written) == sorted(sessions)
        # Each share wrote its own rejects file.
        by_file = {path.name: path.read_text().count("\n") for path in collector.root.glob("rejects*.jsonl")}
        assert by_file == {"rejects.jsonl": 2, "rejects-1.jsonl": 2}

        # A batch over both shares is refused whole, with how to send it, and the connection stays.
        mixed = [_event(by_share[0][0], "more", "READ"), _event(by_share[1][0], "more", "READ")]
        client.sock.sendall(encode_frame(Batch(first=first, events=mixed, verdicts=True)))
        refusal = client.receive()
        assert isinstance(refusal, Error), refusal
        assert refusal.reason is RejectReason.MISROUTED and not refusal.fatal
        assert "Hello.routes" in refusal.detail and "one session per batch" in refusal.detail
        assert collector.all_sessions() == written
        for offset, event in enumerate(mixed):
            assert client.batch(first + offset, [event]).seqs == [4]
    finally:
        client.close()


def test_after_its_hello_a_client_that_does_not_route_sends_only_batches(make_collector: Any) -> None:
    """A query on a connection that said hello would be answered by every share while they write
    batches: the front refuses it, saying where to ask, and the collector serves on."""
    collector = make_collector()
    client = RawClient(collector)
    try:
        client.sock.sendall(encode_frame(Query(what="status")))
        error = client.receive()
        assert (type(error).__name__, error.reason, error.fatal) == ("Error", RejectReason.MALFORMED, True)
        assert "on a connection of their own" in error.detail
        assert client.sock.recv(1) == b""
    finally:
        client.close()
    assert _status(collector)["shares"]["count"] == 2


def test_a_bad_frame_between_batches_gets_its_error_in_its_turn(make_collector: Any) -> None:
    """The front answers a bad frame itself and a share a batch after its write: the client still
    gets the replies in the order of its frames."""
    collector = make_collector()
    heavy = [f"heavy-{index}" for index in range(400) if owner_of(f"heavy-{index}", 2) == 1]
    client = RawClient(collector)
    try:
        first = 1
        for round_ in range(10):
            big = [_event(heavy[index % len(heavy)], f"a{round_}-{index}", "READ") for index in range(1000)]
            small = [_event(heavy[0], f"b{round_}", "READ")]
            client.sock.sendall(
                encode_frame(Batch(first=first, events=big, verdicts=True))
                + b"\x00\x00\x00\x01\xc1"
                + encode_frame(Batch(first=first + 1000, events=small))
            )
            replies = [client.receive() for _ in range(3)]
            assert [type(reply).__name__ for reply in replies] == ["Verdicts", "Error", "Verdicts"]
            assert replies[1].reason is RejectReason.MALFORMED and not replies[1].fatal
            assert [replies[0].first, replies[2].first] == [first, first + 1000]
            assert 0 not in replies[0].seqs
            first += 1001
    finally:
        client.close()


def test_the_metrics_and_status_of_both_shares_add_up(make_collector: Any) -> None:
    collector = make_collector()
    sessions = [f"m-{index}" for index in range(50)]
    client = RawClient(collector, routes=True)
    try:
        first = 1
        for share in (0, 1):
            mine = [session for session in sessions if owner_of(session, 2) == share]
            events = [_event(session, "work", "READ") for session in mine]
            if "m-0" in mine:
                events.append(_event("m-0", "other", "FINISH"))
            client.send_routed(share, first, events)
            assert isinstance(client.receive(), Verdicts)
            first += len(events)
        exposition = collector.metrics()
        status = _status(collector)
    finally:
        client.close()
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line and not line.startswith("#")
    }
    assert samples['gzia_events_written_total{stage="READ",status="OK"}'] == 50
    assert samples['gzia_events_rejected_total{reason="finish_without_start"}'] == 1
    assert samples["gzia_events_received_total"] == 51  # once, not once per share
    assert samples["gzia_connections_active"] == 1  # the front's clients, not its links to the shares
    assert samples["gzia_shares_answering"] == 2
    assert samples["gzia_sessions_loaded"] == 50
    assert status["shares"]["count"] == 2 and len(status["shares"]["pids"]) == 2
    assert status["counters"]["written"] == 50 and status["counters"]["rejected"] == 1
    assert status["counters"]["received"] == 51
    (root,) = status["roots"]
    assert root["sessions_loaded"] == 50


def test_a_share_that_dies_is_restarted_and_its_clients_resend(make_collector: Any, tmp_path: Path) -> None:
    """SIGKILL one share under load: the client reconnects and resends; every event lands once."""
    collector = make_collector()
    victim = _status(collector)["shares"]["pids"][1]
    total = 20_000
    client = collector.client()
    third = threading.Event()
    produced = [0]

    def produce() -> None:
        for index in range(total):
            client.log(session_id=f"die-{index % 30}", action=f"a{index}", stage="READ", agent="t")
            produced[0] = index + 1
            if index == total // 3:
                third.set()
            if index % 200 == 0:
                time.sleep(0.01)  # about 2 s in all: the share dies mid-stream

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert third.wait(30)
        # Stopped first, and killed once every session has logged again and the client holds events
        # unanswered (a stopped share answers none of its own): it dies mid-stream.
        os.kill(victim, signal.SIGSTOP)
        stopped_at = produced[0]
        wait_for(
            lambda: produced[0] >= stopped_at + 200 and client.stats().unacknowledged > 0,
            message="events unanswered by the stopped share",
        )
        os.kill(victim, signal.SIGKILL)
        producer.join(60)
        assert client.flush(timeout=60)
        # It reconnected with events still unanswered: the share died mid-stream, not after it.
        assert client.stats().reconnects >= 1
    finally:
        client.close()
    written = collector.all_sessions()
    actions = Counter(line["action"] for lines in written.values() for line in lines)
    assert len(actions) == total and set(actions.values()) == {1}
    for lines in written.values():
        assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    wait_for(lambda: collector.gz_ia("status").returncode == 0, message="the front to answer with both shares")
    status = _status(collector)
    assert status["shares"]["restarts"] == 1
    assert victim not in status["shares"]["pids"]
    assert "share 1 exited" in collector.log()


def _share_children(front: int) -> list[int]:
    """The share processes of a front, once they run the share's code (after exec)."""
    children: list[int] = []
    for task in Path(f"/proc/{front}/task").iterdir():
        with contextlib.suppress(OSError):
            children += [int(pid) for pid in (task / "children").read_text().split()]
    shares = []
    for pid in children:
        with contextlib.suppress(OSError):
            if b"gz_ia.collector.daemon\x00--share" in Path(f"/proc/{pid}/cmdline").read_bytes():
                shares.append(pid)
    return shares


def test_a_share_killed_while_starting_is_restarted_and_the_collector_serves(make_collector: Any) -> None:
    """SIGKILL a share as soon as its process runs, long before it can answer: the front restarts
    it (as it would one that died later) instead of exiting, and then serves every session."""
    collector = make_collector(start=False)
    collector.start(wait=False)
    assert collector.proc is not None
    front = collector.proc.pid
    victims: list[int] = []

    def kill_first_share() -> bool:
        shares = _share_children(front)
        if shares:
            os.kill(shares[0], signal.SIGKILL)
            victims.append(shares[0])
        return bool(shares)

    wait_for(kill_first_share, interval=0.001, message="a share process to appear")
    collector.wait_ready(timeout=40)
    assert collector.log_lines("while starting; restarting it")
    status = _status(collector)
    assert status["healthy"] is True and status["shares"]["restarts"] == 1
    assert victims[0] not in status["shares"]["pids"]
    client = collector.client()
    try:
        for index in range(40):
            client.send(build_event(session_id=f"st-{index}", action="a", stage="READ", agent="t"), timeout=20)
    finally:
        client.close()
    assert len(collector.all_sessions()) == 40


def test_the_shares_stop_with_the_front_even_when_it_is_killed(make_collector: Any) -> None:
    collector = make_collector()
    pids = _status(collector)["shares"]["pids"]
    private = _share_socket(collector, 0).parent
    assert sorted(path.name for path in private.iterdir()) == [
        "config.json", "share-0.sock", "share-0.sock.lock", "share-1.sock", "share-1.sock.lock"
    ]  # fmt: skip
    collector.kill()
    for pid in pids:
        wait_for(lambda pid=pid: not _running(pid), timeout=20, message=f"share {pid} to stop")
    collector.start()
    assert set(_status(collector)["shares"]["pids"]).isdisjoint(pids)
    assert collector.stop() == 0
    assert not private.exists()  # made afresh by each front (the socket's lock makes it the only one)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_drains_through_the_shares(make_collector: Any) -> None:
    """What the client had acknowledged is on disk after SIGTERM; the front and its shares exit 0."""
    collector = make_collector()
    client = collector.client()
    try:
        for index in range(200):
            client.send(
                build_event(session_id=f"t-{index % 9}", action=f"a{index}", stage="READ", agent="t"), timeout=20
            )
    finally:
        client.close()
    pids = _status(collector)["shares"]["pids"]
    assert collector.stop() == 0
    assert not any(_running(pid) for pid in pids)
    assert sum(len(lines) for lines in collector.all_sessions().values()) == 200
    assert "stopped" in collector.log()
    assert not _share_socket(collector, 0).parent.exists()


def _connections_to(path: Path) -> int:
    """The server ends of connections made to the listening socket at ``path``, accepted or not
    (``/proc/net/unix`` lists them under its path; ``ss`` cannot list Unix sockets in this sandbox)."""
    listening = 1 << 16  # __SO_ACCEPTCON in the Flags column
    count = 0
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[7] == str(path) and not int(fields[3], 16) & listening:
            count += 1
    return count


def test_clients_wait_for_a_share_whose_accept_queue_is_full(make_collector: Any) -> None:
    """More clients arrive than a stalled share's accept queue holds: they wait for it, none is refused.

    Share 1 is stopped (SIGSTOP) while 1,100 clients say hello, so the front's links to it fill its
    accept queue (backlog 1,024) and the next ``connect`` fails with EAGAIN. Once the share runs
    again, every client must get its Welcome and be served. (``max_connections`` is raised past the
    limit this machine's descriptor limit would give the front: this is about the share's queue.)
    """
    collector = make_collector(env={"GZ_IA_MAX_CONNECTIONS": "2048"})
    share = _status(collector)["shares"]["pids"][1]
    share_socket = _share_socket(collector, 1)
    count = 1_100
    hello = encode_frame(Hello(proto=PROTOCOL_VERSION, producer="abc", pid=1, root=str(collector.root)))
    clients: list[socket.socket] = []
    os.kill(share, signal.SIGSTOP)
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            clients.append(sock)
            sock.connect(str(collector.socket))  # blocking: waits while the front's own queue is full
            sock.settimeout(30)
            sock.sendall(hello)
        # The stopped share accepts nothing: its queue holds backlog + 1 links (the kernel refuses
        # only past "more than backlog"), and the links of the other clients are being retried.
        wait_for(lambda: _connections_to(share_socket) == 1_025, message="share 1's accept queue to fill")
        time.sleep(0.3)  # the front goes on retrying the others meanwhile
    finally:
        os.kill(share, signal.SIGCONT)
    try:
        for sock in clients:
            reply = first_reply(sock)
            assert isinstance(reply, Welcome), reply
        last = RawClient(collector)  # the last of them is served too
        verdicts = last.batch(1, [_event("queued-0", "a", "READ"), _event("queued-1", "a", "READ")])
        assert verdicts.seqs == [1, 1]
        last.close()
    finally:
        for sock in clients:
            sock.close()
    assert "cannot reach a share" not in collector.log()


def test_while_a_share_is_down_status_says_so_and_restarts_back_off(make_collector: Any) -> None:
    """The front answers ``gz-ia status`` alone while a share restarts: unhealthy, exit 1, which
    share. A share killed from outside after it served comes back after the shortest delay each
    time, however often (backing off is for a share that cannot start, see the test above)."""
    from gz_ia.collector.service.status import query_status

    collector = make_collector()
    for kill in (1, 2, 3):
        victim = _status(collector)["shares"]["pids"][1]
        os.kill(victim, signal.SIGKILL)
        wait_for(
            lambda kill=kill: collector.log().count("restarting it in 1 s") == kill,
            message=f"the front to see share 1 exit ({kill})",
        )
        if kill == 1:
            report: dict[str, Any] = query_status(collector.socket, timeout=5)  # in-process: within the 1 s
            assert report["healthy"] is False
            shares = report["shares"]
            assert shares == {"count": 2, "pids": [shares["pids"][0], None], "down": [1], "restarts": 1}
            assert report["counters"] == {} and report["roots"] == []
        else:
            result = collector.gz_ia("status")
            assert result.returncode == 1, result.stderr
            assert ": UNHEALTHY, pid " in result.stdout
            assert "  share 1 is down, being restarted" in result.stdout
        wait_for(lambda: collector.gz_ia("status").returncode == 0, message="share 1 to be back")
    status = _status(collector)
    assert status["healthy"] is True and status["shares"]["down"] == []
    assert status["shares"]["restarts"] == 3
    assert "restarting it in 2 s" not in collector.log()


def _started_with_one_open_action(make_collector: Any) -> CollectorProcess:
    collector: CollectorProcess = make_collector(start=False)
    collector.write_config("max_open_actions = 1\n")
    collector.start()
    return collector


def test_a_reload_is_over_only_when_every_share_has_applied_it(make_collector: Any) -> None:
    """The front logs "configuration reloaded" (and tells systemd READY=1) only once each share runs
    the new configuration: a stalled share holds the reload back, and the first event after the
    reload meets the new limit whichever share owns its session."""
    collector = _started_with_one_open_action(make_collector)
    assert collector.proc is not None
    session = next(f"limit-{index}" for index in range(100) if owner_of(f"limit-{index}", 2) == 1)
    client = collector.client()
    try:
        client.send(build_event(session_id=session, action="a1", stage="READ", agent="test"), timeout=20)
        share = _status(collector)["shares"]["pids"][1]
        collector.write_config("max_open_actions = 2\n")
        os.kill(share, signal.SIGSTOP)
        try:
            collector.proc.send_signal(signal.SIGHUP)
            wait_for(
                lambda: collector.log_lines("configuration reloaded", process="gz-ia-collector[share 0]"),
                message="share 0 to apply the reload",
            )
            # The front asks share 0 then share 1 for its status, over and over: its third question
            # to the stalled share 1 from now on follows a whole round that found share 0 applied.
            asked = _connections_to(_share_socket(collector, 1))
            wait_for(
                lambda: _connections_to(_share_socket(collector, 1)) >= asked + 3,
                message="the front to ask the stalled share 1 again after share 0 applied the reload",
            )
            assert not collector.log_lines("configuration reloaded"), collector.log()
        finally:
            os.kill(share, signal.SIGCONT)
        wait_for(lambda: collector.log_lines("applied by every share"), message="the front to finish the reload")
        # Sent right after the reload is over: share 1 has the new limit of two open actions.
        client.send(build_event(session_id=session, action="a2", stage="READ", agent="test"), timeout=20)
    finally:
        client.close()
    assert [line["action"] for line in collector.session_lines(session)] == ["a1", "a2"]


def test_a_reload_names_a_share_that_does_not_apply_it_within_10_s(make_collector: Any) -> None:
    """A share stalled through the whole reload is named in a warning; the reload still ends, and
    the share applies the configuration once it runs again."""
    collector = _started_with_one_open_action(make_collector)
    assert collector.proc is not None
    share = _status(collector)["shares"]["pids"][1]
    collector.write_config("max_open_actions = 2\n")
    os.kill(share, signal.SIGSTOP)
    try:
        collector.proc.send_signal(signal.SIGHUP)
        wait_for(
            lambda: collector.log_lines("but share(s) 1 do not show it yet"),
            timeout=30,
            message="the front to give up waiting for share 1",
        )
        assert not collector.log_lines("applied by every share")
    finally:
        os.kill(share, signal.SIGCONT)
    wait_for(
        lambda: collector.log_lines("configuration reloaded", process="gz-ia-collector[share 1]"),
        message="share 1 to apply the reload once it runs",
    )
    from gz_ia.collector.service.status import query_status

    report = query_status(_share_socket(collector, 1), timeout=5)
    assert report["config"]["max_open_actions"] == 2  # type: ignore[index]


def _received_by_share(collector: CollectorProcess) -> list[float]:
    """``gzia_events_received_total`` of each share: the events of the batches it was handed."""
    from gz_ia.collector.service.status import query

    counts = []
    for share in (0, 1):
        text = str(query(_share_socket(collector, share), timeout=5, what="metrics")["metrics"])
        (line,) = [line for line in text.splitlines() if line.startswith("gzia_events_received_total ")]
        counts.append(float(line.rsplit(" ", 1)[1]))
    return counts


def test_the_client_routes_each_batch_to_the_share_of_its_sessions(make_collector: Any) -> None:
    """The Welcome names two shares, and the thin client sends each share only its own sessions'
    events: each share reads exactly its own, and every event lands once, in order."""
    collector = make_collector()
    sessions = [f"routed-{index}" for index in range(50)]
    client = collector.client()
    try:
        for round_ in range(20):
            for session in sessions:
                client.log(session_id=session, action=f"a{round_}", stage="READ", agent="t")
        assert client.flush(20)
        assert client.stats().accepted == 1000
    finally:
        client.close()
    mine = [sum(20 for session in sessions if owner_of(session, 2) == share) for share in (0, 1)]
    assert 0 not in mine
    assert _received_by_share(collector) == mine
    written = collector.all_sessions()
    for session in sessions:
        assert [line["action"] for line in written[session]] == [f"a{round_}" for round_ in range(20)]
        assert [line["seq"] for line in written[session]] == list(range(1, 21))


def test_a_routed_batch_is_read_by_its_share_alone_and_a_misrouted_event_rejected(make_collector: Any) -> None:
    collector = make_collector()
    ones = [f"one-{index}" for index in range(40) if owner_of(f"one-{index}", 2) == 1][:3]
    zero = next(f"zero-{index}" for index in range(40) if owner_of(f"zero-{index}", 2) == 0)
    client = RawClient(collector, routes=True)
    try:
        assert client.welcome.shares == 2
        client.send_routed(
            1, 1, [_event(ones[0], "a", "READ"), _event(zero, "a", "READ"), _event(ones[1], "a", "READ")]
        )
        verdicts = client.receive()
        assert isinstance(verdicts, Verdicts)
        assert (verdicts.first, verdicts.count, verdicts.seqs) == (1, 3, [1, 0, 1])
        ((index, reason, detail),) = [(r.index, r.reason, r.detail) for r in verdicts.rejected]
        assert (index, reason) == (1, RejectReason.MISROUTED)
        assert f"session {zero!r} belongs to share 0 of 2, not 1" in detail
    finally:
        client.close()
    assert _received_by_share(collector) == [0, 3]  # share 0 never read the batch
    assert sorted(collector.all_sessions()) == sorted(ones[:2])
    (record,) = collector.rejects()
    assert (record["reason"], record["delivery"]) == ("misrouted", "abc:2")


def test_routed_verdicts_keep_the_order_of_the_batches(make_collector: Any) -> None:
    """Share 0 is stopped, so share 1 answers the later batch first: the front holds that answer
    back until the earlier batch's, as the client's window needs them in order."""
    collector = make_collector()
    zero = next(f"z-{index}" for index in range(40) if owner_of(f"z-{index}", 2) == 0)
    one = next(f"o-{index}" for index in range(40) if owner_of(f"o-{index}", 2) == 1)
    client = RawClient(collector, routes=True)
    share = _status(collector)["shares"]["pids"][0]
    try:
        os.kill(share, signal.SIGSTOP)
        try:
            client.send_routed(0, 1, [_event(zero, "a", "READ")])
            client.send_routed(1, 2, [_event(one, "a", "READ"), _event(one, "b", "READ")])
            wait_for(lambda: one in collector.all_sessions(), message="share 1 to write its batch")
            client.sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                client.receive()  # share 1's verdicts are held back
        finally:
            os.kill(share, signal.SIGCONT)
        client.sock.settimeout(20)
        first, second = client.receive(), client.receive()
        assert (first.first, first.seqs) == (1, [1])
        assert (second.first, second.seqs) == (2, [1, 2])
    finally:
        client.close()


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        (encode_frame(Batch(first=1, events=[])), RejectReason.MALFORMED),
        (encode_frame(Route(share=2)), RejectReason.MISROUTED),
        ((2**31).to_bytes(4, "big"), RejectReason.FRAME_TOO_LARGE),
    ],
    ids=["batch-without-route", "no-such-share", "frame-too-large"],
)
def test_a_client_that_routes_must_name_a_share_before_each_batch(
    make_collector: Any, frames: bytes, reason: RejectReason
) -> None:
    collector = make_collector()
    client = RawClient(collector, routes=True)
    try:
        client.sock.sendall(frames)
        error = client.receive()
        assert (type(error).__name__, error.reason, error.fatal) == ("Error", reason, True)
        assert client.sock.recv(1) == b""
    finally:
        client.close()
    assert collector.proc is not None and collector.proc.poll() is None
    counted = f'gzia_events_rejected_total{{reason="{reason.value}"}} 1.0'
    assert counted in collector.metrics().splitlines()  # once, by the front: no share saw it


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)], ids=["2-to-1", "1-to-2"])
def test_the_window_is_resent_whole_when_the_number_of_shares_changes(
    make_collector: Any, before: int, after: int
) -> None:
    """Events sent but unanswered when the collector dies are resent to the next one, cut into
    batches for its number of shares: every event lands once, each session in order."""
    collector = make_collector(start=False)
    collector.shards = before
    collector.start()
    assert collector.proc is not None
    sessions = [f"n-{index}" for index in range(30)]
    client = collector.client()
    try:
        client.log(session_id="warm", action="up", stage="READ", agent="t")
        assert client.flush(20)  # connected and welcomed: it routes for `before` shares
        shares = [pid for pid in _status(collector)["shares"]["pids"] if pid] if before > 1 else []
        for pid in [collector.proc.pid, *shares]:
            os.kill(pid, signal.SIGSTOP)  # nothing answers, so everything sent stays in the window
        for index in range(600):
            client.log(session_id=sessions[index % 30], action=f"a{index}", stage="READ", agent="t")
        wait_for(lambda: client.stats().unacknowledged == 600, message="the events to be sent")
        for pid in [*shares, collector.proc.pid]:
            os.kill(pid, signal.SIGKILL)
        collector.proc.wait(20)
        collector.shards = after
        collector.start()
        assert client.flush(30)
        assert client.stats().reconnects >= 1
    finally:
        client.close()
    written = collector.all_sessions()
    for number, session in enumerate(sessions):
        assert [line["action"] for line in written[session]] == [f"a{index}" for index in range(number, 600, 30)]
        assert [line["seq"] for line in written[session]] == list(range(1, 21))
    if after == 2:  # the resent window was routed, cut where the share changes
        assert _received_by_share(collector) == [sum(20 for s in sessions if owner_of(s, 2) == k) for k in (0, 1)]
