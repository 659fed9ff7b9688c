"""Agents' hooks taken inside the collector, with no Python process started per hook.

:mod:`.inbox` takes the inbox hook's drops (payloads a shell script left in the spool's inbox) and
logs each as the command hook would. The rest of this package serves hooks posted over loopback HTTP.

Claude Code's ``http`` hooks post the same JSON its command hooks read on stdin. :mod:`.claude_code`
serves ``POST /hooks/claude-code``: it maps each payload with the very function the command hook
uses (:func:`gz_ia.collector.integrations.claude_code.hook_events`), keeps that mapping's state in
the collector's memory instead of a ledger file, and stages the events through the client
protocol's own path (a :class:`~gz_ia.collector.service.connection.Connection` with no transport).
"""

from .claude_code import CLAUDE_CODE_PATH, ClaudeCodeHooks, http_routes

__all__ = ["CLAUDE_CODE_PATH", "ClaudeCodeHooks", "http_routes"]
