"""An OpenAI Agents SDK tracing processor: the SDK's traces as gz-ia sessions (extra ``[openai-agents]``).

::

    import agents
    from gz_ia.client.integrations.openai_agents import GzIaProcessor

    agents.add_trace_processor(GzIaProcessor())

What becomes what (docs/user-guide.md, "OpenAI Agents SDK"):

- a trace is a session (its id is the trace id, its ``role`` the workflow name) with one cycle, the
  workflow, from the trace's start to its end;
- an agent span is a subagent session (its id is the span id, its ``agent`` the agent's name)
  whose parent is the session of the agent that handed off to it, else the trace's session; it
  holds the cycle ``agent <name>``, FAILED with the span's error;
- a function span (a tool call) is a cycle of its agent's session, keyed by the span id (the
  events' cycle id) so that calls of one tool at once stay apart: PENDING at its start, FINISH OK
  or FAILED with the error and the duration at its end; only the sizes of its input and output are
  kept (``attrs``), never them;
- a handoff span is an instant cycle ``handoff to <agent>`` in the session handing off;
- a model span (generation, response) that reports usage is a cycle ``model <name>`` of its agent's
  session, keyed by the span id: READ and FINISH at its end, the FINISH carrying its tokens and model
  (:mod:`gz_ia.client.usage`), so that the session's totals count them.

Task, turn, guardrail and custom spans, and model spans without usage, are not logged. The processor
never raises into the SDK and never blocks: it only calls the client's ``log()``.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any, Final

from agents.tracing import (
    AgentSpanData,
    FunctionSpanData,
    GenerationSpanData,
    HandoffSpanData,
    ResponseSpanData,
    Span,
    Trace,
    TracingProcessor,
)

from gz_ia.client._scope import EventSink, get_client
from gz_ia.client.schema import Stage, Status
from gz_ia.client.usage import usage_attrs

__all__ = ["GzIaProcessor"]

_ROOT: Final = "\0trace"
_NAME: Final = 400
"""Bound on a name inside an action (actions are at most 512 characters)."""
_Session = tuple[str, str, str | None]
"""A session to log into: its id, its agent, its parent session."""


def _tool_cycle(tool: str, span_id: str) -> tuple[str, str]:
    """A tool call's action and cycle id: the span id, so that calls of one tool at once stay apart."""
    return tool[:_NAME], span_id[-32:]


def _duration_ms(span: Span[Any]) -> int | None:
    try:
        started = datetime.fromisoformat(str(span.started_at))
        ended = datetime.fromisoformat(str(span.ended_at))
    except (TypeError, ValueError):
        return None
    return max(0, int((ended - started).total_seconds() * 1000))


def _error(span: Span[Any]) -> str | None:
    error = span.error
    if not error:
        return None
    data = error.get("data") or {}
    detail = data.get("error") if isinstance(data, dict) else None
    # Whole: the client cuts a long error to its limit and marks it as cut.
    return f"{error.get('message', 'error')}: {detail}" if detail else str(error.get("message", "error"))


