"""gz-ia collector: the daemon that validates agents' stage events and writes one JSONL file per session.

This package's ``__init__`` stays free of heavy imports: ``gz_ia.collector.reading`` must be
importable with only the standard library, msgspec and ``gz_ia.client``.
"""
