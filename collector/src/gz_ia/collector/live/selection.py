"""Which frames a subscriber asked for: a session and its subtree, and ``FIELD=VALUE`` matches.

The matches are ``gz-ia logs``'s (:func:`gz_ia.collector.query.parse_matches`). A subtree grows as
frames pass: a session joins its family when it names a member as its parent or its root, which is
how ``gz-ia session logs --tree -f`` follows one.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from gz_ia.client.schema import StoredEvent
from gz_ia.collector.query import FieldMatches, parse_matches

from .hub import Frame

__all__ = ["FrameSelection", "event_of"]

_decoder = msgspec.json.Decoder(StoredEvent)


def event_of(frame: Frame) -> StoredEvent:
    """The frame's event, decoded once for all the subscribers that look into it."""
    event = frame.event
    if event is None:
        event = frame.event = _decoder.decode(frame.line)
    assert isinstance(event, StoredEvent)
    return event


class FrameSelection:
    """A subscriber's filter, called once per frame of its ring (see :class:`.hub.Subscription`).

    Args:
        sessions: only these sessions (None: every session of the source).
        subtree: and the subagent sessions below them, as they appear; ``family`` seeds what is
            already known of the tree (from the files).
        matches: ``FIELD=VALUE`` arguments.

    Raises:
        ValueError: a match that ``gz-ia logs`` would refuse.
    """

    def __init__(
        self,
        sessions: Iterable[str] | None = None,
        *,
        subtree: bool = False,
        family: Iterable[str] = (),
        matches: Iterable[str] = (),
    ) -> None:
        self.sessions: set[str] | None = None if sessions is None else {*sessions, *family}
        self.subtree = subtree
        self.matches: FieldMatches = parse_matches(matches)

    @property
    def everything(self) -> bool:
        """Whether every frame passes (no need to call it)."""
        return self.sessions is None and not self.matches

    def __call__(self, frame: Frame) -> bool:
        sessions = self.sessions
        if sessions is not None and frame.session_id not in sessions:
            if not self.subtree:
                return False
            event = event_of(frame)
            parent, top = event.parent_session_id, event.root_session_id
            if parent not in sessions and top not in sessions:
                return False
            sessions.add(frame.session_id)
        return not self.matches or self.matches.test(event_of(frame))
