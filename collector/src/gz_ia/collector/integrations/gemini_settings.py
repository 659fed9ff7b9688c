"""``gz-ia install gemini``: gz-ia's hooks in Gemini CLI's ``settings.json``.

Gemini CLI reads hooks from ``~/.gemini/settings.json`` (user) and ``.gemini/settings.json``
(project) under ``"hooks"``, in Claude Code's shape (:mod:`.hook_settings`); a settings file with
comments is refused rather than rewritten without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from .hook_settings import HookSpec

__all__ = ["SPEC", "default_path"]

SPEC: Final = HookSpec(
    hook_args="hook gemini",
    events=(
        "SessionStart",
        "SessionEnd",
        "BeforeAgent",
        "AfterAgent",
        "BeforeModel",
        "AfterModel",
        "BeforeTool",
        "AfterTool",
    ),
    default_timeout=5000,
    matchers={"BeforeTool": "*", "AfterTool": "*"},
    extra={"name": "gz-ia"},
)
"""Gemini's timeouts are in milliseconds; ``name`` is what ``hooksConfig.disabled`` lists. Not
PreCompress: Gemini CLI fires it before every prompt, whether it compresses the history or not."""


def default_path(scope: str) -> Path:
    """``~/.gemini/settings.json`` for the ``user`` scope, ``.gemini/settings.json`` for ``project``."""
    return Path.home() / ".gemini" / "settings.json" if scope == "user" else Path(".gemini") / "settings.json"
