"""Following sessions through a live subscription, with the files as the truth behind it.

:func:`follow_live` yields what :func:`gz_ia.collector.reading.follow` yields (the same entries, the
same lines), but is pushed each event by the collector instead of polling the files. The stream is
trusted only where it is whole: each session's events must come in ``seq`` order without a hole,
so a hole in a session, a ``lagged`` notice or a lost connection sends the follower to the files
for what it missed (each session from the last ``seq`` it yielded), after which the stream goes on
and what the files already gave is skipped. Every event is yielded once, in its session's order.
"""

from __future__ import annotations

import contextlib
import heapq
import os
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Final

from gz_ia.client.errors import GzIaError
from gz_ia.client.live import Gap, LiveEvent, Subscriber
from gz_ia.collector import reading
from gz_ia.collector.reading import Entry, Filters

__all__ = ["follow_live", "subscribe_or_none"]

_TICK: Final = 0.2
"""Seconds between calls of ``stop`` while nothing arrives."""


def subscribe_or_none(
    root: Path, socket_path: str | os.PathLike[str] | None = None, *, sessions: Sequence[str] | None = None
) -> Subscriber | None:
    """A live-only subscription to ``root`` (or only to ``sessions`` of it), or None when no
    collector can give one (none runs, a sharded one, another user's): then the files are read instead."""
    try:
        return Subscriber(root, socket_path=socket_path, sessions=sessions, timeout=2.0)
    except (GzIaError, OSError):
        return None


def follow_live(
    subscriber: Subscriber,
    root: Path,
    session_ids: Sequence[str] | None = None,
    *,
    cursor: str | None = None,
    stop: Callable[[], bool] | None = None,
    filters: Filters | None = None,
    on_gap: Callable[[reading.Gap], None] | None = None,
) -> Generator[Entry, None, None]:
    """Yield events as :func:`reading.follow` does, from ``subscriber`` (made before ``cursor``).

    Args:
        subscriber: a subscription to the whole root, opened before ``cursor`` was taken, so that
            every event after the cursor comes from the stream or is already in the files.
        root, session_ids, cursor, stop, filters, on_gap: as for :func:`reading.follow` (``on_gap``
            hears of the gaps in the files read to fill a hole of the stream).

    A follower whose collector goes away reads what it missed from the files and then goes on with
    :func:`reading.follow` from there.
    """
    wanted = None if session_ids is None else set(session_ids)
    shown: dict[str, int] = {}
    """Per session, the ``seq`` of the last event yielded (or in the cursor): the stream skips up to it."""
    if cursor is not None:
        for session_id in reading.cursor_sessions(cursor):
            shown[session_id] = reading.cursor_seq(cursor, session_id)
    if wanted is not None:
        for session_id in wanted:
            shown.setdefault(session_id, 0)

    def keep(entry: Entry) -> bool:
        return filters is None or filters.match(entry.event)

    def from_files(session_ids: Sequence[str]) -> Iterator[Entry]:
        """What the files hold after each session's last yielded event, merged by time."""
        parts: list[list[Entry]] = []
        for session_id in session_ids:
            last = shown.get(session_id, 0)
            try:
                start = reading.cursor_before(root, session_id, last + 1) if last else None
                entries = [
                    entry
                    for entry in reading.iter_events(root, session_id, cursor=start, on_gap=on_gap)
                    if entry.event.seq > last
                ]
            except reading.SessionNotFound:
                continue
            if entries:
                shown[session_id] = entries[-1].event.seq
                parts.append([entry for entry in entries if keep(entry)])
        yield from heapq.merge(*parts, key=lambda entry: entry.event.timestamp)

    def everyone() -> list[str]:
        if wanted is not None:
            return sorted(wanted)
        found = {summary.session_id for summary in reading.list_sessions(root)}
        return sorted(found | shown.keys())

    subscriber.settimeout(_TICK)
    try:
        while stop is None or not stop():
            try:
                items = subscriber.receive()
            except TimeoutError:
                continue
            except GzIaError:
                # The collector went away: catch up from the files, then poll them as it comes back.
                yield from from_files(everyone())
                resume = [
                    found
                    for session_id, seq in shown.items()
                    if seq and (found := reading.cursor_before(root, session_id, seq + 1)) is not None
                ]
                yield from reading.follow(
                    root,
                    session_ids,
                    cursor=reading.combine_cursors(resume) if resume else None,
                    stop=stop,
                    filters=filters,
                    on_gap=on_gap,
                )
                return
            for item in items:
                if isinstance(item, Gap):
                    yield from from_files(everyone())
                    continue
                yield from _one(item, wanted, shown, keep, from_files)
    finally:
        with contextlib.suppress(OSError):
            subscriber.close()


def _one(
    item: LiveEvent,
    wanted: set[str] | None,
    shown: dict[str, int],
    keep: Callable[[Entry], bool],
    from_files: Callable[[Sequence[str]], Iterator[Entry]],
) -> Iterator[Entry]:
    """One streamed event: skipped if already yielded, read from the files if the stream has a hole."""
    entry = Entry(item.line.decode(), None, "")
    session_id = entry.event.session_id
    if wanted is not None and session_id not in wanted:
        return
    seq = entry.event.seq
    last = shown.get(session_id, 0)
    if seq <= last:
        return  # the history or the files gave it already
    if seq > last + 1:
        # A hole in this session (or a session new to the follower that began before the stream
        # did, which it reads from its first event): the files have it all.
        yield from from_files([session_id])
        return
    shown[session_id] = seq
    if keep(entry):
        yield entry
