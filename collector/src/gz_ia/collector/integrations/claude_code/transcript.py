"""What Claude Code's transcript says about how a turn ended, for the one case its hooks cannot.

SessionEnd does not wait for StopFailure's hook, so a turn that failed on an API error may still be
open when the session ends; the transcript already holds that error (the synthetic assistant message
Claude Code writes before either hook runs), so the session's end can name it instead of "not
finished", and the late StopFailure can tell it was named.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs the command hook more than the rest of its work
if TYPE_CHECKING:
    from typing import Final

__all__ = ["api_error_ending"]

_TAIL: Final = 256 * 1024
"""Bytes read from the transcript's end: a failed turn's error is its last assistant entry."""


def api_error_ending(path: object) -> str | None:
    """The text of the API error the transcript's last assistant entry is, None when it is another
    entry, or the transcript cannot be read (an absent path, a symlink, not JSON Lines)."""
    if not isinstance(path, str) or not path:
        return None
    import json  # only here: most hook calls never read a transcript

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        tail = os.pread(fd, min(size, _TAIL), max(0, size - _TAIL))
    except OSError:
        return None
    finally:
        os.close(fd)
    for line in reversed(tail.splitlines()):
        if b'"assistant"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the first, cut line of the tail, or a torn last one
        if not isinstance(entry, dict) or entry.get("type") != "assistant":
            continue
        if entry.get("isApiErrorMessage") is not True:
            return None
        content = (entry.get("message") or {}).get("content")
        texts = [part.get("text") for part in content if isinstance(part, dict)] if isinstance(content, list) else []
        text = "".join(each for each in texts if isinstance(each, str)).strip()
        return text or None
    return None
