"""gz-ia client: report agent stage events to the gz-ia collector.

Quick start::

    from gz_ia import client as gz

    with gz.session(agent="claude", role="planner") as s:
        with s.action("Index dependencies") as act:
            ...              # READ was logged on entry
            act.pending()    # now editing / running tools
        # FINISH OK (or FAILED with the exception) was logged on exit, with duration_ms

``log()`` never blocks and never raises because of delivery; with ``GZ_IA_DISABLED=1`` every call
is a no-op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._client import Client as Client
from ._client import build_event as build_event
from ._delivery import SenderStats as SenderStats
from ._delivery import Verdict as Verdict
from ._null import NullClient as NullClient
from ._scope import ActionScope as ActionScope
from ._scope import EventSink as EventSink
from ._scope import SessionScope as SessionScope
from ._scope import action as action
from ._scope import configure as configure
from ._scope import current_session as current_session
from ._scope import get_client as get_client
from ._scope import new_session_id as new_session_id
from ._scope import session as session
from .errors import CollectorUnavailable as CollectorUnavailable
from .errors import EventRejected as EventRejected
from .errors import GzIaError as GzIaError
from .errors import ProtocolError as ProtocolError
from .protocol import RejectReason as RejectReason
from .schema import LogEvent as LogEvent
from .schema import Stage as Stage
from .schema import Status as Status
from .schema import StoredEvent as StoredEvent

if TYPE_CHECKING:
    from ._async import AsyncClient as AsyncClient

__all__ = [
    "ActionScope",
    "AsyncClient",
    "Client",
    "CollectorUnavailable",
    "EventRejected",
    "EventSink",
    "GzIaError",
    "LogEvent",
    "NullClient",
    "ProtocolError",
    "RejectReason",
    "SenderStats",
    "SessionScope",
    "Stage",
    "Status",
    "StoredEvent",
    "Verdict",
    "action",
    "build_event",
    "configure",
    "current_session",
    "get_client",
    "new_session_id",
    "session",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: asyncio would otherwise cost every agent more than the rest of the client.
    if name == "AsyncClient":
        from ._async import AsyncClient

        return AsyncClient
    if name == "__version__":
        from importlib.metadata import version

        return version("gz-ia-client")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
