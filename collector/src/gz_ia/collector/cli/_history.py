"""What ``gz-ia logs`` shows before it follows: the stored history of the chosen sessions, up to their anchors.

One session comes in stored (``seq``) order; several strictly by timestamp, each read as its runs
of rising time and merged, so that nothing is held in memory but ``-n``'s last events.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Final

from gz_ia.client.schema import StoredEvent

__all__ = ["all_ids", "members_of", "start_positions", "stored_history"]


def all_ids(root: Path) -> list[str]:
    """Every session of the root, ordered by first event."""
    from gz_ia.collector import reading

    return [summary.session_id for summary in reading.list_sessions(root)]


def members_of(root: Path, session_ids: list[str] | None, *, tree: bool) -> list[str]:
    """The sessions a command reads: every one (None), the one asked for, or its tree."""
    from gz_ia.collector import reading

    if session_ids is None:
        return all_ids(root)
    if not tree:
        return session_ids
    try:
        node = reading.session_tree(root, session_ids[0])
    except reading.SessionNotFound:
        return session_ids  # not written yet: follow it, and its subagents as they appear
    return [item.session_id for _depth, item in node.walk()]


def start_positions(members: list[str], cursor: str | None) -> dict[str, str | None]:
    """Per session, the cursor to start after (None: from its first event)."""
    from gz_ia.collector import reading

    if cursor is None:
        return dict.fromkeys(members)
    known = set(reading.cursor_sessions(cursor))
    if len(members) == 1 and members[0] not in known:
        raise reading.InvalidCursor(f"the cursor does not belong to session {members[0]!r}")
    return {session_id: cursor if session_id in known else None for session_id in members}


_MAX_RUNS: Final = 64
"""Past this many time runs in one session, it is sorted in memory instead of merged run by run."""
_MERGE_BUDGET: Final = 100_000
"""Events the merge of many sessions may hold at once, one page per session (or per run)."""
_MIN_PAGE: Final = 16
_GREP_PAGE: Final = 100


def _time_key(entry: Any) -> Any:
    return entry.event.timestamp


def stored_history(
    root: Path,
    members: list[str],
    start: dict[str, str | None],
    anchors: dict[str, str],
    filters: Any,
    count: int | None,
    *,
    grep: Callable[[StoredEvent], bool] | None,
    reverse: bool,
    on_gap: Callable[[Any], None],
    time_order: bool,
    last_seq: int | None = None,
) -> Iterator[Any]:
    """Yield what is stored up to the anchors, oldest first (newest first with ``reverse``).

    One session comes in stored (``seq``) order; several (``time_order``) strictly by timestamp,
    even where a session's clock went backwards: each session is read as its runs of rising time
    (see :func:`gz_ia.collector.reading.time_runs`), merged. ``grep`` selects before ``count`` does: ``-n 5 -g X`` is
    the last five events matching X; ``-n`` takes each session's newest events by ``seq``. Nothing
    after ``last_seq`` is read (``--seq N..M``).
    """
    from gz_ia.collector import reading

    limits = {key: reading.cursor_seq(value, key) for key, value in anchors.items()}
    if last_seq is not None:
        limits = {key: min(seq, last_seq) for key, seq in limits.items()}

    def kept(entries: Iterable[Any]) -> Iterator[Any]:
        return iter(entries) if grep is None else (entry for entry in entries if grep(entry.event))

    def forward(session_id: str, after: str | None, until: int, page_size: int = 1000) -> Iterator[Any]:
        return kept(
            reading.iter_events(
                root, session_id, cursor=after, filters=filters, on_gap=on_gap, until_seq=until, page_size=page_size
            )
        )

    def newest(session_id: str) -> list[Any]:
        """``-n`` without a cursor: the last ``count`` events, read backwards from the anchor, no further."""
        if not count:
            return []
        # Without --grep the first page is the answer; with it, pages of a hundred: a common match
        # is in the first, and each session decodes no more than that (a rare byte match over the
        # whole root is the search's, not this).
        events = reading.iter_events(
            root, session_id, cursor=anchors[session_id], reverse=True, filters=filters,
            page_size=count if grep is None else max(count, _GREP_PAGE), on_gap=on_gap,
        )  # fmt: skip
        return list(reversed(list(itertools.islice(kept(events), count))))

    present = [key for key in members if key in anchors]
    # The merge holds a page of every session at once: smaller pages when there are many sessions.
    page = max(_MIN_PAGE, min(1000, _MERGE_BUDGET // max(1, len(present))))

    def streams(session_id: str) -> list[Iterator[Any]]:
        """The session as iterators that each rise in time (one, unless its clock went back)."""
        after, until = start.get(session_id), limits[session_id]
        if not time_order:
            return [forward(session_id, after, until, page)]
        runs = reading.time_runs(root, session_id, cursor=after, until_seq=until)
        if len(runs) > _MAX_RUNS:
            return [iter(sorted(forward(session_id, after, until), key=_time_key))]
        bounds = [until if last is None else last for _cursor, last in runs]
        size = max(_MIN_PAGE, page // len(runs))
        return [forward(session_id, cursor, last, size) for (cursor, _last), last in zip(runs, bounds, strict=True)]

    if count is not None and any(start.get(key) is None for key in present):
        selected = [entry for key in present for entry in newest(key) if start.get(key) is None]
        selected += [entry for key in present if start.get(key) is not None for run in streams(key) for entry in run]
        if time_order:
            selected.sort(key=_time_key)
        selected = selected[-count:] if count else []
    else:
        merged: Iterator[Any] = heapq.merge(*(run for key in present for run in streams(key)), key=_time_key)
        if count is not None:
            selected = list(itertools.islice(merged, count))
        elif not reverse:
            yield from merged
            return
        else:
            selected = list(merged)
    yield from (reversed(selected) if reverse else selected)
