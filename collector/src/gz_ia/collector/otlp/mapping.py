"""What the agents' telemetry becomes: GenAI spans and the agents' log events as stage events.

Every span or log record that means something becomes an :class:`Item`: the events of one cycle (a
tool call, an agent run, a model call), under a ``key`` that names the span or record, so that the
receiver can give each item an idempotency key of its own and a re-sent export is a duplicate (the
same rule as a client's resend). What becomes what (docs/user-guide.md, "The agents' own telemetry"):

- GenAI spans (``gen_ai.operation.name``): ``invoke_agent`` is a session (its id the span id, its
  parent the session of its parent span), with the cycle ``agent <name>``; ``execute_tool`` a cycle
  of its agent's session (the tool's name, keyed by ``gen_ai.tool.call.id`` or the span id), READ or
  PENDING at the span's start and FINISH OK or FAILED (the status message or the ``exception``
  event) at its end; any other span that reports ``gen_ai.usage.*`` a model call (``model <name>``,
  a usage record). Other spans are dropped.
- Log events of Claude Code (``claude_code.*``), Codex (``codex.*``) and Gemini CLI
  (``gemini_cli.*``): each tool result a tool cycle, each API request (response, for Gemini) a
  model call carrying its tokens, cost and model, in the session the agent's hooks use. A tool
  result names the call id the hooks key their cycle on (``join_cycle``): the hooks' cycle wins.

A span's session is its nearest agent span as far as ``sessions`` has seen (spans end, and are
exported, before their parents); an unseen parent is taken for the agent span it usually is.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import msgspec

from gz_ia.client.limits import MAX_ATTR_STRING_LENGTH, MAX_CYCLE_LENGTH, MAX_SESSION_ID_LENGTH
from gz_ia.client.schema import LogEvent, Stage, Status
from gz_ia.client.usage import usage_attrs

__all__ = ["READING_TOOLS", "Item", "map_logs", "map_spans"]

READING_TOOLS: Final = frozenset(
    {"Read", "Grep", "Glob", "LS", "WebFetch", "WebSearch", "NotebookRead", "read_file", "glob", "grep", "ls"}
)
"""Tools whose cycles start with READ (every other tool's with PENDING), as the hooks decide."""
_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_SAFE_ID: Final = re.compile(rf"[A-Za-z0-9_-][A-Za-z0-9_.-]{{0,{MAX_SESSION_ID_LENGTH - 1}}}")
"""What :func:`safe_id` leaves as it is: safe characters, no leading dot, within the length."""
_STATUS_ERROR: Final = 2
_MILLISECOND: Final = timedelta(milliseconds=1)
_NAME: Final = 400
_AGENTS: Final = {"claude_code": "claude-code", "codex": "codex", "gemini_cli": "gemini-cli"}
"""The ``agent`` of each agent's log events: the hooks' own names."""
_CODEX_HOOK_NAMES: Final = {"exec_command": "Bash", "shell": "Bash", "local_shell": "Bash"}
"""Codex's telemetry names its shell tools as the model calls them, its hooks (as Claude Code's) ``Bash``:
the hooks' name, so that a call reads the same whichever record holds it."""
_SERVICES: Final = {"claude-code": "claude_code", "codex": "codex", "gemini-cli": "gemini_cli", "codex_cli_rs": "codex"}
_STAGES: Final = {"READ": Stage.READ, "PENDING": Stage.PENDING}
_FINISH: Final = Stage.FINISH
_OK: Final = Status.OK
_FAILED: Final = Status.FAILED


class Item(msgspec.Struct, gc=False):
    """The events of one span or log record, staged together under one idempotency key (a Struct:
    one is made for every span and record of an export, and a Struct's constructor is msgspec's C).

    Attributes:
        key: names the span or record (a re-sent one has the same key).
        session_id: the session every event of the item is in.
        events: the events, as the fields of a :class:`~gz_ia.client.schema.LogEvent` (or, with
            :attr:`checked`, as LogEvents).
        join_cycle: the cycle id of the agent's hooks for the same tool call: when the session
            already holds it, the item adds nothing.
        subagent: the type of the Claude Code subagent whose model request the item is (its record
            carries the main session's id and no agent id): the receiver places it in the subagent
            session the hooks opened for that type at that time.
        hooks_record_it: the agent's hooks record the same call with nothing to join it by (Gemini
            CLI's): when the hooks opened the session, the item adds nothing.
        refused: why the span or record cannot become events (a number no event holds): it has
            none, and is refused alone, as an event that fails validation is.
        shown: the span or record as OTLP JSON, for the rejects file (with :attr:`refused` only).
    """

    key: str
    session_id: str
    events: list[Any] = msgspec.field(default_factory=list)
    join_cycle: str | None = None
    subagent: str | None = None
    hooks_record_it: bool = False
    refused: str | None = None
    shown: dict[str, Any] | None = None

    @property
    def checked(self) -> bool:
        """Whether :attr:`events` were made as LogEvents within every bound of the schema (asked for
        with ``checked=True``): they need no conversion."""
        return bool(self.events) and type(self.events[0]) is LogEvent


def _refused(kind: str, message: Any, exc: ValueError | OverflowError) -> Item:
    """The item of a span or record whose numbers no event holds (a usage count past 2**63 - 1, a
    duration past what a time can be moved by): mapping it raised ``exc``. Refusing it alone keeps
    the rest of its export, which a retry would only send again."""
    from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]  # protobuf ships no stubs

    content = message.SerializeToString(deterministic=True)
    reason = str(exc) if isinstance(exc, ValueError) else f"a number is out of range ({exc})"
    return Item(
        _digest("refused", content), "", refused=f"the {kind} cannot be stored: {reason}", shown=MessageToDict(message)
    )


