"""The plumbing every agent's command hook shares: one JSON payload on stdin becomes stage events.

An agent runs its hook command once per hook event. The agent's own module (:mod:`.codex`,
:mod:`.gemini`) says which events a payload means, on a :class:`HookRun`; this module does the rest
the same way for every agent:

- the payload's session (and, inside a subagent, the child session) as a valid gz-ia session id;
- tool input summarised, never copied: the tool's name, the command's first line, a path, a
  pattern or a URL, each cut to :data:`SUMMARY_CHARS`;
- cycles opened and finished across hook processes, their start times kept in the agent session's
  :class:`~gz_ia.collector.oneshot.ledger.Ledger`, which also orders concurrent hook processes (each
  holds its lock) and spools what no collector answered;
- the hook never gets in the agent's way: :func:`run_agent_hook` always returns 0 and prints nothing
  on stdout; with ``GZ_IA_DISABLED=1`` it logs nothing; a payload it cannot use is counted
  (``<spool dir>/ledgers/<command>.invalid``, e.g. ``gemini.invalid``: the count and the last
  error) and named in one line on stderr.

It imports only what :mod:`..oneshot.ledger` needs: the hook runs once per event, where the
interpreter's start is most of its cost.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

from gz_ia.client import env
from gz_ia.client.limits import MAX_CYCLE_LENGTH, MAX_SESSION_ID_LENGTH
from gz_ia.client.usage import CACHE_READ_TOKENS, HOOK_READING, INPUT_TOKENS, MODEL, OUTPUT_TOKENS, USAGE_FROM
from gz_ia.collector.oneshot import _plain_json
from gz_ia.collector.oneshot.ledger import Ledger, Outcome, ledger_directory, plain_event

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Final

__all__ = [
    "SUMMARY_CHARS",
    "HookRun",
    "complain",
    "count_invalid",
    "cut_line",
    "hook_usage",
    "root_of",
    "run_agent_hook",
    "safe_id",
    "session_attrs",
    "tool_cycle",
    "tool_summary",
]

SUMMARY_CHARS: Final = 200
"""Bound on each summarised tool input (a command's first line, a path, a pattern)."""
_SUMMARISED: Final = {
    "command": "command",
    "cmd": "command",
    "file_path": "file_path",
    "absolute_path": "file_path",
    "notebook_path": "file_path",
    "dir_path": "path",
    "path": "path",
    "pattern": "pattern",
    "url": "url",
    "query": "query",
    "description": "description",
}
"""Tool input keys kept in ``attrs`` (first line, cut), and the attribute each becomes."""
_OPEN_KEPT: Final = 512
"""Open cycles remembered per agent session; past it the oldest are forgotten."""
_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_TIMEOUT: Final = 2.0


def safe_id(raw: str) -> str:
    """``raw`` as a gz-ia session id: other characters become ``-``, cut to the schema's length."""
    cleaned = "".join(char if char in _SAFE else "-" for char in raw).lstrip(".") or "-"
    return cleaned[:MAX_SESSION_ID_LENGTH]


def hook_usage(prompt: object, output: object, cached: object = None, model: object = None) -> dict[str, Any]:
    """The usage attrs of a hook's own reading of a model call's (or a turn's) counts, in the
    reserved keys every reader counts, marked as a hook's (the agent's telemetry may report the same
    calls again). ``prompt`` includes the ``cached`` tokens, as OpenAI's and Gemini's APIs count them;
    the stored input does not, as the GenAI conventions' does not. Counts that are not ints are left out."""
    attrs: dict[str, Any] = {}
    read = cached if type(cached) is int and cached >= 0 else 0
    if type(prompt) is int and prompt >= 0:
        attrs[INPUT_TOKENS] = max(0, prompt - read)
    if type(output) is int and output >= 0:
        attrs[OUTPUT_TOKENS] = output
    if read:
        attrs[CACHE_READ_TOKENS] = read
    if isinstance(model, str) and model:
        attrs[MODEL] = model[:SUMMARY_CHARS]
    if attrs:
        attrs[USAGE_FROM] = HOOK_READING
    return attrs


def cut_line(value: object) -> str:
    """The first line of ``value``, cut to :data:`SUMMARY_CHARS` with a mark."""
    text = str(value).strip().splitlines()[0] if str(value).strip() else ""
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def tool_summary(payload: dict[str, Any]) -> dict[str, str | int | float | bool]:
    """The documented summary of a tool call: its name, its call id if any, a few short input fields."""
    attrs: dict[str, str | int | float | bool] = {"tool": cut_line(payload.get("tool_name", "?"))}
    if payload.get("tool_use_id"):
        attrs["tool_use_id"] = cut_line(payload["tool_use_id"])
    tool_input = payload.get("tool_input")
    if isinstance(tool_input, dict):
        for key, name in _SUMMARISED.items():
            value = tool_input.get(key)
            if isinstance(value, str | int | float) and not isinstance(value, bool) and name not in attrs:
                attrs[name] = cut_line(value)
    return attrs


def session_attrs(payload: dict[str, Any], *names: str) -> dict[str, str | int | float | bool]:
    """The session's own facts a payload carries (``source``, ``cwd``, ``transcript_path``, the way
    back to the agent's full record, ...), each cut to :data:`SUMMARY_CHARS`."""
    return {name: cut_line(payload[name]) for name in names if isinstance(payload.get(name), str) and payload[name]}


class HookRun:
    """The events of one payload, built against the agent session's ledger data.

    Args:
        agent: the ``agent`` of every event.
        payload: the hook's payload.
        data: the ledger's own map (open cycles live under ``"open"``).

    Attributes:
        labels: attributes every event of this payload carries (e.g. the model).
        events: the events built so far, delivered together once the agent's module is done.
    """

    def __init__(self, agent: str, payload: dict[str, Any], data: dict[str, Any]) -> None:
        self.agent = agent
        self.payload = payload
        self.data = data
        main = safe_id(str(payload["session_id"]))
        agent_id = payload.get("agent_id")
        self.session_id = safe_id(f"{main}.{agent_id}") if agent_id else main
        self.parent: str | None = main if agent_id else None
        self.role: str | None = str(payload["agent_type"]) if payload.get("agent_type") else None
        self.labels: dict[str, str | int | float | bool] = {}
        self.now = time.time_ns()
        self.events: list[dict[str, object]] = []

    def event(self, action: str, stage: str, **fields: Any) -> None:
        attrs = {**self.labels, **(fields.pop("attrs", None) or {})}
        self.events.append(
            plain_event(
                timestamp_ns=self.now,
                session_id=fields.pop("session_id", self.session_id),
                parent_session_id=fields.pop("parent_session_id", self.parent),
                action=action,
                stage=stage,
                agent=self.agent,
                role=fields.pop("role", self.role),
                status=fields.pop("status", "OK"),
                attrs=attrs or None,
                **fields,
            )
        )

    def open(self, key: str, action: str, stage: str, *, started_ns: int | None = None, **fields: Any) -> bool:
        """Start a cycle and remember when (``started_ns``, else now); False if ``key`` is already open."""
        opened: dict[str, list[Any]] = self.data.setdefault("open", {})
        if key in opened:  # the same call announced twice: one cycle
            return False
        while len(opened) >= _OPEN_KEPT:
            del opened[next(iter(opened))]
        started = time.time_ns() if started_ns is None else started_ns
        opened[key] = [action, started, fields.get("session_id", self.session_id), fields.get("cycle")]
        self.event(action, stage, **fields)
        return True

    def finish(
        self,
        key: str,
        status: str = "OK",
        *,
        duration_ms: int | None = None,
        ended_ns: int | None = None,
        **fields: Any,
    ) -> bool:
        """FINISH the cycle opened under ``key``; False (nothing logged) if it is not open.

        The duration is ``duration_ms`` when the agent reported the call's own time, else from the
        cycle's start to ``ended_ns`` (now if not given).
        """
        entry = self.data.get("open", {}).pop(key, None)
        if entry is None:
            return False
        action, started, session_id, cycle = entry
        if cycle:
            fields["cycle"] = cycle
        if duration_ms is None:
            ended = time.time_ns() if ended_ns is None else ended_ns
            duration_ms = max(0, (ended - int(started)) // 1_000_000)
        self.event(action, "FINISH", status=status, duration_ms=duration_ms, session_id=session_id, **fields)
        return True

    def remember(self, name: str, value: str) -> None:
        """Add ``value`` to the ledger's list ``name`` (the calls a turn announced), the newest
        :data:`_OPEN_KEPT` kept."""
        kept: list[str] = self.data.setdefault(name, [])
        kept.append(value)
        del kept[:-_OPEN_KEPT]

    def open_keys(self, prefix: str) -> list[str]:
        """The open cycles whose key starts with ``prefix``, oldest first."""
        return [key for key in self.data.get("open", {}) if key.startswith(prefix)]

    def finish_all(self, prefix: str, status: str, **fields: Any) -> None:
        """FINISH every open cycle under ``prefix`` (the session ended around them)."""
        for key in self.open_keys(prefix):
            self.finish(key, status, **fields)

    def single(
        self,
        action: str,
        status: str = "OK",
        *,
        attrs: dict[str, Any] | None = None,
        finish_attrs: dict[str, Any] | None = None,
        error: str | None = None,
        duration_ms: int | None = None,
        **fields: Any,
    ) -> None:
        """A cycle of its own, opened and finished by one payload (e.g. a PostToolUse whose
        PreToolUse was not seen): ``attrs`` on its opening, ``finish_attrs`` on its FINISH."""
        self.event(action, "PENDING", attrs=attrs, **fields)
        self.event(action, "FINISH", status=status, attrs=finish_attrs, error=error, duration_ms=duration_ms, **fields)


def tool_cycle(payload: dict[str, Any], call_id: str) -> tuple[str, str]:
    """The action of a tool call (the tool's name) and its cycle id (the call id, its last characters
    that fit): parallel calls of one tool are separate cycles, each with its own outcome."""
    return cut_line(payload.get("tool_name", "?")), cut_line(call_id)[-MAX_CYCLE_LENGTH:]


def run_agent_hook(
    raw: bytes,
    *,
    agent: str,
    command: str,
    handle: Callable[[HookRun], None],
    check: Callable[[dict[str, Any]], None],
    socket_path: str | os.PathLike[str],
    root: str | os.PathLike[str] | None,
) -> int:
    """Log the events of one hook payload of ``agent``; always 0, never a word on stdout.

    Args:
        raw: the payload, as read from stdin.
        agent: the agent's name, the ``agent`` of its events.
        command: the hook's name in ``gz-ia hook <command>``, which its complaints and count name.
        handle: adds the payload's events to the :class:`HookRun` it is given.
        check: raises ValueError for a payload the agent's module cannot use.
        socket_path: the collector socket.
        root: the session root; None finds it from the payload's ``cwd`` (as ``gz-ia`` finds a root).
    """
    if env.tracing_disabled():  # GZ_IA_DISABLED=1: as for every agent, nothing is logged
        return 0
    spool_dir = env.locate_spool()
    try:
        payload = _plain_json.loads(raw)
        if not isinstance(payload, dict) or not payload.get("session_id") or not payload.get("hook_event_name"):
            raise ValueError(f"not a {agent} hook payload (session_id and hook_event_name are required)")
        check(payload)
        root = root_of(payload) if root is None else os.fspath(root)
        with Ledger(f"{agent}\0{root}\0{payload['session_id']}", spool_dir=spool_dir, socket_path=socket_path,
                    root=root) as ledger:  # fmt: skip
            run = HookRun(agent, payload, ledger.data)
            handle(run)
            if not run.events:
                return 0
            delivery = ledger.deliver(run.events, timeout=_TIMEOUT)
            if payload["hook_event_name"] == "SessionEnd" and not ledger.data.get("open"):
                ledger.remove()
        if delivery.outcome == Outcome.ACCEPTED:
            for reason, detail in delivery.rejected.values():
                complain(command, f"event rejected ({reason}): {detail}")
        elif delivery.outcome != Outcome.SPOOLED:
            complain(command, f"events not delivered ({delivery.outcome}): {delivery.detail}")
    except Exception as exc:
        count_invalid(command, spool_dir, exc)
        complain(command, f"payload ignored: {type(exc).__name__}: {exc}")
    return 0


def root_of(payload: dict[str, Any]) -> str:
    """The session root of a payload: found from its ``cwd``, unless ``GZ_IA_ROOT`` says it."""
    cwd = payload.get("cwd")
    if os.environ.get("GZ_IA_ROOT") or not isinstance(cwd, str) or not os.path.isabs(cwd):
        return env.locate_root()
    return env.locate_root(cwd)


def complain(command: str, message: str) -> None:
    """Say on stderr why ``gz-ia hook <command>`` logged nothing (the agent shows it, or drops it)."""
    try:
        print(f"gz-ia hook {command}: {message}"[:1000], file=sys.stderr)
    except (OSError, ValueError):
        pass


def count_invalid(command: str, spool_dir: str, exc: BaseException) -> None:
    """Count a payload the hook could not use: ``<spool dir>/ledgers/<command>.invalid`` holds the
    count and the last error, on one line."""
    import contextlib  # only for a payload that failed

    with contextlib.suppress(OSError, ValueError):
        directory = ledger_directory(spool_dir)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(f"{directory}/{command}.invalid", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            count = int(os.pread(fd, 32, 0).split(b" ", 1)[0] or b"0")
            line = f"{count + 1} {type(exc).__name__}: {str(exc)[:300]!r}\n".encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)
        finally:
            os.close(fd)