def _tokens(usage: dict[str, Any], key: str, *details: str) -> int | None:
    value: Any = usage.get(key)
    for name in details:
        value = value.get(name) if isinstance(value, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _model_usage(data: GenerationSpanData | ResponseSpanData) -> tuple[str, dict[str, Any]] | None:
    """A model span's model name and usage attrs; None when it reports no usage."""
    usage = data.usage
    if not isinstance(usage, dict) or not usage:
        return None
    response_model = getattr(data, "response", None) and getattr(data.response, "model", None)  # type: ignore[union-attr]
    model = str((data.model if isinstance(data, GenerationSpanData) else response_model) or "")
    attrs = usage_attrs(
        input_tokens=_tokens(usage, "input_tokens"),
        output_tokens=_tokens(usage, "output_tokens"),
        cache_read_tokens=_tokens(usage, "input_tokens_details", "cached_tokens"),
        model=model or None,
    )
    return model or "model", attrs


class GzIaProcessor(TracingProcessor):
    """Log the SDK's traces and spans as gz-ia sessions and cycles (see the module docstring).

    Args:
        agent: the ``agent`` of each trace's own session (agent sessions carry the agent's name).
        client: what sends the events; default the process's client (:func:`gz_ia.client.get_client`).
    """

    def __init__(self, *, agent: str = "openai-agents", client: EventSink | None = None) -> None:
        self.agent = agent
        self._client = client
        self._lock = threading.Lock()
        self._traces: dict[str, tuple[str, float]] = {}
        """Open traces: their session's workflow action and start (monotonic seconds)."""
        self._sessions: dict[str, _Session] = {}
        """Open spans (and each trace, under ``trace_id + _ROOT``): the session and agent their
        children log into."""
        self._handoffs: dict[tuple[str, str], _Session] = {}
        """(trace, agent name handed off to) -> the session and agent that handed off."""

    @property
    def client(self) -> EventSink:
        return self._client if self._client is not None else get_client()

    def _log(self, session: _Session, action: str, stage: Stage, **fields: Any) -> None:
        session_id, agent, parent = session
        self.client.log(
            session_id=session_id, action=action, stage=stage, agent=agent, parent_session_id=parent, **fields
        )

    def on_trace_start(self, trace: Trace) -> None:
        """Open the trace's session with its workflow cycle."""
        try:
            import time

            action = f"workflow {trace.name[:_NAME]}"
            with self._lock:
                self._traces[trace.trace_id] = (action, time.monotonic())
                self._sessions[trace.trace_id + _ROOT] = (trace.trace_id, self.agent, None)
            self._log((trace.trace_id, self.agent, None), action, Stage.READ, role=trace.name)
        except Exception:  # noqa: S110 - tracing must never break the agent
            pass

    def on_trace_end(self, trace: Trace) -> None:
        """FINISH the workflow cycle with its duration."""
        try:
            import time

            with self._lock:
                opened = self._traces.pop(trace.trace_id, None)
                self._sessions.pop(trace.trace_id + _ROOT, None)
                for key in [key for key in self._handoffs if key[0] == trace.trace_id]:
                    del self._handoffs[key]
            if opened is not None:
                action, started = opened
                duration = int((time.monotonic() - started) * 1000)
                self._log(
                    (trace.trace_id, self.agent, None),
                    action,
                    Stage.FINISH,
                    duration_ms=duration,
                    role=trace.name,
                )
        except Exception:  # noqa: S110 - tracing must never break the agent
            pass

    def _parent_session(self, span: Span[Any]) -> _Session:
        with self._lock:
            return self._sessions.get(
                span.parent_id or "", self._sessions.get(span.trace_id + _ROOT, (span.trace_id, self.agent, None))
            )

    def on_span_start(self, span: Span[Any]) -> None:
        """Open agent sessions and tool cycles; remember which session each span's children log into."""
        try:
            data = span.span_data
            parent = self._parent_session(span)
            if isinstance(data, AgentSpanData):
                with self._lock:
                    handed = self._handoffs.pop((span.trace_id, data.name), None)
                parent = handed or parent
                session = (span.span_id, data.name or "agent", parent[0])
                with self._lock:
                    self._sessions[span.span_id] = session
                self._log(session, f"agent {data.name[:_NAME]}", Stage.READ)
                return
            with self._lock:
                self._sessions[span.span_id] = parent
            if isinstance(data, FunctionSpanData):
                action, cycle = _tool_cycle(data.name, span.span_id)
                self._log(parent, action, Stage.PENDING, attrs={"tool": data.name}, cycle=cycle)
        except Exception:  # noqa: S110 - tracing must never break the agent
            pass

    def on_span_end(self, span: Span[Any]) -> None:
        """FINISH agent and tool cycles, OK or FAILED with the span's error; log handoffs."""
        try:
            data = span.span_data
            with self._lock:
                session = self._sessions.pop(span.span_id, None)
            if session is None:
                return
            error = _error(span)
            outcome: dict[str, Any] = {"status": Status.FAILED, "error": error} if error else {}
            if isinstance(data, AgentSpanData):
                self._log(
                    session, f"agent {data.name[:_NAME]}", Stage.FINISH, duration_ms=_duration_ms(span), **outcome
                )
            elif isinstance(data, FunctionSpanData):
                attrs = {
                    "tool": data.name[:1024],
                    "input_chars": len(data.input or ""),
                    "output_chars": len(str(data.output)) if data.output is not None else 0,
                }
                action, cycle = _tool_cycle(data.name, span.span_id)
                self._log(
                    session, action, Stage.FINISH, duration_ms=_duration_ms(span), attrs=attrs, cycle=cycle, **outcome
                )
            elif isinstance(data, GenerationSpanData | ResponseSpanData):
                called = _model_usage(data)
                if called is not None:
                    model, attrs = called
                    action, cycle = _tool_cycle(f"model {model}", span.span_id)
                    self._log(session, action, Stage.READ, cycle=cycle)
                    self._log(
                        session,
                        action,
                        Stage.FINISH,
                        duration_ms=_duration_ms(span),
                        attrs=attrs,
                        cycle=cycle,
                        **outcome,
                    )
            elif isinstance(data, HandoffSpanData) and data.to_agent:
                with self._lock:
                    self._handoffs[(span.trace_id, data.to_agent)] = session
                action = f"handoff to {data.to_agent[:_NAME]}"
                self._log(session, action, Stage.READ)
                self._log(session, action, Stage.FINISH, duration_ms=_duration_ms(span), **outcome)
        except Exception:  # noqa: S110 - tracing must never break the agent
            pass

    def shutdown(self) -> None:
        """Nothing to release: the client delivers what is queued when the process exits."""

    def force_flush(self) -> None:
        """Wait briefly for the queued events to be delivered."""
        flush = getattr(self.client, "flush", None)
        if callable(flush):
            try:
                flush(2.0)
            except Exception:  # noqa: S110 - tracing must never break the agent
                pass
