"""OpenTelemetry export (``gz-ia export otel``, the ``otel`` extra): stored events shipped to an
OTLP/HTTP backend as spans and log records.

:mod:`.export` runs the exporter over roots read through :mod:`gz_ia.collector.reading`;
:mod:`.spans` folds stored events into spans; :mod:`.positions` keeps where the export stands;
:mod:`.status` tells ``gz-ia status`` how each signal fares; :mod:`.senders` is the OTLP side and
holds every OpenTelemetry import, made only when a sender is built. This ``__init__`` imports
nothing, so the package loads without the extra.
"""
