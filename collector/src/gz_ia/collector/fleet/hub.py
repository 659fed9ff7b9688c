"""The hub: consumes the fleet stream with a durable pull consumer and writes every machine's events.

Each message (one session's stored lines, one or many) is checked (its subject must name the host it
claims, else it is refused and counted), split into the events its machine stored, with the session
ids made ``<host>.<id>`` (:func:`.naming.hub_session_id`), and written through the collector's own
socket (:mod:`.own_socket`) as that machine's root's producer, numbered by their stored ``seq``. A
message is acknowledged only once the verdicts of all its events came (after the write, synced with
``durability = "fsync"``). Whatever is held already is dropped event by event, by ``seq``: a
redelivery, or a re-publish cut into other messages after a machine's crash; the collector's own
watermark (verdict ``-1``) does the same after a hub's restart. A message whose predecessor in its
session (:data:`.naming.HEADER_AFTER`) is not held yet waits (``nak`` with a delay): the stream may
hold a re-published event after its successor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from gz_ia.client.limits import MAX_FRAME
from gz_ia.client.protocol import MAX_BATCH_EVENTS
from gz_ia.collector.config import FleetConfig
from gz_ia.collector.errors import CollectorError
from gz_ia.collector.reading import SessionNotFound, read_page

from .naming import HEADER_AFTER, HEADER_HOST, SUBJECT_PREFIX, hub_session_id, parse_subject, producer_of
from .own_socket import OwnSocket, SocketLost

if TYPE_CHECKING:
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

    from gz_ia.collector.metrics import Metrics

__all__ = ["FleetHub"]

log = logging.getLogger("gz_ia.collector")

FETCH: Final = 256
"""Messages fetched at once (each up to a page of a session's events); their writes are grouped by
session into batches."""
BATCH_BYTES: Final = MAX_FRAME - 1024
"""Encoded events per batch written: the batch's envelope around them fits in what is left of a frame."""
LAG_INTERVAL: Final = 1.0
"""Seconds between looks at the consumer's lag while messages keep coming."""
GAP_DELAY: Final = 1.0
"""Seconds a message waits (``nak``) for its predecessor to arrive."""
MAX_GAP_WAITS: Final = 1800
"""Deliveries (about half an hour) after which a message is written although its predecessor never
came (lost on its machine before it was shipped): a hole is better than a session that stops for ever."""
_ID_FIELDS: Final = ("session_id", "parent_session_id", "root_session_id")
_STORED_ONLY: Final = ("seq", "delivery", "schema_version")
_decode_line = msgspec.json.Decoder(dict[str, Any]).decode
_encode_event = msgspec.msgpack.Encoder().encode


@dataclass
class _Item:
    """One event of a message: its stored ``seq``, the ``seq`` it follows, its body to write."""

    msg: Msg
    seq: int
    after: int
    body: bytes


class _Refused(CollectorError):
    """Private: a message the hub refuses (its reason is the metric's label)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FleetHub:
    """Consumes ``config.stream`` as ``consumer`` and writes into ``root`` through ``socket_path``."""

    def __init__(self, config: FleetConfig, consumer: str, root: Path, socket_path: str, metrics: Metrics) -> None:
        self.config = config
        self.consumer = consumer
        self.root = root
        self.socket_path = socket_path
        self.metrics = metrics
        self._sockets: dict[str, OwnSocket] = {}
        self._held: dict[tuple[str, str, str], int] = {}
        self.lag_events = 0

    def _filters(self) -> list[str]:
        return [f"{SUBJECT_PREFIX}.{host}.>" for host in self.config.hosts] or [f"{SUBJECT_PREFIX}.>"]

    async def subscribe(self, js: JetStreamContext) -> Any:
        """The durable pull consumer (created if absent: explicit acks, redelivered for ever)."""
        import nats.js.errors
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        try:
            await js.consumer_info(self.config.stream, self.consumer)
        except nats.js.errors.NotFoundError:
            filters = self._filters()
            await js.add_consumer(
                self.config.stream,
                ConsumerConfig(
                    durable_name=self.consumer,
                    ack_policy=AckPolicy.EXPLICIT,
                    deliver_policy=DeliverPolicy.ALL,
                    ack_wait=self.config.ack_wait,
                    max_deliver=-1,
                    max_ack_pending=4 * FETCH,
                    filter_subject=filters[0] if len(filters) == 1 else None,
                    filter_subjects=filters if len(filters) > 1 else None,
                ),
            )
        return await js.pull_subscribe_bind(durable=self.consumer, stream=self.config.stream)

    async def run(self, js: JetStreamContext, stopping: asyncio.Event) -> None:
        """Take the stream until ``stopping`` is set."""
        import nats.errors

        subscription = None
        looked = 0.0
        while not stopping.is_set():
            try:
                if subscription is None:
                    subscription = await self.subscribe(js)
                try:
                    messages = await subscription.fetch(FETCH, timeout=1.0)
                except (TimeoutError, nats.errors.TimeoutError):
                    messages = []
                if messages:
                    await self.take(messages)
                now = asyncio.get_running_loop().time()
                if not messages or now - looked >= LAG_INTERVAL:  # one request: not after every fetch
                    looked = now
                    info = await subscription.consumer_info()
                    self.lag_events = int(info.num_pending or 0) + int(info.num_ack_pending or 0)
                    self.metrics.fleet_lag.labels("hub").set(self.lag_events)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server away, a consumer deleted: try again shortly
                log.warning("fleet hub: %s: %s; retrying", type(exc).__name__, exc)
                try:
                    await asyncio.wait_for(stopping.wait(), 1.0)
                except TimeoutError:
                    pass
        for own in self._sockets.values():
            own.close()

    async def take(self, messages: Iterable[Msg]) -> None:
        """Write ``messages`` (in stream order) and acknowledge each once the fate of all its events is durable."""
        groups: dict[tuple[str, str, str], list[_Item]] = {}
        for msg in messages:
            try:
                key, items = self._parse(msg)
            except _Refused as refused:
                self.metrics.fleet_refused.labels(refused.reason).inc()
                log.warning("fleet hub: refused a message on %s: %s", msg.subject, refused.reason)
                await msg.term()
                continue
            groups.setdefault(key, []).extend(items)
        await asyncio.gather(*(self._take_session(key, items) for key, items in groups.items()))

    def _parse(self, msg: Msg) -> tuple[tuple[str, str, str], list[_Item]]:
        parsed = parse_subject(msg.subject)
        headers = msg.headers or {}
        if parsed is None:
            raise _Refused("subject")
        host, root_id = parsed
        if headers.get(HEADER_HOST) != host:
            raise _Refused("host_mismatch")
        if self.config.hosts and host not in self.config.hosts:
            raise _Refused("host_not_served")
        items: list[_Item] = []
        session_id: str | None = None
        try:
            after_header = headers.get(HEADER_AFTER)
            for line in msg.data.split(b"\n"):
                event = _decode_line(line)
                seq = int(event.pop("seq"))
                after = items[-1].seq if items else int(after_header) if after_header is not None else seq - 1
                if session_id is None:
                    session_id = str(event["session_id"])
                elif event["session_id"] != session_id or seq <= after:  # one session's lines, in order
                    raise _Refused("malformed")
                for name in _STORED_ONLY:
                    event.pop(name, None)
                for name in _ID_FIELDS:
                    if isinstance(event.get(name), str):
                        event[name] = hub_session_id(host, event[name])
                items.append(_Item(msg, seq, after, _encode_event(event)))
        except (msgspec.DecodeError, KeyError, TypeError, ValueError):
            raise _Refused("malformed") from None
        assert session_id is not None  # split() gives at least one line
        return (host, root_id, session_id), items

    async def _held_seq(self, key: tuple[str, str, str]) -> int:
        """The newest ``seq`` of this machine's session held here: from memory, else from the hub's file
        (the last line its producer wrote), so a restarted hub knows it too."""
        held = self._held.get(key)
        if held is not None:
            return held
        host, root_id, session_id = key
        held = await asyncio.to_thread(self._read_held, hub_session_id(host, session_id), producer_of(host, root_id))
        self._held[key] = held
        return held

    def _read_held(self, session_id: str, producer: str) -> int:
        mark = producer + ":"
        cursor = None
        while True:
            try:
                page = read_page(self.root, session_id, cursor=cursor, limit=256, reverse=True)
            except SessionNotFound:
                return 0
            for entry in page.entries:
                delivery = entry.event.delivery
                if delivery is not None and delivery.startswith(mark):
                    return int(delivery[len(mark) :])
            if page.end or page.next_cursor is None:
                return 0
            cursor = page.next_cursor

    def _socket(self, host: str, root_id: str) -> OwnSocket:
        producer = producer_of(host, root_id)
        own = self._sockets.get(producer)
        if own is None:
            own = self._sockets[producer] = OwnSocket(self.socket_path, self.root, producer)
        return own

    async def _take_session(self, key: tuple[str, str, str], items: list[_Item]) -> None:
        held = await self._held_seq(key)
        acks: list[_Item] = []
        run: list[_Item] = []
        size = 0
        runs: list[list[_Item]] = []
        waiting: list[_Item] = []
        expected = held
        # The stream may hold a re-published event after its successors: in seq order, one fetch's
        # events of a session follow each other again.
        items.sort(key=lambda item: item.seq)
        for item in items:
            if waiting:
                waiting.append(item)
            elif item.seq <= expected:
                acks.append(item)  # held already (or twice in this fetch): acknowledged, not written
                self.metrics.fleet_hub_events.labels("duplicate").inc()
            elif item.after > expected and (item.msg.metadata.num_delivered or 1) < MAX_GAP_WAITS:
                waiting.append(item)
            else:
                if run and (
                    item.seq != run[-1].seq + 1 or len(run) >= MAX_BATCH_EVENTS or size + len(item.body) > BATCH_BYTES
                ):
                    runs.append(run)
                    run, size = [], 0
                run.append(item)
                size += len(item.body)
                expected = item.seq
        if run:
            runs.append(run)
        own = self._socket(key[0], key[1])
        try:
            for batch in runs:
                verdicts = await own.write(batch[0].seq, [item.body for item in batch])
                for seq in verdicts.seqs:
                    outcome = "written" if seq > 0 else "duplicate" if seq < 0 else "rejected"
                    self.metrics.fleet_hub_events.labels(outcome).inc()
                for rejection in verdicts.rejected:
                    log.warning(
                        "fleet hub: %s's event %s seq %d refused here: %s",
                        key[0],
                        key[2],
                        batch[rejection.index].seq,
                        rejection.detail,
                    )
                acks.extend(batch)
                self._held[key] = batch[-1].seq
        except SocketLost as exc:
            log.warning("fleet hub: writing %s's session %s: %s; it comes again", key[0], key[2], exc)
            self._held.pop(key, None)
            acked = {id(item) for item in acks}
            waiting = [item for batch in runs for item in batch if id(item) not in acked] + waiting
        # A message is acknowledged once all its events are held; one with an event still to come is
        # delivered again, and what of it was written meanwhile is then dropped as held.
        later = {id(item.msg): item.msg for item in waiting}
        done = {id(item.msg): item.msg for item in acks if id(item.msg) not in later}
        for msg in done.values():
            await msg.ack()
        for msg in later.values():
            await msg.nak(delay=GAP_DELAY)