def safe_id(raw: str) -> str:
    """``raw`` as a session id, as the Claude Code hook makes one (unsafe characters become ``-``)."""
    if _SAFE_ID.fullmatch(raw):  # an agent's UUID, as nearly every one is: itself
        return raw
    cleaned = "".join(char if char in _SAFE else "-" for char in raw).lstrip(".") or "-"
    return cleaned[:MAX_SESSION_ID_LENGTH]


_session_id: Final = functools.lru_cache(maxsize=4096)(safe_id)
""":func:`safe_id` of a log record's session id, remembered: an export's records share a few."""

_PLAIN_VALUES: Final = frozenset(("string_value", "bool_value", "int_value", "double_value"))


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind in _PLAIN_VALUES:
        return getattr(any_value, kind)
    if kind is None:
        return None
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return str(getattr(any_value, kind))[:1024]


def _attributes(pairs: Iterable[Any]) -> dict[str, Any]:
    """Attributes by key, as plain values, so that a mapping's every read is a dict's.

    Each is converted, read or not: a string value, nearly every one agents send, is taken as it
    is (a non-empty ``string_value`` is only there when it is the value's kind), which costs less
    than keeping the value to convert later.
    """
    values: dict[str, Any] = {}
    for pair in pairs:
        value = pair.value
        text = value.string_value
        values[pair.key] = text if text else _value(value)
    return values


def _time(nanos: int) -> datetime:
    return datetime.fromtimestamp(nanos / 1e9, UTC) if nanos > 0 else datetime.now(UTC)


