"""Agents that report to gz-ia without code changes: each module turns one agent's own signals
(Claude Code's hook payloads) into stage events."""
