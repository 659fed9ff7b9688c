"""Reading an OTLP/HTTP export request: protobuf or OTLP JSON, into ``opentelemetry-proto`` messages.

OTLP's JSON mapping differs from protobuf's own in two ways that matter here: trace and span ids are
hex strings (not base64), and enums may be numbers. Ids are turned into base64 before the JSON is
parsed with protobuf's ``json_format``, which takes enum numbers and both field spellings, so both
encodings end as the same message and one mapping reads them.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
from typing import Any, Final

from gz_ia.collector.errors import CollectorError

__all__ = ["OTLP_INSTALL_HINT", "BodyUnreadable", "OtlpUnavailable", "Signal", "decode_request"]

OTLP_INSTALL_HINT: Final = (
    "the OTLP receiver needs the collector's [otlp] extra: pip install 'gz-ia-collector[otlp]' "
    "(or uv tool install 'gz-ia-collector[otlp]'), then restart the collector"
)
_ID_FIELDS: Final = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"})


class Signal(enum.StrEnum):
    """What an export request carries, named as its path names it (``/v1/<signal>``)."""

    TRACES = "traces"
    LOGS = "logs"
    METRICS = "metrics"


class OtlpUnavailable(CollectorError):
    """The ``opentelemetry-proto`` package is not installed: the operator's to fix (:data:`OTLP_INSTALL_HINT`)."""


class BodyUnreadable(CollectorError, ValueError):
    """An export body that cannot be read: the exporter's fault, answered 400.

    Attributes:
        reason: a fixed label (``content_type``, ``protobuf``, ``json``): the
            ``gzia_otlp_rejected_total`` reason.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _messages(signal: Signal) -> Any:
    try:
        if signal is Signal.TRACES:
            from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as module

            return module.ExportTraceServiceRequest()
        if signal is Signal.LOGS:
            from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs_module

            return logs_module.ExportLogsServiceRequest()
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as metrics_module

        return metrics_module.ExportMetricsServiceRequest()
    except ImportError as exc:
        raise OtlpUnavailable(OTLP_INSTALL_HINT) from exc


def _base64_ids(value: Any) -> Any:
    """The JSON value with every hex id field as the base64 protobuf's JSON parser expects."""
    if isinstance(value, dict):
        fixed = {}
        for key, item in value.items():
            if key in _ID_FIELDS and isinstance(item, str):
                try:
                    item = base64.b64encode(bytes.fromhex(item)).decode()
                except ValueError as exc:
                    raise BodyUnreadable("json", f"{key} {item[:40]!r} is not a hex id") from exc
            else:
                item = _base64_ids(item)
            fixed[key] = item
        return fixed
    if isinstance(value, list):
        return [_base64_ids(item) for item in value]
    return value


def decode_request(signal: Signal, content_type: str, body: bytes) -> Any:
    """Return the ``Export<Signal>ServiceRequest`` that ``body`` (decompressed already) holds.

    Raises:
        OtlpUnavailable: ``opentelemetry-proto`` is not installed.
        BodyUnreadable: not protobuf nor JSON, or not an export request of ``signal``.
    """
    message = _messages(signal)
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind in ("application/x-protobuf", "application/protobuf"):
        from google.protobuf.message import DecodeError  # type: ignore[import-untyped]  # protobuf ships no stubs

        try:
            message.ParseFromString(body)
        except DecodeError as exc:
            raise BodyUnreadable("protobuf", f"the body is not an OTLP {signal} protobuf message: {exc}") from None
        return message
    if kind == "application/json":
        from google.protobuf import json_format  # type: ignore[import-untyped]  # protobuf ships no stubs

        try:
            parsed = json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise BodyUnreadable("json", f"the body is not JSON: {exc}") from None
        try:
            json_format.ParseDict(_base64_ids(parsed), message, ignore_unknown_fields=True)
        except (json_format.ParseError, binascii.Error, TypeError, ValueError) as exc:
            if isinstance(exc, BodyUnreadable):
                raise
            raise BodyUnreadable("json", f"the body is not an OTLP {signal} JSON message: {exc}") from None
        return message
    raise BodyUnreadable(
        "content_type", f"Content-Type {content_type!r}: OTLP/HTTP takes application/x-protobuf or application/json"
    )
