"""One collector process: the loop that accepts clients' connections and answers them.

:mod:`.server` holds the :class:`~.server.Collector`, composed of parts it owns: every source (a
client's :mod:`.connection`, admitted by :mod:`.admission`; the receivers of
:mod:`gz_ia.collector.receivers`; spool :mod:`.adoption`) stages its batches through the
:mod:`.intake`, with a :mod:`.replies` reply each; what is staged is written and then answered by
:mod:`.write_passes`. Beside batches the process answers gc requests (:mod:`.requests`,
:mod:`.gc_report`) and status (:mod:`.status` asks), judges its :mod:`.health`, remembers the roots
it served (:mod:`.known_roots`), reloads its configuration (:mod:`.reload`), listens on its socket
(:mod:`.listener`, :mod:`.systemd`) and formats its own log lines (:mod:`.log_format`).
:mod:`.duties` says which of these a process does when it is one share of a sharded collector. A
batch's fate is decided below, in :mod:`gz_ia.collector.ingest`; the sharded front
(:mod:`gz_ia.collector.sharding`) builds on this room.
"""
