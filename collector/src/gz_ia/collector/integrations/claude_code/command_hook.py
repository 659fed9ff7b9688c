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

import fcntl
import os
import sys
import time

from gz_ia.client import env
from gz_ia.collector.oneshot import _plain_json
from gz_ia.collector.oneshot.ledger import Ledger, Outcome, ledger_directory, plain_event

from .mapping import check_payload, hook_events
from .state import HookState

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = ["run_hook"]

_TIMEOUT: Final = 2.0


def run_hook(raw: bytes, *, socket_path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> int:
    """Log the events of one hook payload; always 0, never a word on stdout.

    Args:
        raw: the payload, as read from stdin.
        socket_path: the collector socket.
        root: the session root; None finds it from the payload's ``cwd`` (as ``gz-ia`` finds a root).
    """
    if env.tracing_disabled():  # GZ_IA_DISABLED=1: as for every agent, nothing is logged
        return 0
    spool_dir = env.locate_spool()
    try:
        payload = check_payload(_plain_json.loads(raw))
        root = _root_of(payload) if root is None else os.fspath(root)
        with Ledger(
            f"claude-code\0{root}\0{payload['session_id']}", spool_dir=spool_dir, socket_path=socket_path, root=root
        ) as ledger:
            state = HookState(ledger.data)
            events = hook_events(payload, state, time.time_ns())
            if not events:
                return 0
            delivery = ledger.deliver([plain_event(**fields) for fields in events], timeout=_TIMEOUT)
            if payload["hook_event_name"] == "SessionEnd" and state.is_empty():
                ledger.remove()
        if delivery.outcome == Outcome.ACCEPTED:
            for reason, detail in delivery.rejected.values():
                _complain(f"event rejected ({reason}): {detail}")
        elif delivery.outcome != Outcome.SPOOLED:
            _complain(f"events not delivered ({delivery.outcome}): {delivery.detail}")
    except Exception as exc:
        _count_invalid(spool_dir, exc)
        _complain(f"payload ignored: {type(exc).__name__}: {exc}")
    return 0


def _root_of(payload: dict[str, Any]) -> str:
    cwd = payload.get("cwd")
    if os.environ.get("GZ_IA_ROOT") or not isinstance(cwd, str) or not os.path.isabs(cwd):
        return env.locate_root()
    return env.locate_root(cwd)


def _complain(message: str) -> None:
    try:
        print(f"gz-ia hook claude-code: {message}"[:1000], file=sys.stderr)
    except (OSError, ValueError):
        pass


def _count_invalid(spool_dir: str, exc: BaseException) -> None:
    """Count a payload the hook could not use: ``<spool dir>/ledgers/claude-code.invalid`` holds
    the count and the last error, on one line."""
    import contextlib  # only for a payload that failed

    with contextlib.suppress(OSError, ValueError):
        directory = ledger_directory(spool_dir)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(f"{directory}/claude-code.invalid", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            count = int(os.pread(fd, 32, 0).split(b" ", 1)[0] or b"0")
            line = f"{count + 1} {type(exc).__name__}: {str(exc)[:300]!r}\n".encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)
        finally:
            os.close(fd)
