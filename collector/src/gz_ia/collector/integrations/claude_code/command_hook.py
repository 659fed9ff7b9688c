"""``gz-ia hook claude-code``: Claude Code's command hook, one process per hook event.

Claude Code runs the hook command once per hook event, with one JSON object on stdin. Each call maps
it (:func:`.mapping.hook_events`) against the Claude Code session's state, kept in that session's
ledger file (:mod:`gz_ia.collector.oneshot.ledger`), and delivers the events over the collector's
socket, or spools them when no collector answers.

The hook must never get in Claude Code's way: :func:`run_hook` always returns 0 and prints nothing
on stdout. With ``GZ_IA_DISABLED=1`` it logs nothing. A payload it cannot use is counted
(``<spool dir>/ledgers/claude-code.invalid``: the count and the last error) and named in one line on
stderr.
"""

from __future__ import annotations

import os
import time

from gz_ia.client import env
from gz_ia.collector.integrations.agent_hook import complain, count_invalid, root_of
from gz_ia.collector.oneshot import _plain_json
from gz_ia.collector.oneshot.ledger import Ledger, Outcome, plain_event

from .mapping import check_payload, hook_events
from .state import HookState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["log_payload", "run_hook"]

_TIMEOUT: Final = 2.0
_LAST_CALL: Final = "last_call"
"""The ledger's entry naming the last call given a name (``once``)."""


def run_hook(raw: bytes, *, socket_path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> int:
    """Log the events of one hook payload; always 0, never a word on stdout.

    Args:
        raw: the payload, as read from stdin.
        socket_path: the collector socket.
        root: the session root; None finds it from the payload's ``cwd`` (as ``gz-ia`` finds a root).
    """
    if env.tracing_disabled():  # GZ_IA_DISABLED=1: as for every agent, nothing is logged
        return 0
    log_payload(raw, socket_path=socket_path, root=root, spool_dir=env.locate_spool())
    return 0


def log_payload(
    raw: bytes,
    *,
    socket_path: str | os.PathLike[str],
    root: str | os.PathLike[str] | None,
    spool_dir: str,
    ran_ns: int | None = None,
    once: str | None = None,
) -> None:
    """Map one payload against its session's ledger and deliver (or spool) its events; what went
    wrong is said on stderr and counted, never raised.

    Args:
        ran_ns: when the hook ran (the inbox takes its drops later); None: now.
        once: a name for this call: a call of the same session named as the last one does nothing,
            so a drop taken again after a crash is not logged twice (the name is kept in the
            session's ledger, which is saved with the delivery).
    """
    try:
        payload = check_payload(_plain_json.loads(raw))
        root = root_of(payload) if root is None else os.fspath(root)
        with Ledger(
            f"claude-code\0{root}\0{payload['session_id']}", spool_dir=spool_dir, socket_path=socket_path, root=root
        ) as ledger:
            if once is not None:
                if ledger.data.get(_LAST_CALL) == once:
                    return
                ledger.data[_LAST_CALL] = once
            state = HookState(ledger.data)
            events = hook_events(payload, state, time.time_ns() if ran_ns is None else ran_ns)
            if not events:
                return
            delivery = ledger.deliver([plain_event(**fields) for fields in events], timeout=_TIMEOUT)
            if payload["hook_event_name"] in ("SessionEnd", "StopFailure") and state.is_empty():
                ledger.remove()
        if delivery.outcome == Outcome.ACCEPTED:
            for reason, detail in delivery.rejected.values():
                complain("claude-code", f"event rejected ({reason}): {detail}")
        elif delivery.outcome != Outcome.SPOOLED:
            complain("claude-code", f"events not delivered ({delivery.outcome}): {delivery.detail}")
    except Exception as exc:
        count_invalid("claude-code", spool_dir, exc)
        complain("claude-code", f"payload ignored: {type(exc).__name__}: {exc}")
