"""The OTLP/HTTP side of ``gz-ia export otel``: log records and spans through the SDK's exporters.

Every OpenTelemetry import is in this module and happens only when a sender is built, so the
collector itself never needs the ``[otel]`` extra. A send says how it went (:class:`Outcome`): an
attempt that got no answer within the timeout may have been stored by the backend anyway, and makes
the next attempts wait twice as long (up to a bound), so a slow backend is not sent the same batch
at the same pace forever.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from gz_ia.client.schema import Status, StoredEvent
from gz_ia.collector.errors import CollectorError

from .spans import SpanData, attribute_name, session_span_id, trace_id_of

__all__ = [
    "EVENT_NAME",
    "EXCEPTION_TYPE",
    "OTEL_EXTRA_HINT",
    "PROJECT_ATTRIBUTE",
    "SCOPE_NAME",
    "SIGNALS",
    "BatchSender",
    "MissingExtraError",
    "Outcome",
    "event_attributes",
    "make_sender",
]

log = logging.getLogger("gz_ia.otel")

OTEL_EXTRA_HINT: Final = "pip install 'gz-ia-collector[otel]'"
EVENT_NAME: Final = "gz_ia.stage_event"
SCOPE_NAME: Final = "gz_ia.collector.otel_export"
SIGNALS: Final = ("traces", "logs")
PROJECT_ATTRIBUTE: Final = "openinference.project.name"
"""The resource attribute that picks the backend's project (Phoenix)."""
EXCEPTION_TYPE: Final = "gz_ia.ActionFailed"
"""``exception.type`` of a failed action's ``exception`` event."""
_DEFAULT_TIMEOUT: Final = 10.0


class MissingExtraError(CollectorError, RuntimeError):
    """The ``[otel]`` extra is not installed, so export cannot be configured."""


def event_attributes(event: StoredEvent, root_session_id: str) -> dict[str, str | int | float | bool]:
    """Return the OTel attributes of one stored event's log record (unset optional fields are left out)."""
    attributes: dict[str, str | int | float | bool] = {
        "session.id": event.session_id,
        "gen_ai.agent.name": event.agent,
        "gz_ia.agent": event.agent,
        "gz_ia.action": event.action,
        "gz_ia.stage": event.stage.value,
        "gz_ia.status": event.status.value,
        "gz_ia.seq": event.seq,
        "gz_ia.root_session_id": root_session_id,
    }
    if event.parent_session_id:
        attributes["gz_ia.parent_session_id"] = event.parent_session_id
    if event.role:
        attributes["gz_ia.role"] = event.role
    if event.duration_ms is not None:
        attributes["gz_ia.duration_ms"] = event.duration_ms
    if event.error:
        attributes["exception.message"] = event.error
    for key, value in (event.attrs or {}).items():
        if value is not None:  # a null of an old line: OpenTelemetry has no null attribute
            attributes[attribute_name(key)] = value
    return attributes


class Outcome(enum.Enum):
    """What one attempt to send a batch came to."""

    ACCEPTED = "accepted"
    """The backend answered 2xx."""
    REFUSED = "refused"
    """The backend answered an error, or nobody listened: it did not store the batch."""
    NO_ANSWER = "no answer"
    """No answer within the timeout: the backend may have stored the batch anyway."""


class BatchSender(Protocol):
    """What the exporter needs from the OTLP side: send a batch, say how it went."""

    def send_logs(self, items: Sequence[tuple[StoredEvent, str]]) -> Outcome:
        """Send ``(event, root session id)`` pairs as log records."""
        ...

    def send_spans(self, spans: Sequence[SpanData]) -> Outcome:
        """Send finished spans."""
        ...

    def describe(self, signal: str) -> tuple[str, str]:
        """Return where ``signal`` goes and what the backend last answered to a failed attempt."""
        ...

    def close(self) -> None:
        """Release the connections."""
        ...


def _configured_timeout(signal: str) -> float:
    """The request timeout the SDK would use for ``signal`` (its variables, in seconds, as it reads them)."""
    raw = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT") or os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT")
    try:
        value = float(raw) if raw else _DEFAULT_TIMEOUT
    except ValueError:
        value = _DEFAULT_TIMEOUT
    return value if value > 0 else _DEFAULT_TIMEOUT


