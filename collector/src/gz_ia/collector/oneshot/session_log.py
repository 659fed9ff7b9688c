"""Deliver one event as ``gz-ia session log`` does: the verdict printed, the exit code returned.

Shared by the ``gz-ia`` entry point's fast path (:mod:`..entry`) and the click command
(:mod:`..cli._session`). Like the fast path, it imports only what :mod:`.ledger` needs to reach a
collector; a ``LogEvent`` from the click command is turned into the plain event that packs to the
same bytes.
"""

from __future__ import annotations

import os
import sys

from gz_ia.client import env

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from gz_ia.client.schema import LogEvent

__all__ = ["EXIT_REFUSED", "EXIT_REJECTED", "EXIT_SPOOLED", "EXIT_UNAVAILABLE", "START_ONE", "attr_scalar", "log_event"]

EXIT_REJECTED: Final = 1
EXIT_REFUSED: Final = 1
"""The collector refused the connection (root not allowed, permission, protocol version)."""
EXIT_UNAVAILABLE: Final = 69
"""``EX_UNAVAILABLE`` from sysexits.h: no collector answered and the event could not be spooled."""
START_ONE: Final = "Start one with `gz-ia-collector` or `systemctl --user start gz-ia-collector.socket`."
"""What every command that cannot reach a collector tells the user to do (both ways to start one)."""
EXIT_SPOOLED: Final = 75
"""``EX_TEMPFAIL`` from sysexits.h: no collector answered; the event is spooled and will be written
when a collector adopts the spool (at its start, then every 30 s)."""


def attr_scalar(raw: str) -> bool | int | float | str:
    """The value of a typed ``KEY=VALUE`` measurement: ``true``/``false``, an int, a float, else text."""
    if raw in ("true", "false"):
        return raw == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            continue
    return raw


def log_event(
    event: dict[str, object] | LogEvent,
    *,
    socket_path: str | os.PathLike[str],
    root: str | os.PathLike[str],
    timeout: float,
    quiet: bool,
) -> int:
    """Deliver one event as ``gz-ia session log`` does; print the verdict and return the exit code.

    ``event`` is a :func:`~gz_ia.collector.oneshot.ledger.plain_event`, or a ``LogEvent`` (the click CLI's).
    Exit codes: 0 written, 1 rejected (the reason on stderr) or the connection refused, 75
    (``EX_TEMPFAIL``) spooled because no collector answered, 69 (``EX_UNAVAILABLE``) neither
    delivered nor spooled. With ``GZ_IA_DISABLED=1``, as every agent's client, it does nothing:
    it sends and spools nothing, prints nothing, and returns 0.
    """
    if env.tracing_disabled():
        return 0
    from gz_ia.collector.oneshot.ledger import Ledger, Outcome

    if not isinstance(event, dict):
        event = _plain(event)
    session_id = event["session_id"]
    root = os.fspath(root)
    with Ledger(
        f"session\0{root}\0{session_id}",
        spool_dir=env.locate_spool(),
        socket_path=socket_path,
        root=root,
    ) as ledger:
        delivery = ledger.deliver([event], timeout=timeout)
    if delivery.outcome == Outcome.ACCEPTED:
        if 0 in delivery.rejected:
            reason, detail = delivery.rejected[0]
            print(f"gz-ia: rejected ({reason}): {detail}", file=sys.stderr)
            return EXIT_REJECTED
        if not quiet:
            seq = delivery.seqs[0]
            print(f"accepted: {session_id} seq {seq}" if seq > 0 else f"accepted: {session_id}")
        return 0
    if delivery.outcome == Outcome.REFUSED:
        print(f"gz-ia: refused by the collector at {socket_path} ({delivery.detail})", file=sys.stderr)
        return EXIT_REFUSED
    if delivery.outcome == Outcome.SPOOLED:
        print(
            f"gz-ia: spooled: no collector is reachable at {socket_path} ({delivery.detail}); the event "
            f"will be written when a collector starts (spool: {delivery.spool}).\n{START_ONE}",
            file=sys.stderr,
        )
        return EXIT_SPOOLED
    print(f"gz-ia: not delivered: no collector is reachable at {socket_path} ({delivery.detail}).\n{START_ONE}",
          file=sys.stderr)  # fmt: skip
    return EXIT_UNAVAILABLE


def _plain(event: LogEvent) -> dict[str, object]:
    """A LogEvent as the plain event that packs to the same bytes."""
    from datetime import UTC, datetime

    import msgspec

    from gz_ia.collector.oneshot._msgpack import Timestamp

    fields = msgspec.structs.asdict(event)
    since = fields["timestamp"] - datetime(1970, 1, 1, tzinfo=UTC)
    fields["timestamp"] = Timestamp((since.days * 86_400 + since.seconds) * 10**9 + since.microseconds * 1000)
    return {name: value for name, value in fields.items() if value is not None}
