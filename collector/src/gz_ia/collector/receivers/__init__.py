"""The sources heard beside the client socket, each staging through the one intake.

Like the socket's connections (:mod:`gz_ia.collector.service.connection`) and spool adoption, every
receiver here hands its batches to :class:`~gz_ia.collector.service.intake.Intake` with a
:class:`~gz_ia.collector.service.replies.Reply`; none stages or answers a batch itself, and none
holds the collector process (where a request's events go is
:mod:`gz_ia.collector.service.request_roots`, which the web view's process reads too):

- :mod:`.otlp`: the agents' own telemetry over OTLP/HTTP (``/v1/traces``, ``/v1/logs``,
  ``/v1/metrics``), answered 200 once written (a future);
- :mod:`.claude_code`: Claude Code's ``http`` hooks (``POST /hooks/claude-code``), mapped with the
  command hook's own function, its state held in memory, answered at once;
- :mod:`.inbox`: the inbox hook's drops, logged in order as the command hook logs them, through the
  collector's own socket (so a sharded collector, whose front holds no intake, takes them as a
  single process does, and a drop taken again after a crash is found in the session's ledger);
- :mod:`.routes`: the HTTP side's whole route table, built once at start.
"""
