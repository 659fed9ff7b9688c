"""Claude Code: its hook payloads as gz-ia stage events.

:mod:`.mapping` turns one payload into events (pure), over the per-session :mod:`.state`;
:mod:`.command_hook` is ``gz-ia hook claude-code`` (the state in a ledger file, the events over the
socket); :mod:`.log_events` makes the same events ``LogEvent`` values for a receiver inside the
collector (the state in memory: :class:`.state.SessionStates`); :mod:`.settings` installs the hooks
into Claude Code's settings. Nothing is imported here: the command hook loads only what it uses.
"""