def _watching_session() -> Any:
    """Return a ``requests`` session that notes when a request went out and got no answer.

    The SDK's exporters only say "failed"; a request that was sent and then timed out (or whose
    connection broke before the answer) may have been stored by the backend, while a refused
    connection or an error status was not. The exporters accept a session, so this one tells them apart.
    """
    import requests
    from urllib3.exceptions import NewConnectionError

    class _WatchingSession(requests.Session):
        unanswered = False
        answer = ""
        """The last answer that was not a success: ``HTTP 405 Method Not Allowed: <body>``, or the error."""

        def request(self, *args: Any, **kwargs: Any) -> Any:
            try:
                response = super().request(*args, **kwargs)
            except requests.exceptions.ConnectTimeout as exc:
                self.answer = f"no connection in time ({exc})"
                raise  # never reached the backend
            except requests.exceptions.ConnectionError as exc:
                reason = getattr(exc.args[0], "reason", None) if exc.args else None
                if not isinstance(reason, NewConnectionError):  # refused: nothing was sent
                    self.unanswered = True
                    self.answer = f"the connection broke before an answer ({exc})"
                else:
                    self.answer = f"nobody listens ({reason})"
                raise
            except requests.exceptions.Timeout:
                self.unanswered = True
                self.answer = "no answer within the timeout"
                raise
            if not response.ok:
                body = " ".join(response.text.split())[:200] if response.content else ""
                self.answer = f"HTTP {response.status_code} {response.reason}" + (f": {body}" if body else "")
            return response

    return _WatchingSession()


class _Channel:
    """One signal's SDK exporter, rebuilt with a doubled timeout after an attempt that got no answer.

    A backend slower than the timeout stores batches the exporter believes lost; sending the same
    batch again at the same timeout would repeat that forever, so the timeout grows (and never
    shrinks during a run) until the backend answers in time or ``timeout_max`` is reached.
    """

    def __init__(self, factory: Callable[[float, Any], Any], signal: str, timeout_max: float, url: str | None) -> None:
        self._factory = factory
        self.signal = signal
        self.url = url or _default_url(signal)
        self.timeout = _configured_timeout(signal)
        self.timeout_max = max(timeout_max, self.timeout)
        self.session = _watching_session()
        self.exporter: Any = factory(self.timeout, self.session)
        self.answer = ""

    def export(self, batch: Sequence[Any], success: object) -> Outcome:
        self.session.unanswered = False
        self.session.answer = ""
        if self.exporter.export(batch) == success:
            return Outcome.ACCEPTED
        self.answer = self.session.answer or "the exporter gave up (see its log above)"
        if not self.session.unanswered:
            return Outcome.REFUSED
        if self.timeout < self.timeout_max:
            self.timeout = min(self.timeout_max, self.timeout * 2)
            log.warning("OTLP %s: no answer in time; the next attempts wait up to %.1f s", self.signal, self.timeout)
            with contextlib.suppress(Exception):
                self.exporter.shutdown()
            self.session = _watching_session()
            self.exporter = self._factory(self.timeout, self.session)
        return Outcome.NO_ANSWER

    def close(self) -> None:
        self.exporter.shutdown()


def _default_url(signal: str) -> str:
    """The URL the SDK's exporter posts ``signal`` to when no endpoint is given (its variables)."""
    specific = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    if specific:
        return specific
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318"
    return f"{base.rstrip('/')}/v1/{signal}"


def _endpoint(base: str | None, signal: str) -> str | None:
    """``--endpoint`` is the backend's base URL; a signal path given with it is tolerated."""
    if base is None:
        return None
    base = base.rstrip("/")
    for known in ("/v1/logs", "/v1/traces"):
        base = base.removesuffix(known)
    return f"{base}/v1/{signal}"