def _int(value: Any) -> int | None:
    if type(value) is str:  # as agents send most numbers
        digits = value.strip()
        return int(digits) if digits.isdigit() else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value >= 0:
        return int(value)
    return None


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and value >= 0:
        return float(value)
    try:
        number = float(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return number if number is not None and number >= 0 else None


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _digest(*parts: str | bytes) -> str:
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(part.encode() if isinstance(part, str) else part)
        hashed.update(b"\0")
    return hashed.hexdigest()[:16]


def _cycle(call_id: str) -> str:
    return call_id[-MAX_CYCLE_LENGTH:]


def _cycle_events(
    session: tuple[str, str | None],
    agent: str,
    action: str,
    start: str,
    started: datetime,
    ended: datetime,
    cycle: str,
    *,
    error: str | None = None,
    attrs: dict[str, Any] | None = None,
    checked: bool = False,
) -> list[Any]:
    """A whole cycle: ``start`` at ``started``, FINISH at ``ended`` with the duration between.

    Both are made once, as LogEvents (this runs for every span and record of an export). With
    ``checked`` (the caller knows ``attrs`` within the schema's bounds) they are returned as they
    are, unless a session id is longer than one may be; otherwise as their fields, for the checks
    to refuse what they must."""
    session_id, parent = session
    name = action[:_NAME]
    agent = agent[:128] or "otel"
    duration = int((ended - started).total_seconds() * 1000)
    if duration < 0:  # noqa: PLR1730 - max() would add a call for every span and record
        duration = 0
    events = [
        LogEvent(
            timestamp=started,
            session_id=session_id,
            parent_session_id=parent or None,
            action=name,
            stage=_STAGES[start],
            status=_OK,
            agent=agent,
            cycle=cycle,
        ),
        LogEvent(
            timestamp=ended if ended > started else started,
            session_id=session_id,
            parent_session_id=parent or None,
            action=name,
            stage=_FINISH,
            status=_OK if error is None else _FAILED,
            agent=agent,
            cycle=cycle,
            duration_ms=duration,
            error=None if error is None else error[:16384] or "failed",
            attrs=attrs or None,
        ),
    ]
    if checked and len(session_id) <= MAX_SESSION_ID_LENGTH and (not parent or len(parent) <= MAX_SESSION_ID_LENGTH):
        # Every other field is within the schema's bounds as made: a session id by safe_id or of hex
        # digits, the action, agent and error cut to their lengths, a cycle of 1 to MAX_CYCLE_LENGTH,
        # a duration between two datetimes (years 1 to 9999: under 2**53 ms).
        return events
    # A LogEvent's constructor checks nothing: as fields, they go through every check.
    return [msgspec.structs.asdict(event) for event in events]


def _start_stage(tool: str) -> str:
    return "READ" if tool in READING_TOOLS else "PENDING"


# --- spans ---------------------------------------------------------------------------------------


def _span_error(span: Any) -> str | None:
    if span.status.code != _STATUS_ERROR:
        return None
    for event in span.events:
        if event.name == "exception":
            attributes = _attributes(event.attributes)
            kind, message = attributes.get("exception.type"), attributes.get("exception.message")
            text = ": ".join(str(part) for part in (kind, message) if part)
            if text:
                return text
    return span.status.message or "the span's status is ERROR"


def _span_usage(attributes: dict[str, Any]) -> dict[str, Any] | None:
    tokens = {
        "input_tokens": _int(attributes.get("gen_ai.usage.input_tokens", attributes.get("gen_ai.usage.prompt_tokens"))),
        "output_tokens": _int(
            attributes.get("gen_ai.usage.output_tokens", attributes.get("gen_ai.usage.completion_tokens"))
        ),
        "cache_read_tokens": _int(attributes.get("gen_ai.usage.cache_read.input_tokens")),
        "cache_creation_tokens": _int(attributes.get("gen_ai.usage.cache_creation.input_tokens")),
    }
    if all(value is None for value in tokens.values()):
        return None
    model = attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model")
    return usage_attrs(**tokens, model=str(model) if model else None)


def map_spans(
    request: Any, sessions: MutableMapping[str, tuple[str, str | None]], *, checked: bool = False
) -> list[Item]:
    """Return the items of an ``ExportTraceServiceRequest``'s GenAI spans (see the module docstring).

    Args:
        request: the decoded request.
        sessions: span id (hex) → its session and that session's parent, for the spans seen so far;
            updated here (the caller bounds it).
        checked: make an agent's or a tool's events as LogEvents (:attr:`Item.checked`) where they
            are within the schema's bounds: the same events, without a conversion of their fields.
    """
    items: list[Item] = []
    for resource_spans in request.resource_spans:
        service = str(_attributes(resource_spans.resource.attributes).get("service.name") or "otel")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                try:
                    item = _span_item(span, service, sessions, checked)
                except (ValueError, OverflowError) as exc:
                    item = _refused("span", span, exc)
                if item is not None:
                    items.append(item)
    return items


def _span_item(
    span: Any, service: str, sessions: MutableMapping[str, tuple[str, str | None]], checked: bool
) -> Item | None:
    attributes = _attributes(span.attributes)
    operation = attributes.get("gen_ai.operation.name")
    trace, span_id, parent = span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex()
    if not trace or not span_id:
        return None
    started, ended = _time(span.start_time_unix_nano), _time(span.end_time_unix_nano)
    error = _span_error(span)
    key = f"span:{trace}:{span_id}"
    parent_session = sessions.get(parent, (parent, None)) if parent else None
    if operation in ("invoke_agent", "create_agent"):
        name = str(attributes.get("gen_ai.agent.name") or span.name or service)
        session = (span_id, parent_session[0] if parent_session else None)
        sessions[span_id] = session
        events = _cycle_events(
            session, name, f"agent {name}", "READ", started, ended, _cycle(span_id), error=error, checked=checked
        )
        return Item(key, span_id, events)
    session = parent_session or (trace, None)
    sessions[span_id] = session
    agent = str(attributes.get("gen_ai.agent.name") or service)
    if operation == "execute_tool":
        tool = str(attributes.get("gen_ai.tool.name") or span.name or "tool")
        call_id = str(attributes.get("gen_ai.tool.call.id") or span_id)
        events = _cycle_events(
            session,
            agent,
            tool,
            _start_stage(tool),
            started,
            ended,
            _cycle(call_id),
            error=error,
            attrs={"tool": tool},
            checked=checked and len(tool) <= MAX_ATTR_STRING_LENGTH,
        )
        return Item(key, session[0], events)
    usage = _span_usage(attributes)
    if usage is None:
        return None
    model = str(usage.get("gen_ai.request.model") or "model")
    events = _cycle_events(
        session, agent, f"model {model}", "READ", started, ended, _cycle(span_id), error=error, attrs=usage
    )
    return Item(key, session[0], events)


# --- log events ----------------------------------------------------------------------------------


def map_logs(request: Any, *, checked: bool = False) -> list[Item]:
    """Return the items of an ``ExportLogsServiceRequest``'s agent log events (see the module docstring).

    With ``checked``, a tool call's events are LogEvents (:attr:`Item.checked`) where they are within
    the schema's bounds: the same events, without a conversion of their fields."""
    items: list[Item] = []
    for resource_logs in request.resource_logs:
        resource = _attributes(resource_logs.resource.attributes)
        service = str(resource.get("service.name") or "")
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                try:
                    item = _log_item(record, service, resource, checked)
                except (ValueError, OverflowError) as exc:
                    item = _refused("log record", record, exc)
                if item is not None:
                    items.append(item)
    return items


def _event_name(record: Any, attributes: dict[str, Any], service: str) -> tuple[str, str]:
    """``(source, kind)`` of a log event: ``("claude_code", "tool_result")``."""
    # Codex puts its source location in the record's event_name ("event otel/src/...rs:737") and
    # the event's name in the attribute, so the attribute comes first.
    name = attributes.get("event.name") or ""
    if type(name) is not str:
        name = str(name)
    if not name and record.event_name and " " not in record.event_name:
        name = record.event_name
    if not name and record.body.WhichOneof("value") == "string_value":
        name = record.body.string_value
    source, _, kind = name.rpartition(".")
    return source or _SERVICES.get(service) or service.replace("-", "_"), kind


def _log_session(source: str, attributes: dict[str, Any], resource: dict[str, Any]) -> tuple[str, str | None] | None:
    raw = (
        attributes.get("session.id")
        or attributes.get("conversation.id")
        or attributes.get("gen_ai.conversation.id")
        or resource.get("session.id")
    )
    if not raw:
        return None
    main = _session_id(str(raw))
    agent_id = attributes.get("agent_id") if source == "claude_code" else None
    if agent_id:
        # A Claude Code subagent's session, as the hooks name it.
        return safe_id(f"{main}.{agent_id}"), main
    return main, None


def _log_item(record: Any, service: str, resource: dict[str, Any], checked: bool) -> Item | None:
    attributes = _attributes(record.attributes)
    source, kind = _event_name(record, attributes, service)
    agent = _AGENTS.get(source)
    if agent is None:
        return None
    session = _log_session(source, attributes, resource)
    if session is None:
        return None
    ended = _time(record.time_unix_nano or record.observed_time_unix_nano)
    duration = _int(attributes.get("duration_ms")) or 0
    try:
        started = ended - _MILLISECOND * duration  # exact, as timedelta(milliseconds=duration), and cheaper
    except OverflowError:
        raise ValueError(f"duration_ms {duration} would start it before the year 1") from None
    if (source, kind) in (("claude_code", "tool_result"), ("codex", "tool_result"), ("gemini_cli", "tool_call")):
        tool = str(attributes.get("tool_name") or attributes.get("function_name") or "tool")
        if source == "codex":
            tool = _CODEX_HOOK_NAMES.get(tool, tool)
        call_id = attributes.get("tool_use_id") or attributes.get("call_id") or attributes.get("gen_ai.tool.call.id")
        failed = not _true(attributes.get("success"))
        error = None
        if failed:
            error = str(attributes.get("error") or attributes.get("error_type") or "the tool call failed")
        elif source == "codex":
            error = _exit_status(attributes.get("output"))
        elif source == "gemini_cli":
            error = _gemini_exit_status(attributes.get("metadata"))
        attrs: dict[str, Any]
        if call_id:
            call = str(call_id)
            cycle = join = _cycle(call)
            attrs = {"tool": tool[:1024], "tool_use_id": call[:1024]}
            key = f"log:{source}:tool:{session[0]}:{call}"
        else:
            cycle = _record_key(session[0], record)
            join = None
            attrs = {"tool": tool[:1024]}
            key = f"log:{cycle}"
        events = _cycle_events(
            session, agent, tool, _start_stage(tool), started, ended, cycle, error=error, attrs=attrs, checked=checked
        )
        return Item(key, session[0], events, join_cycle=join, hooks_record_it=source == "gemini_cli")
    usage = _log_usage(source, kind, attributes)
    if usage is None:
        return None
    record_key = _record_key(session[0], record)
    model = str(usage.get("gen_ai.request.model") or "model")
    events = _cycle_events(session, agent, f"model {model}", "READ", started, ended, record_key, attrs=usage)
    query_source = str(attributes.get("query_source") or "")  # a subagent's: "agent:builtin:<type>"
    subagent = None
    if source == "claude_code" and query_source.startswith("agent:"):
        subagent = query_source.rpartition(":")[2] or "agent"
    # Gemini CLI's hooks record each model request with its tokens (AfterModel), Claude Code's and
    # Codex's none: theirs are the only per-request usage there is.
    return Item(f"log:{record_key}", session[0], events, subagent=subagent, hooks_record_it=source == "gemini_cli")


def _record_key(session_id: str, record: Any) -> str:
    """What names a log record that names no call: its session and its whole content."""
    return _digest(session_id, record.SerializeToString(deterministic=True))


_EXIT: Final = re.compile(r"Process exited with code (-?\d+)")


def _exit_status(output: Any) -> str | None:
    """``exit code N`` when a Codex command's output says it exited non-zero (its ``success`` only
    says the tool ran); the output itself is never kept."""
    found = _EXIT.search(output) if isinstance(output, str) else None
    return f"exit code {found.group(1)}" if found and found.group(1) != "0" else None


def _gemini_exit_status(metadata: Any) -> str | None:
    """``exit code N`` when a Gemini CLI shell call's ``metadata`` (JSON text, ``{"exitCode": N}``)
    says it exited non-zero; its ``success`` only says the tool ran."""
    try:
        decoded = json.loads(metadata) if isinstance(metadata, str) else metadata
    except ValueError:
        return None
    code = decoded.get("exitCode") if isinstance(decoded, dict) else None
    return f"exit code {code}" if type(code) is int and code != 0 else None


def _log_usage(source: str, kind: str, attributes: dict[str, Any]) -> dict[str, Any] | None:
    """The usage attrs of an API request event, or None for an event that is not one."""
    get = attributes.get
    if (source, kind) in (("claude_code", "api_request"), ("codex", "api_request")):
        tokens = {
            "input_tokens": _int(get("input_tokens", get("input_token_count"))),
            "output_tokens": _int(get("output_tokens", get("output_token_count"))),
            "cache_read_tokens": _int(get("cache_read_tokens", get("cached_token_count"))),
            "cache_creation_tokens": _int(get("cache_creation_tokens")),
        }
        if source == "codex" and all(value is None for value in tokens.values()):
            return None  # Codex reports its tokens in the response.completed sse_event
    elif source == "codex" and kind == "sse_event" and get("input_token_count") is not None:
        tokens = {
            "input_tokens": _int(get("input_token_count")),
            "output_tokens": _int(get("output_token_count")),
            "cache_read_tokens": _int(get("cached_token_count")),
            "cache_creation_tokens": _int(get("cache_write_token_count")),
        }
    elif (source, kind) == ("gemini_cli", "api_response"):
        tokens = {
            "input_tokens": _int(get("input_token_count")),
            "output_tokens": _int(get("output_token_count")),
            "cache_read_tokens": _int(get("cached_content_token_count")),
            "cache_creation_tokens": None,
        }
    else:
        return None
    model = get("model") or get("gen_ai.request.model")
    return usage_attrs(**tokens, cost_usd=_float(get("cost_usd")), model=str(model)[:1024] if model else None)
