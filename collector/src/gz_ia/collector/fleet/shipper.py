"""Shipping: every line the collector stored, from every root it serves, published once to the stream.

The shipper reads the session files as any reader does (:mod:`gz_ia.collector.reading`), so it ships
what was written and only that, after the write, never from the ingest path: an outage of the
stream costs the collector nothing but a growing lag, caught up from the files when it ends. A page
of a session's lines goes out as one message (a few above :data:`MESSAGE_BYTES`): one publish, one
acknowledgement and one message for the hub to take, not one per event. Each message carries its
stable id (:func:`.naming.message_id`) and the ``seq`` shipped before it in its session
(:data:`.naming.HEADER_AFTER`); a session's position moves only over messages the stream
acknowledged, contiguously, and is saved after every round (:mod:`.positions`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gz_ia.collector.config import FleetConfig
from gz_ia.collector.metrics import root_id
from gz_ia.collector.reading import SessionNotFound, cursor_seq, end_cursor, read_page
from gz_ia.collector.reading.segments import seq_of
from gz_ia.collector.service.known_roots import KnownRoots
from gz_ia.collector.storage.names import stored_session_id

from .naming import HEADER_AFTER, HEADER_HOST, MSG_ID, message_id, subject
from .positions import Shipped, ShippingPositions

if TYPE_CHECKING:
    from nats.js import JetStreamContext

    from gz_ia.collector.metrics import Metrics

__all__ = ["Shipper"]

log = logging.getLogger("gz_ia.collector")

PAGE: Final = 512
"""Events read at once for one session, published as one message (or a few, see :data:`MESSAGE_BYTES`)
whose acknowledgements are awaited together."""
MESSAGE_BYTES: Final = 256 * 1024
"""Most bytes of stored lines in one message, a page being cut into several above it: within the
server's ``max_payload`` (1 MiB by default; a smaller one is read from the server), and a hub's
fetch of many messages stays bounded. A single larger line still goes alone."""
HEADERS_ROOM: Final = 1024
"""Bytes of a message kept for its headers under the server's ``max_payload``."""
POLL_INTERVAL: Final = 0.05
"""Seconds between looks at the roots when nothing was left to ship: the lag added at an agent's pace."""
ROOTS_INTERVAL: Final = 2.0
"""Seconds between re-reads of the roots this collector serves (a new workspace is shipped within it)."""
LANES: Final = 64
"""Sessions shipped at once: each waits for its page's acknowledgements, the others go on meanwhile."""
PUBLISH_TIMEOUT: Final = 2.0
"""Seconds to wait for one acknowledgement before the round ends and its events are sent again later."""


@dataclass
class _Root:
    path: Path
    id: str
    positions: ShippingPositions
    seen: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """Per session, the stat of its active file when everything in it was shipped."""
    ends: dict[str, int] = field(default_factory=dict)
    """Per session, the newest ``seq`` stored, as last looked at."""
    measured: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """Per session, the stat of its active file when its newest ``seq`` was last read for the lag
    alone (no server reached yet)."""

    def lag(self) -> int:
        shipped = self.positions.sessions
        return sum(max(0, end - (shipped[sid].seq if sid in shipped else 0)) for sid, end in self.ends.items())


def _stat(root: Path, session_id: str) -> tuple[int, int, int]:
    try:
        info = os.stat(root / "sessions" / f"{session_id}.events.jsonl", follow_symlinks=False)
    except OSError:
        return (0, -1, 0)
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _changed(
    root: _Root, since: dict[str, tuple[int, int, int]] | None = None
) -> list[tuple[str, tuple[int, int, int], int]]:
    """The sessions written since they were last shipped (``since``: since their stat there):
    ``(id, stat, newest seq)``."""
    if since is None:
        since = root.seen
    sessions = root.path / "sessions"
    try:
        names = os.listdir(sessions)
    except OSError:
        return []
    found = {each for name in names if (each := stored_session_id(name)) is not None}
    changed = []
    for session_id in sorted(found):
        stat = _stat(root.path, session_id)
        if since.get(session_id) == stat:
            continue
        try:
            end = cursor_seq(end_cursor(root.path, session_id), session_id)
        except (SessionNotFound, OSError, ValueError):
            continue
        root.ends[session_id] = end
        changed.append((session_id, stat, end))
    return changed