class _OtlpSender:
    """The real :class:`BatchSender`: SDK spans and log records through the OTLP/HTTP protobuf exporters."""

    def __init__(
        self,
        *,
        version: str,
        endpoint: str | None = None,
        signals: Sequence[str] = SIGNALS,
        timeout_max: float = 120.0,
        project: str | None = None,
    ) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry._logs import LogRecord, SeverityNumber
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk._logs import ReadableLogRecord
            from opentelemetry.sdk._logs.export import LogRecordExportResult
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import Event, ReadableSpan
            from opentelemetry.sdk.trace.export import SpanExportResult
            from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        except ImportError as exc:
            raise MissingExtraError(
                f"OpenTelemetry export needs the optional [otel] extra ({exc}); install it with: {OTEL_EXTRA_HINT}"
            ) from exc
        self._trace = trace
        self._log_record = LogRecord
        self._readable = ReadableLogRecord
        self._readable_span = ReadableSpan
        self._span_event = Event
        self._severity_error = SeverityNumber.ERROR
        self._severity_info = SeverityNumber.INFO
        self._logs_success = LogRecordExportResult.SUCCESS
        self._spans_success = SpanExportResult.SUCCESS
        resource: dict[str, str] = {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or "gz-ia-collector",
            "service.version": version,
            "host.name": socket.gethostname(),
        }
        if project:
            resource[PROJECT_ATTRIBUTE] = project  # Phoenix files the spans under this project
        self._resource = Resource.create(resource)
        self._scope = InstrumentationScope(SCOPE_NAME, version)
        logs_url, traces_url = _endpoint(endpoint, "logs"), _endpoint(endpoint, "traces")
        self._logs = (
            _Channel(
                lambda timeout, session: OTLPLogExporter(endpoint=logs_url, timeout=timeout, session=session),
                "logs",
                timeout_max,
                logs_url,
            )
            if "logs" in signals
            else None
        )
        self._spans = (
            _Channel(
                lambda timeout, session: OTLPSpanExporter(endpoint=traces_url, timeout=timeout, session=session),
                "traces",
                timeout_max,
                traces_url,
            )
            if "traces" in signals
            else None
        )

    def _context(self, trace_id: int, span_id: int) -> Any:
        return self._trace.SpanContext(
            trace_id=trace_id,
            span_id=span_id,
            is_remote=False,
            trace_flags=self._trace.TraceFlags(self._trace.TraceFlags.SAMPLED),
        )

    def _record(self, event: StoredEvent, root_session_id: str, observed: int) -> Any:
        span = self._context(trace_id_of(root_session_id), session_span_id(root_session_id, event.session_id))
        context = self._trace.set_span_in_context(self._trace.NonRecordingSpan(span))
        failed = event.status is Status.FAILED
        record = self._log_record(
            timestamp=int(event.timestamp.timestamp() * 1_000_000) * 1000,
            observed_timestamp=observed,
            context=context,
            severity_number=self._severity_error if failed else self._severity_info,
            severity_text="ERROR" if failed else "INFO",
            attributes=event_attributes(event, root_session_id),
            event_name=EVENT_NAME,
        )
        return self._readable(log_record=record, resource=self._resource, instrumentation_scope=self._scope)

    def _span(self, data: SpanData) -> Any:
        trace = self._trace
        status = (
            trace.Status(trace.StatusCode.ERROR, data.error)
            if data.error is not None
            else trace.Status(trace.StatusCode.OK)
        )
        events = []
        for item in data.events:
            attributes: dict[str, str | int] = {"gz_ia.seq": item.seq, "gz_ia.status": item.status}
            if item.error:
                attributes["exception.message"] = item.error
            if item.duration_ms is not None:
                attributes["gz_ia.duration_ms"] = item.duration_ms
            events.append(self._span_event(item.stage, attributes, timestamp=item.time_ns))
        if data.exception and data.error is not None:
            # The standard event backends display as the span's exception, at the failure's time.
            failure = {"exception.type": EXCEPTION_TYPE, "exception.message": data.error}
            events.append(self._span_event("exception", failure, timestamp=data.end_ns))
        parent = self._context(data.trace_id, data.parent_span_id) if data.parent_span_id is not None else None
        return self._readable_span(
            name=data.name,
            context=self._context(data.trace_id, data.span_id),
            parent=parent,
            resource=self._resource,
            attributes=data.attributes,
            events=events,
            kind=trace.SpanKind.INTERNAL,
            status=status,
            start_time=data.start_ns,
            end_time=data.end_ns,
            instrumentation_scope=self._scope,
        )

    def send_logs(self, items: Sequence[tuple[StoredEvent, str]]) -> Outcome:
        if self._logs is None:
            return Outcome.ACCEPTED
        observed = time.time_ns()
        return self._logs.export(
            [self._record(event, root_id, observed) for event, root_id in items], self._logs_success
        )

    def send_spans(self, spans: Sequence[SpanData]) -> Outcome:
        if self._spans is None:
            return Outcome.ACCEPTED
        return self._spans.export([self._span(data) for data in spans], self._spans_success)

    def describe(self, signal: str) -> tuple[str, str]:
        channel = self._logs if signal == "logs" else self._spans
        return ("", "") if channel is None else (channel.url, channel.answer)

    def close(self) -> None:
        for channel in (self._logs, self._spans):
            if channel is not None:
                with contextlib.suppress(Exception):
                    channel.close()


def make_sender(
    *,
    version: str,
    endpoint: str | None = None,
    signals: Sequence[str] = SIGNALS,
    timeout_max: float = 120.0,
    project: str | None = None,
) -> BatchSender:
    """Build the OTLP/HTTP sender (standard ``OTEL_EXPORTER_OTLP_*`` settings; ``endpoint`` is the base URL).

    Raises:
        MissingExtraError: the ``[otel]`` extra is not installed.
    """
    return _OtlpSender(version=version, endpoint=endpoint, signals=signals, timeout_max=timeout_max, project=project)
