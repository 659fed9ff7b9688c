"""How events look on a terminal: one readable line each, coloured when asked to."""

from __future__ import annotations

from typing import Final

from gz_ia.client.schema import Stage, Status, StoredEvent

__all__ = ["format_event"]

_STAGE_COLOURS: Final = {Stage.READ: "\x1b[36m", Stage.PENDING: "\x1b[33m", Stage.FINISH: "\x1b[32m"}
_FAILED: Final = "\x1b[1;31m"
_DIM: Final = "\x1b[2m"
_RESET: Final = "\x1b[0m"


def format_event(event: StoredEvent, *, colour: bool = False, show_session: bool = False) -> str:
    """Return one line: time, [session], agent/role, stage, status, action, duration, error."""
    time_text = event.timestamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    who = event.agent + (f"/{event.role}" if event.role else "")
    failed = event.status is Status.FAILED
    parts = [time_text]
    if show_session:
        parts.append(event.session_id)
    parts.append(f"{who:<20}")
    stage = f"{event.stage.value:<7}"
    status = f"{event.status.value:<6}"
    if colour:
        parts[0] = _DIM + parts[0] + _RESET
        stage = _STAGE_COLOURS[event.stage] + stage + _RESET
        status = (_FAILED if failed else "\x1b[32m") + status + _RESET
    parts += [stage, status, event.action]
    if event.duration_ms is not None:
        parts.append(f"({_duration(event.duration_ms)})")
    if event.error:
        error = f"error: {event.error}"
        parts.append(_FAILED + error + _RESET if colour else error)
    return " ".join(parts)


def _duration(ms: int) -> str:
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(ms // 1000, 60)
    return f"{minutes} min {seconds} s"
