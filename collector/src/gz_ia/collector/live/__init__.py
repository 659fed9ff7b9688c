"""Live subscriptions: what the collector wrote, pushed to subscribers, replayable and never silent.

The hub (:mod:`.hub`) keeps bounded rings of written events per session root and cursors into them;
:mod:`.selection` says which frames a subscriber asked for. The socket protocol, the HTTP side and
the readers that use it are built on these (docs/protocol.md, "Live subscriptions").
"""

from __future__ import annotations

from .hub import RING_BYTES as RING_BYTES
from .hub import RING_FRAMES as RING_FRAMES
from .hub import TOTAL_BYTES as TOTAL_BYTES
from .hub import Frame as Frame
from .hub import Hub as Hub
from .hub import InvalidSince as InvalidSince
from .hub import Lagged as Lagged
from .hub import Subscription as Subscription
from .selection import FrameSelection as FrameSelection
from .selection import event_of as event_of

__all__ = [
    "RING_BYTES",
    "RING_FRAMES",
    "TOTAL_BYTES",
    "Frame",
    "FrameSelection",
    "Hub",
    "InvalidSince",
    "Lagged",
    "Subscription",
    "event_of",
]
