"""``GET /live``: a live subscription as Server-Sent Events, resumed with ``Last-Event-ID``.

Each event's ``id`` is ``<epoch>:<seq>``; a browser's ``EventSource`` sends the last one back as
``Last-Event-ID`` when it reconnects, and the stream goes on after it (or says ``lagged``). Frames
are the hub's (:mod:`gz_ia.collector.live`): ``event: subscribed`` first (the epoch and newest seq),
then one ``message`` per written event (``data`` is the stored JSON line) and ``event: lagged``
where frames will not come. A comment every few seconds keeps an idle stream open. With
``ticks=1`` the stream carries no events, only ``event: written`` (the newest seq and how many were
written) at most twice a second: what a page needs to know that it should refresh a list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Final

from gz_ia.collector.http import Request, Response, StreamResponse
from gz_ia.collector.live import FrameSelection, Hub, InvalidSince, Lagged, Subscription
from gz_ia.collector.live.feed import source_of

__all__ = ["live_stream", "parse_event_id"]

_HEARTBEAT: Final = 10.0
_BATCH: Final = 512
_TICK: Final = 0.5
"""Seconds between two ``written`` notices of a ``ticks`` stream."""


def parse_event_id(value: str) -> tuple[str, int] | None:
    """``<epoch>:<seq>`` as (epoch, seq); None when it is not one."""
    epoch, sep, seq = value.strip().rpartition(":")
    if not sep or not epoch or not seq.isdigit():
        return None
    return epoch, int(seq)


def _error(status: int, message: str) -> Response:
    return Response(status, json.dumps({"error": message}).encode() + b"\n")


async def live_stream(
    request: Request, hub: Hub, root: str, family: Callable[[str], list[str]] | None = None
) -> Response | StreamResponse:
    """Answer ``/live?session=ID&subtree=1&match=FIELD=VALUE&since=EPOCH:SEQ`` for ``root``.

    Args:
        request: the request (``Last-Event-ID`` wins over ``since``).
        hub: the collector's hub.
        root: the session root, as resolved by the caller.
        family: the stored subtree of a session (run in a thread), to seed ``subtree``.
    """
    query = request.query
    sessions = query.get("session") or None
    subtree = query.get("subtree", ["0"])[0] in ("1", "true", "yes")
    resume = request.headers.get("last-event-id") or query.get("since", [""])[0]
    since: tuple[str, int] | None = None
    if resume:
        since = parse_event_id(resume)
        if since is None:
            return _error(400, "Last-Event-ID / since must be EPOCH:SEQ")
    try:
        selection = FrameSelection(sessions, subtree=subtree, matches=query.get("match", []))
    except ValueError as exc:
        return _error(400, str(exc))
    try:
        subscription = hub.subscribe(
            source_of(root),
            since_seq=since[1] if since else None,
            epoch=since[0] if since else None,
            accept=None if selection.everything else selection,
        )
    except InvalidSince as exc:
        return _error(400, str(exc))
    if sessions is not None and subtree and family is not None and selection.sessions is not None:
        # Subscribed first, then the stored tree is read: a subagent that starts meanwhile joins
        # through its parent, and one stored before is in the tree.
        for session_id in sessions:
            selection.sessions.update(await asyncio.to_thread(family, session_id))
    ticks = query.get("ticks", ["0"])[0] in ("1", "true", "yes")
    return StreamResponse(
        200,
        "text/event-stream; charset=utf-8",
        _ticks(subscription, hub.epoch) if ticks else _chunks(subscription, hub.epoch),
        headers=[("X-Accel-Buffering", "no")],
    )


async def _ticks(subscription: Subscription, epoch: str) -> AsyncIterator[bytes]:
    """Say that events were written (how many, and the newest seq), at most every _TICK seconds."""
    try:
        hello = {"epoch": epoch, "newest_seq": subscription.ring.newest_seq}
        yield b"retry: 1000\nevent: subscribed\ndata: " + json.dumps(hello).encode() + b"\n\n"
        while not subscription.closed:
            try:
                await asyncio.wait_for(subscription.ready.wait(), _HEARTBEAT)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            count = 0
            while subscription.ready.is_set() and not subscription.closed:
                count += sum(1 for item in subscription.take(_BATCH) if not isinstance(item, Lagged))
            notice = {"newest_seq": subscription.ring.newest_seq, "count": count}
            yield b"event: written\ndata: " + json.dumps(notice).encode() + b"\n\n"
            await asyncio.sleep(_TICK)
    finally:
        with contextlib.suppress(Exception):
            subscription.cancel()


async def _chunks(subscription: Subscription, epoch: str) -> AsyncIterator[bytes]:
    try:
        hello = {"epoch": epoch, "newest_seq": subscription.ring.newest_seq}
        yield b"retry: 1000\nevent: subscribed\ndata: " + json.dumps(hello).encode() + b"\n\n"
        while not subscription.closed:
            try:
                await asyncio.wait_for(subscription.ready.wait(), _HEARTBEAT)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            parts: list[bytes] = []
            for item in subscription.take(_BATCH):
                if isinstance(item, Lagged):
                    notice = {
                        "from_seq": item.from_seq,
                        "resume_seq": item.resume_seq,
                        "epoch_changed": item.epoch_changed,
                    }
                    parts.append(b"event: lagged\ndata: " + json.dumps(notice).encode() + b"\n\n")
                else:
                    parts.append(b"id: %s:%d\ndata: %s\n\n" % (epoch.encode(), item.seq, item.line))
            if parts:
                yield b"".join(parts)
    finally:
        with contextlib.suppress(Exception):
            subscription.cancel()
