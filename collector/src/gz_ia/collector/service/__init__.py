"""One collector process: the loop that accepts clients' connections and answers them.

:mod:`.server` holds the :class:`~.server.Collector`; each client is a :mod:`.connection`, admitted
by :mod:`.admission` (the uid and connection limits); what connections stage is written and then
answered by :mod:`.write_passes`. Beside batches the process answers gc and status requests
(:mod:`.requests`, :mod:`.gc_report`, :mod:`.status`), adopts dead clients' spools
(:mod:`.adoption`), judges its :mod:`.health`, remembers the roots it served (:mod:`.known_roots`),
reloads its configuration (:mod:`.reload`), listens on its socket (:mod:`.listener`, :mod:`.systemd`)
and formats its own log lines (:mod:`.log_format`). :mod:`.duties` says which of these a process
does when it is one share of a sharded collector. A batch's fate is decided below, in
:mod:`gz_ia.collector.ingest`; the sharded front (:mod:`gz_ia.collector.sharding`) builds on this room.
"""
