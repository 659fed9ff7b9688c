"""A one-shot's events go out as one Batch per session, so that a sharded collector can route each
batch whole (it routes a client that does not route by itself only when a batch is one session's).

The peer here is a stand-in speaking the wire protocol through the client's own msgspec types,
because what is asserted is the frames themselves, which a real collector does not show.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import msgspec

from gz_ia.client import protocol
from gz_ia.client.schema import LogEvent
from gz_ia.collector.oneshot.ledger import Ledger, Outcome, plain_event


def _stand_in(path: Path, batches: list[protocol.Batch], reject: tuple[int, int]) -> threading.Thread:
    """Answer one connection: Welcome, then Verdicts per Batch, rejecting event ``reject[1]`` of
    batch ``reject[0]``; every Batch it reads is kept in ``batches``."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        with server, server.accept()[0] as connection:
            reader = protocol.FrameReader()
            while data := connection.recv(1 << 16):
                for body in reader.feed(data):
                    message = protocol.client_message_decoder.decode(body)
                    if isinstance(message, protocol.Hello):
                        connection.sendall(protocol.encode_frame(protocol.Welcome(proto=1, version="stand-in")))
                        continue
                    assert isinstance(message, protocol.Batch)
                    batches.append(message)
                    count = len(message.events)
                    rejected = []
                    if len(batches) - 1 == reject[0]:
                        rejected = [protocol.Rejection(reject[1], protocol.RejectReason.INVALID_FIELD, "no")]
                    refused = {rejection.index for rejection in rejected}
                    seqs = [0 if index in refused else 100 + index for index in range(count)]
                    verdicts = protocol.Verdicts(first=message.first, count=count, seqs=seqs, rejected=rejected)
                    connection.sendall(protocol.encode_frame(verdicts))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_events_of_several_sessions_go_as_one_batch_per_session(short_tmp: Path) -> None:
    """Four events of sessions a, a, b, a: three batches, numbered on, each one session's; the
    verdicts come back per event of the call, a rejection at its index in the call."""
    batches: list[protocol.Batch] = []
    thread = _stand_in(short_tmp / "c.sock", batches, reject=(1, 0))
    sessions = ["a", "a", "b", "a"]
    events = [plain_event(session_id=name, action="x", stage="READ", agent="t") for name in sessions]
    with Ledger("k", spool_dir=short_tmp / "spool", socket_path=short_tmp / "c.sock", root="/r/.harness") as ledger:
        delivery = ledger.deliver(events, timeout=10)
    thread.join(10)
    assert delivery.outcome == Outcome.ACCEPTED
    decoded = [[msgspec.msgpack.decode(raw, type=LogEvent).session_id for raw in batch.events] for batch in batches]
    assert decoded == [["a", "a"], ["b"], ["a"]]
    assert [batch.first for batch in batches] == [1, 3, 4]
    assert delivery.seqs == [100, 101, 0, 100]
    assert delivery.rejected == {2: ("invalid_field", "no")}
