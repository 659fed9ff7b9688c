"""The sessions a running collector holds in memory, as the reader's summaries.

A session being written has a checkpoint older than its file, and summarising it from the files
means reading what was written since; with thousands of active sessions that is seconds. The
collector's own tally of each session it holds (the one its checkpoints are cut from) is newer
and costs nothing to read, so the web view lists those from memory and only the others from the
files (:func:`gz_ia.collector.reading.list_sessions` ``known``). Runs on the event loop, which
owns that state.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime

from gz_ia.collector.reading import SessionSummary
from gz_ia.collector.reading.sessions import waiting_of
from gz_ia.collector.storage.sessions import RootStore

__all__ = ["summaries_in_memory"]


def _parsed(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def summaries_in_memory(stores: Iterable[RootStore], root: str) -> dict[str, SessionSummary]:
    """Summaries of the sessions held in memory for the root whose real path is ``root``."""
    found: dict[str, SessionSummary] = {}
    for store in stores:
        if store.removed or os.path.realpath(store.path) != root:
            continue
        for session_id, state in list(store.sessions.items()):
            if not state.seq:
                continue
            last = state.last_stamp if state.last_stamp is not None else _parsed(state.last_time)
            tokens, cost = state.usage.counted()
            found[session_id] = SessionSummary(
                session_id=session_id,
                parent_session_id=state.parent or None,
                agent=state.agent,
                first_time=_parsed(state.first_time),
                last_time=last,
                events=state.seq,
                open_actions=len(state.open_actions),
                failures=state.failures,
                segments=state.segment,
                root_session_id=state.tree_root or None,
                ended_failed=state.ended_failed,
                tokens=tokens,
                cost_usd=cost,
                model=state.usage.model,
                hooks_usage_counts=state.usage.from_hooks,
                waiting=waiting_of(state),
            )
    return found
