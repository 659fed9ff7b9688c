"""gz-ia collector: the daemon that validates agents' stage events and writes one JSONL file per session.

The package is built in floors; a module imports only from the floors below its own, and rooms
that share a floor do not import each other (the import-linter contract in the root
``pyproject.toml``, drawn in docs/architecture.md). Top to bottom:

* :mod:`.entry`: the ``gz-ia`` console entry, one-shot fast paths, else the click CLI;
* :mod:`.cli`: one module per command;
* :mod:`.daemon` (start-up, one process or a sharded front and its shares) and :mod:`.testing`
  (an in-process collector on a test's event loop);
* :mod:`.sharding`: the front, its share processes and their links, the merged metrics;
* :mod:`.receivers` (the sources heard beside the socket: OTLP/HTTP, Claude Code's http hooks,
  the hook inbox, and the HTTP side's whole route table; each stages through the intake) and
  :mod:`.fleet` (shipping to NATS JetStream, and the hub that writes every machine's sessions);
* :mod:`.service` (one collector process: the intake every source stages through, connections,
  write passes, gc and status requests, adoption, health, admission), :mod:`.mcp` (the MCP
  tools) and :mod:`.integrations` (agents' hooks and settings);
* :mod:`.web`: the web view on the HTTP side (the page, its JSON, ``/live``);
* :mod:`.live`: live subscriptions (rings of what was written, replay, ``lagged``);
* :mod:`.ingest` (a batch's fate: validation, the stage protocol, staging), :mod:`.otel` (the
  OpenTelemetry export), :mod:`.views` (terminal lines, the timeline and its HTML page),
  :mod:`.query` (questions over a root) and :mod:`.oneshot` (start-up-cheap delivery);
* :mod:`.reading`: reading sessions back, paged, rotation-safe, followable;
* :mod:`.storage` (the on-disk layout and the single writer) and :mod:`.http` (the loopback HTTP
  server that hears only its user's processes);
* :mod:`.config` and :mod:`.metrics`: the ground floor;
* :mod:`.credentials`: under it, the HTTP side's key and port, drawn once and kept private;
* :mod:`.errors`: under everything, :class:`~.errors.CollectorError`, the base of every collector exception
  (their tree is drawn in its docstring).

This package's ``__init__`` stays free of heavy imports: ``gz_ia.collector.reading`` must be
importable with only the standard library, msgspec and ``gz_ia.client``.
"""
