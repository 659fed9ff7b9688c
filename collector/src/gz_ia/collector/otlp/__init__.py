"""OTLP/HTTP bodies and what they become: the agents' own telemetry as gz-ia stage events.

:mod:`.bodies` reads an export request (protobuf or OTLP JSON, gzip undone within a bound) into the
``opentelemetry-proto`` messages (extra ``[otlp]``); :mod:`.mapping` turns spans and log records into
the events of the client protocol, each group under a key that makes a re-sent export a duplicate.
Both are pure: the receiver (:mod:`gz_ia.collector.receivers.otlp`) stages what they return
through the same ingest path as a batch from a client.
"""

from .bodies import OTLP_INSTALL_HINT, BodyUnreadable, OtlpUnavailable, Signal, decode_request
from .mapping import Item, map_logs, map_spans

__all__ = [
    "OTLP_INSTALL_HINT",
    "BodyUnreadable",
    "Item",
    "OtlpUnavailable",
    "Signal",
    "decode_request",
    "map_logs",
    "map_spans",
]