def cut_messages(entries: list[tuple[bytes, int, str]], most_bytes: int) -> list[list[tuple[bytes, int, str]]]:
    """``entries`` (line, seq, cursor) cut into messages of consecutive lines, each at most ``most_bytes``
    once joined (a longer line alone)."""
    messages: list[list[tuple[bytes, int, str]]] = []
    current: list[tuple[bytes, int, str]] = []
    size = 0
    for entry in entries:
        length = len(entry[0]) + 1
        if current and size + length > most_bytes + 1:
            messages.append(current)
            current, size = [], 0
        current.append(entry)
        size += length
    if current:
        messages.append(current)
    return messages


class Shipper:
    """Publishes the roots served through ``sockets`` (all but ``skip``) as ``host``.

    Args:
        config: the ``[fleet]`` settings.
        host: this machine's fleet name.
        state_dir: where the roots served are listed and the positions kept (``fleet/``).
        sockets: the collector's sockets (the roots served through them are its own).
        skip: a root never shipped (a hub's own root).
        metrics: where ``gzia_fleet_*`` are counted.
    """

    def __init__(
        self,
        config: FleetConfig,
        host: str,
        state_dir: Path,
        sockets: list[str],
        metrics: Metrics,
        skip: Path | None = None,
    ) -> None:
        self.config = config
        self.host = host
        self.state_dir = state_dir
        self.sockets = sockets
        self.metrics = metrics
        self.skip = skip
        self.roots: dict[Path, _Root] = {}
        self._roots_read = 0.0
        self.failing = False
        """The last round ended on an unacknowledged publish."""
        self.message_bytes = MESSAGE_BYTES
        """Most bytes of lines in one message (lowered by :meth:`fit` to what the server takes)."""

    def fit(self, max_payload: int) -> None:
        """Keep messages within the server's ``max_payload`` (read when connecting)."""
        if max_payload > 0:
            self.message_bytes = max(1, min(MESSAGE_BYTES, max_payload - HEADERS_ROOM))

    def lag(self) -> int:
        """Events written here and not yet acknowledged by the stream (as of the last look)."""
        return sum(root.lag() for root in list(self.roots.values()))

    async def measure(self) -> None:
        """Read how far each root is written, without shipping: while no server was ever reached,
        the lag ``gz-ia status`` and the metrics report is every event written since the positions."""
        self._refresh_roots()
        for root in list(self.roots.values()):
            for session_id, stat, _end in await asyncio.to_thread(_changed, root, root.measured):
                root.measured[session_id] = stat
        self.metrics.fleet_lag.labels("ship").set(self.lag())

    def _skipped(self, path: Path) -> bool:
        """Whether ``path`` is the hub's own root (shipping it would feed the hub its own writes)."""
        return self.skip is not None and os.path.realpath(path) == os.path.realpath(self.skip)

    def _refresh_roots(self) -> None:
        now = asyncio.get_running_loop().time()
        if self.roots and now - self._roots_read < ROOTS_INTERVAL:
            return
        self._roots_read = now
        for path, _uid in KnownRoots(self.state_dir).served_through(self.sockets):
            if path in self.roots or not path.is_dir() or self._skipped(path):
                continue
            identifier = root_id(path)
            self.roots[path] = _Root(path, identifier, ShippingPositions(self.state_dir / "fleet", path, identifier))

    async def run(self, js: JetStreamContext, stopping: asyncio.Event) -> None:
        """Ship until ``stopping`` is set: rounds back to back while there is work, else a short wait."""
        while not stopping.is_set():
            self._refresh_roots()
            shipped = 0
            for root in list(self.roots.values()):
                try:
                    shipped += await self.ship_root(js, root)
                except Exception:  # a bug or an unreadable root: keep shipping the others
                    log.exception("fleet: shipping %s failed; will retry", root.path)
            if shipped == 0:
                try:
                    await asyncio.wait_for(stopping.wait(), POLL_INTERVAL if not self.failing else 0.5)
                except TimeoutError:
                    pass

    async def ship_root(self, js: JetStreamContext, root: _Root) -> int:
        """One round over one root; return how many events the stream acknowledged."""
        changed = await asyncio.to_thread(_changed, root)
        self.metrics.fleet_lag.labels("ship").set(self.lag())
        if not changed:
            return 0
        lanes = asyncio.Semaphore(LANES)

        async def ship(session_id: str, stat: tuple[int, int, int], end: int) -> int:
            async with lanes:
                done, count = await self._ship_session(js, root, session_id, end)
            if done:
                root.seen[session_id] = stat
            return count

        results = await asyncio.gather(*(ship(*item) for item in changed), return_exceptions=True)
        acknowledged = 0
        for result in results:
            if isinstance(result, BaseException):
                log.error("fleet: shipping a session of %s failed; will retry", root.path, exc_info=result)
            else:
                acknowledged += result
        if acknowledged:
            await asyncio.to_thread(root.positions.save)
            self.metrics.fleet_lag.labels("ship").set(self.lag())
        return acknowledged

    async def _ship_session(self, js: JetStreamContext, root: _Root, session_id: str, end: int) -> tuple[bool, int]:
        """Ship one session up to ``end``; ``(all shipped, how many acknowledged)``."""
        positions = root.positions.sessions
        acknowledged = 0
        topic = subject(self.host, root.id)
        while True:
            shipped = positions.get(session_id)
            after = shipped.seq if shipped is not None else 0
            if after >= end:
                return True, acknowledged
            try:
                page = await asyncio.to_thread(
                    read_page, root.path, session_id, cursor=shipped.cursor if shipped else None, limit=PAGE
                )
            except SessionNotFound:
                return True, acknowledged
            if page.expired:  # retention took what was not shipped: go on from the oldest retained event
                log.warning("fleet: events of %s after seq %d were deleted before they were shipped", session_id, after)
                page = await asyncio.to_thread(read_page, root.path, session_id, limit=PAGE)
            # (line, seq, cursor after it) of what is not shipped yet; seq read without decoding the rest.
            entries = []
            for entry in page.entries:
                data = entry.line.encode()
                seq = seq_of(data)
                if seq is not None and seq > after:
                    entries.append((data, seq, entry.cursor))
            if not entries:
                if page.next_cursor is not None and page.entries:
                    last = page.entries[-1]
                    positions[session_id] = Shipped(max(after, last.event.seq), last.cursor)
                    continue
                return page.end, acknowledged
            messages = cut_messages(entries, self.message_bytes)
            pending: list[asyncio.Future[Any]] = []
            previous = after
            failure: BaseException | None = None
            for lines in messages:
                first, final = lines[0][1], lines[-1][1]
                headers = {
                    MSG_ID: message_id(self.host, root.id, session_id, first, final),
                    HEADER_HOST: self.host,
                    HEADER_AFTER: str(previous),
                }
                body = b"\n".join(data for data, _seq, _cursor in lines)
                try:
                    pending.append(await js.publish_async(topic, body, wait_stall=PUBLISH_TIMEOUT, headers=headers))
                except Exception as exc:  # disconnected, or too many unacknowledged: what went out is awaited
                    failure = exc
                    break
                previous = final
            results: list[Any] = list(
                await asyncio.gather(
                    *(asyncio.wait_for(future, PUBLISH_TIMEOUT) for future in pending), return_exceptions=True
                )
            )
            if failure is not None:
                results.append(failure)
            ok = 0
            for lines, result in zip(messages, results, strict=False):
                if isinstance(result, BaseException):
                    break
                ok += len(lines)
            if ok:
                _data, last_seq, last_cursor = entries[ok - 1]
                positions[session_id] = Shipped(last_seq, last_cursor)
                acknowledged += ok
                self.metrics.fleet_shipped.inc(ok)
            if ok < len(entries):
                failure = next(result for result in results if isinstance(result, BaseException))
                if not self.failing:
                    log.warning("fleet: the stream did not acknowledge (%s); shipping resumes when it does", failure)
                self.failing = True
                return False, acknowledged
            if self.failing:
                log.info("fleet: the stream acknowledges again; catching up")
            self.failing = False
