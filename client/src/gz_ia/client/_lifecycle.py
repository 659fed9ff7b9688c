"""What every live sender must hear of the process's life: the interpreter's exit and a fork.

Registered when the package is imported (its ``__init__`` imports this module), although a sender
is made only with the first client: so that the exit handler runs after those an agent registers
later (atexit runs the last registered first), which may still log.
"""

from __future__ import annotations

import atexit
import os
import time
import weakref

from . import env

TYPE_CHECKING = False  # not typing's: the one-shot commands import this package without typing
if TYPE_CHECKING:
    from typing import Protocol

    class LiveSender(Protocol):
        """The two calls this module makes of a sender; it imports none (the sender imports this)."""

        def close(self, timeout: float | None) -> None:
            """Deliver for at most ``timeout`` seconds, spool the rest, stop."""

        def after_fork_in_child(self) -> None:
            """Start afresh in a forked child: the parent's queue, socket and thread are the parent's."""


__all__ = ["live_senders"]

live_senders: weakref.WeakSet[LiveSender] = weakref.WeakSet()


def _drain_all_at_exit() -> None:
    timeout = env.exit_timeout()
    deadline = time.monotonic() + timeout
    for sender in list(live_senders):
        sender.close(max(0.0, deadline - time.monotonic()))


def _reset_all_after_fork() -> None:
    for sender in list(live_senders):
        sender.after_fork_in_child()


atexit.register(_drain_all_at_exit)
os.register_at_fork(after_in_child=_reset_all_after_fork)
