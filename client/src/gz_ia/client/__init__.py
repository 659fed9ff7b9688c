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

from . import _lifecycle  # noqa: F401  # registers the exit and fork handlers now, before an agent's own

# Not typing.TYPE_CHECKING: importing typing would cost the one-shot commands, which need only ``env``.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ._async import AsyncClient as AsyncClient
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

# Each public name is imported from its module on first use (PEP 562): a process pays only for what
# it touches (a hook that imports ``gz_ia.client.schema`` does not load the client, AsyncClient does
# not load asyncio until asked for).
_HOMES: dict[str, str] = {
    "AsyncClient": "_async",
    "Client": "_client",
    "build_event": "_client",
    "SenderStats": "_delivery",
    "Verdict": "_delivery",
    "NullClient": "_null",
    "ActionScope": "_scope",
    "EventSink": "_scope",
    "SessionScope": "_scope",
    "action": "_scope",
    "configure": "_scope",
    "current_session": "_scope",
    "get_client": "_scope",
    "new_session_id": "_scope",
    "session": "_scope",
    "CollectorUnavailable": "errors",
    "EventRejected": "errors",
    "GzIaError": "errors",
    "ProtocolError": "errors",
    "RejectReason": "protocol",
    "LogEvent": "schema",
    "Stage": "schema",
    "Status": "schema",
    "StoredEvent": "schema",
}
_PUBLIC_MODULES = frozenset({"env", "errors", "protocol", "schema", "usage"})
"""The public modules, reachable as attributes of the package, as they were when it imported them."""


def __getattr__(name: str) -> Any:
    import importlib

    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(f".{home}", __name__), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    if name in _PUBLIC_MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name == "__version__":
        from importlib.metadata import version

        return version("gz-ia-client")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_PUBLIC_MODULES})
