"""The ``gz-ia`` entry point: ``session log`` and ``hook`` without loading the click CLI.

Both run once per event, from scripts and from an agent's hooks, where the interpreter's start is
most of their cost; importing click, asyncio and every command module would triple it. So the entry
point handles a well-formed ``gz-ia [--socket S] [--root R] session log ...`` or
``gz-ia hook claude-code`` itself, and hands everything else to the click CLI: other commands,
``--help``, and any command line it does not fully understand (the click CLI then answers it, with
the same behaviour and its usage errors). Even msgspec, pathlib and typing would be a large part of a
call's cost: the fast paths import only what :mod:`.oneshot` needs to reach a collector.
"""

from __future__ import annotations

import os
import sys

from gz_ia.collector import _places

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from gz_ia.client.schema import LogEvent

__all__ = ["EXIT_REFUSED", "EXIT_REJECTED", "EXIT_SPOOLED", "EXIT_UNAVAILABLE", "attr_scalar", "log_event", "main"]

EXIT_REJECTED: Final = 1
EXIT_REFUSED: Final = 1
"""The collector refused the connection (root not allowed, permission, protocol version)."""
EXIT_UNAVAILABLE: Final = 69
"""``EX_UNAVAILABLE`` from sysexits.h: no collector answered and the event could not be spooled."""
EXIT_SPOOLED: Final = 75
"""``EX_TEMPFAIL`` from sysexits.h: no collector answered; the event is spooled and will be written
when a collector adopts the spool (at its start, then every 30 s)."""

_GLOBAL_OPTIONS: Final = {"--socket": "socket", "--root": "root"}
_LOG_VALUE_OPTIONS: Final = {
    "--action": "action",
    "--stage": "stage",
    "--status": "status",
    "--agent": "agent",
    "--role": "role",
    "--parent": "parent",
    "--duration": "duration",
    "--error": "error",
    "--attr": "attr",
    "--timeout": "timeout",
}


def main() -> None:
    """Run ``gz-ia``: the fast paths, else the click CLI."""
    code = fast_path(sys.argv[1:])
    if code is None:
        from gz_ia.collector.cli import main as cli

        cli()
    else:
        sys.exit(code)


def fast_path(argv: list[str]) -> int | None:
    """Run ``argv`` if it is a command this module handles; None hands it to the click CLI."""
    options: dict[str, str] = {}
    index = 0
    while index < len(argv) and argv[index].startswith("--"):
        name, value, index = _option(argv, index, _GLOBAL_OPTIONS)
        if name is None:
            return None
        options[name] = value
    command = argv[index : index + 2]
    rest = argv[index + 2 :]
    if command == ["hook", "claude-code"] and not rest:
        from gz_ia.collector.integrations.claude_code import run_hook

        return run_hook(
            sys.stdin.buffer.read(),
            socket_path=_socket_path(options),
            root=_places.absolute(options["root"]) if options.get("root") else None,
        )
    if command == ["session", "log"]:
        return _session_log(rest, options)
    return None


def _option(argv: list[str], index: int, known: dict[str, str]) -> tuple[str | None, str, int]:
    """Parse ``--name value`` or ``--name=value`` at ``argv[index]``; (None, ...) if not understood."""
    word = argv[index]
    flag, equals, value = word.partition("=")
    name = known.get(flag)
    if name is None:
        return None, "", index
    if equals:
        return name, value, index + 1
    if index + 1 >= len(argv):
        return None, "", index
    return name, argv[index + 1], index + 2


def _socket_path(options: dict[str, str]) -> str:
    # Without the flag, $GZ_IA_SOCKET as click reads it (an empty one counts as absent), else the default.
    return _places.normal(options["socket"]) if options.get("socket") else _places.default_socket_path()


def _root(options: dict[str, str]) -> str:
    return _places.absolute(options["root"]) if options.get("root") else _places.find_root()


