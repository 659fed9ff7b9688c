"""The hook inbox: Claude Code's hook payloads left as files for the collector, with no Python start.

A command hook that starts Python costs Claude Code the interpreter's start at every hook, twice per
tool call. The hook ``gz-ia install claude-code`` writes by default is instead a small POSIX shell
script (:func:`drop_script`): it writes the payload, with the time it ran (the file's mtime) and the
``GZ_IA_ROOT`` and ``GZ_IA_SOCKET`` it was given, into ``<spool dir>/hooks/`` and returns. The
collector takes each drop in the order they were written, maps it exactly as ``gz-ia hook
claude-code`` would (:func:`.command_hook.run_hook`, with the drop's time) and removes it only once
its events are written or spooled. A drop is kept while no collector runs, so nothing is lost.

The script writes a drop only into an inbox that is a directory of its own user (not a link); the
collector makes it ``0700``. Anywhere else (no inbox yet, ``GZ_IA_DISABLED`` set, a root or socket
path holding a newline) it runs the full command hook instead, which logs or spools as always.

A drop is ``MAGIC``, the root, the socket (each a line, empty when unset), then the payload as
Claude Code sent it, copied by ``cat`` in place of the shell (no fork, nothing after it). A payload is
one JSON object: a drop whose payload does not decode yet is still being written (or its writer was
killed: :data:`STALE_AFTER` later it is taken for damaged).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.collector.errors import CollectorError

__all__ = ["INBOX_DIR", "MAGIC", "STALE_AFTER", "Drop", "DropDamaged", "drop_script", "inbox_dir", "read_drop"]

INBOX_DIR: Final = "hooks"
"""The inbox, inside the spool directory."""
MAGIC: Final = b"gz-ia hook drop 1\n"
STALE_AFTER: Final = 60.0
"""Seconds after which a drop whose payload does not decode is damaged, not still being written: the hook that
writes it takes milliseconds, and Claude Code kills a hook after its timeout."""
DROP_SUFFIX: Final = ".drop"

_SCRIPT: Final = r"""#!/bin/sh
# gz-ia's Claude Code hook, written by `gz-ia install claude-code` (run it again to rewrite it).
# It leaves the hook's payload in the gz-ia collector's inbox and returns at once: the collector
# logs it as `gz-ia hook claude-code` would, with the time the hook ran, and keeps it until then.
# Where no inbox of this user's is found, that command runs instead.
fallback() { exec @FALLBACK@; }
[ -z "${GZ_IA_DISABLED:-}" ] || fallback
if [ -n "${GZ_IA_SPOOL_DIR:-}" ]; then spool=$GZ_IA_SPOOL_DIR
elif [ -n "${XDG_STATE_HOME:-}" ]; then spool=$XDG_STATE_HOME/gz-ia/spool
elif [ -n "${HOME:-}" ]; then spool=$HOME/.local/state/gz-ia/spool
else fallback; fi
inbox=$spool/@INBOX@
if [ ! -d "$inbox" ] || [ -h "$inbox" ] || [ ! -O "$inbox" ]; then fallback; fi
case "${GZ_IA_ROOT:-}${GZ_IA_SOCKET:-}" in *'
'*) fallback ;; esac
set -C
n=0
until : >"$inbox/$$-$n@SUFFIX@"; do
  n=$((n + 1))
  [ "$n" -lt 64 ] || fallback
done 2>/dev/null
drop=$inbox/$$-$n@SUFFIX@
if printf '@MAGIC@%s\n%s\n' "${GZ_IA_ROOT:-}" "${GZ_IA_SOCKET:-}" >>"$drop"; then
  exec cat >>"$drop"
fi
rm -f "$drop"
echo "gz-ia: a Claude Code hook payload could not be saved in $inbox" >&2
exit 0
"""


def drop_script(fallback: str) -> str:
    """The hook script, running the shell command line ``fallback`` (``gz-ia hook claude-code``)
    where it finds no inbox."""
    return (
        _SCRIPT.replace("@FALLBACK@", fallback)
        .replace("@INBOX@", INBOX_DIR)
        .replace("@SUFFIX@", DROP_SUFFIX)
        .replace("@MAGIC@", MAGIC.decode().replace("\n", "\\n"))
    )


def inbox_dir(spool_dir: str | os.PathLike[str]) -> Path:
    """The inbox of ``spool_dir``, made ``0700`` (and checked to be this user's own directory)."""
    inbox = Path(spool_dir) / INBOX_DIR
    inbox.mkdir(mode=0o700, parents=True, exist_ok=True)
    status = inbox.lstat()
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid():
        raise PermissionError(f"{inbox} is not a directory of this user's")
    if stat.S_IMODE(status.st_mode) != 0o700:
        inbox.chmod(0o700)
    return inbox


class DropDamaged(CollectorError, ValueError):
    """A drop that will never be complete: not a drop, or cut off by its writer's end."""


@dataclass(frozen=True)
class Drop:
    """One hook call: its payload, the root and socket of the hook's environment (None: unset), and
    when it ran (nanoseconds since the epoch)."""

    payload: bytes
    root: str | None
    socket: str | None
    written_ns: int


def read_drop(path: Path, now: float) -> Drop | None:
    """The drop at ``path``, or None while it is still being written.

    Raises:
        DropDamaged: it never will be complete.
        OSError: it cannot be read (gone meanwhile: FileNotFoundError).
    """
    with path.open("rb") as file:
        status = os.fstat(file.fileno())
        raw = file.read()
    if not raw.startswith(MAGIC):
        if now - status.st_mtime > STALE_AFTER or len(raw) >= len(MAGIC):
            raise DropDamaged("not a gz-ia hook drop")
        return None
    try:
        root, socket, payload = raw[len(MAGIC) :].split(b"\n", 2)
        msgspec.json.decode(payload)
    except (ValueError, msgspec.DecodeError):
        if now - status.st_mtime > STALE_AFTER:
            raise DropDamaged("cut off before its end (its hook was killed?)") from None
        return None
    return Drop(payload, os.fsdecode(root) or None, os.fsdecode(socket) or None, status.st_mtime_ns)
