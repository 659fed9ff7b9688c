"""Start-up-cheap delivery for ``gz-ia session log`` and agents' hooks: a few events from a
short-lived process, in order, exactly once, or spooled.

:mod:`.ledger` delivers and keeps the ledger of what was sent; :mod:`.session_log` prints one
delivery's verdict; :mod:`.typed_event` builds an event from what a person or a tool typed. The
minimal encoders :mod:`._msgpack` and :mod:`._plain_json` spare a call the import of msgspec and
:mod:`json`, and tests hold them to msgspec's bytes. This ``__init__`` imports nothing, so that a
fast path pays only for the module it uses.
"""