def _session_log(argv: list[str], global_options: dict[str, str]) -> int | None:
    """``gz-ia session log``, exactly as ``cli._session`` defines it; None for anything unusual."""
    from gz_ia.collector.oneshot import STAGES, STATUSES, plain_event

    values: dict[str, str] = {}
    attrs: list[str] = []
    positional: list[str] = []
    quiet = False
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            positional.extend(argv[index + 1 :])
            break
        if word in ("-q", "--quiet"):
            quiet = True
            index += 1
            continue
        if word.startswith("-") and word != "-":
            name, value, index = _option(argv, index, _LOG_VALUE_OPTIONS)
            if name is None:
                return None
            if name == "attr":
                attrs.append(value)
            else:
                values[name] = value
            continue
        positional.append(word)
        index += 1
    for name, variable in (("agent", "GZ_IA_AGENT"), ("role", "GZ_IA_ROLE")):
        if name not in values and os.environ.get(variable):
            values[name] = os.environ[variable]
    stage = values.get("stage", "").upper()
    status = values.get("status", "OK").upper()
    if len(positional) != 1 or "action" not in values or "agent" not in values:
        return None
    if stage not in STAGES or status not in STATUSES:
        return None
    try:
        duration = int(values["duration"]) if "duration" in values else None
        timeout = float(values.get("timeout", "5.0"))
        parsed_attrs = _parse_attrs(attrs)
    except ValueError:
        return None
    if (duration is not None and duration < 0) or parsed_attrs is None:
        return None
    if status == "FAILED" and not values.get("error"):
        return None
    session_id = positional[0]
    parent = values.get("parent")
    event = plain_event(
        session_id=session_id,
        action=values["action"],
        stage=stage,
        status=status,
        agent=values["agent"],
        role=values.get("role"),
        parent_session_id=_places.inherited_parent(session_id) if parent is None else parent,
        duration_ms=duration,
        error=values.get("error"),
        attrs=parsed_attrs or None,
    )
    return log_event(
        event,
        socket_path=_socket_path(global_options),
        root=_root(global_options),
        timeout=timeout,
        quiet=quiet,
    )


def _parse_attrs(values: list[str]) -> dict[str, bool | int | float | str] | None:
    """``KEY=VALUE`` items as ``--attr`` reads them; None if one is malformed (click then says so)."""
    attrs: dict[str, bool | int | float | str] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            return None
        attrs[key] = attr_scalar(raw)
    return attrs


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

    ``event`` is a :func:`~gz_ia.collector.oneshot.plain_event`, or a ``LogEvent`` (the click CLI's).
    Exit codes: 0 written, 1 rejected (the reason on stderr) or the connection refused, 75
    (``EX_TEMPFAIL``) spooled because no collector answered, 69 (``EX_UNAVAILABLE``) neither
    delivered nor spooled.
    """
    from gz_ia.collector.oneshot import Ledger, Outcome

    if not isinstance(event, dict):
        event = _plain(event)
    session_id = event["session_id"]
    root = os.fspath(root)
    with Ledger(
        f"session\0{root}\0{session_id}",
        spool_dir=_places.default_spool_dir(),
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
    start_one = "Start one with `gz-ia-collector` or `systemctl --user start gz-ia-collector.socket`."
    if delivery.outcome == Outcome.SPOOLED:
        print(
            f"gz-ia: spooled: no collector is reachable at {socket_path} ({delivery.detail}); the event "
            f"will be written when a collector starts (spool: {delivery.spool}).\n{start_one}",
            file=sys.stderr,
        )
        return EXIT_SPOOLED
    print(f"gz-ia: not delivered: no collector is reachable at {socket_path} ({delivery.detail}).\n{start_one}",
          file=sys.stderr)  # fmt: skip
    return EXIT_UNAVAILABLE


def _plain(event: LogEvent) -> dict[str, object]:
    """A LogEvent as the plain event that packs to the same bytes."""
    from datetime import UTC, datetime

    import msgspec

    from gz_ia.collector._msgpack import Timestamp

    fields = msgspec.structs.asdict(event)
    since = fields["timestamp"] - datetime(1970, 1, 1, tzinfo=UTC)
    fields["timestamp"] = Timestamp((since.days * 86_400 + since.seconds) * 10**9 + since.microseconds * 1000)
    return {name: value for name, value in fields.items() if value is not None}


if __name__ == "__main__":  # ``python -m gz_ia.collector.entry``: where no gz-ia script is installed
    main()
