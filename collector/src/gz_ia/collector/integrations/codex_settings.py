"""``gz-ia install codex``: gz-ia's hooks in Codex's ``hooks.json``, and what Codex asks before it runs them.

Codex reads command hooks from ``~/.codex/hooks.json`` (user) and ``<repo>/.codex/hooks.json``
(project), in Claude Code's shape (:mod:`.hook_settings`). It runs a hook only once the user has
trusted it, and trust is tied to the hook's content: :data:`TRUST_NOTICE` says what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from .hook_settings import HookSpec

__all__ = ["SPEC", "TRUST_NOTICE", "default_path"]

SPEC: Final = HookSpec(
    hook_args="hook codex",
    events=(
        "SessionStart",
        "SessionEnd",
        "UserPromptSubmit",
        "Stop",
        "PreToolUse",
        "PostToolUse",
        "PreCompact",
        "PostCompact",
    ),
    default_timeout=5,
    timeouts={"SessionEnd": 3},  # Codex allows SessionEnd 3 s at most and says so on every run otherwise
)
"""Codex's timeouts are in seconds; its tool events match every tool without a ``matcher``."""

TRUST_NOTICE: Final = (
    "Codex runs a hook only after you trust it: start `codex`, open `/hooks` and trust gz-ia's hooks. "
    "Until then Codex skips them without a word (and `codex exec` has no prompt to ask). Trust is tied "
    "to each hook's content: trust them again after installing with another --command. "
    "`codex exec --dangerously-bypass-hook-trust` runs them unreviewed, for one run."
)


def default_path(scope: str) -> Path:
    """``~/.codex/hooks.json`` for the ``user`` scope, ``.codex/hooks.json`` for ``project``."""
    return Path.home() / ".codex" / "hooks.json" if scope == "user" else Path(".codex") / "hooks.json"
