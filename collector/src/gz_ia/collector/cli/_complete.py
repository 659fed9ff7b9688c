"""Shell completion of session ids (``eval "$(_GZ_IA_COMPLETE=bash_source gz-ia)"``).

Completing must answer at once even on a root of many sessions: it lists ``sessions/`` and
``state/`` by name only, opening no file.
"""

from __future__ import annotations

import os

import click
from click.shell_completion import CompletionItem

from ._common import root_of

__all__ = ["complete_session_id"]


def _session_ids(root: os.PathLike[str] | str) -> set[str]:
    from gz_ia.collector.storage.names import session_id_of_state, stored_session_id

    found: set[str] = set()
    for directory, name_of in (("sessions", stored_session_id), ("state", session_id_of_state)):
        try:
            names = os.listdir(os.path.join(root, directory))
        except OSError:
            continue
        for name in names:
            session_id = name_of(name)
            if session_id is not None:
                found.add(session_id)
    return found


def complete_session_id(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Return the root's session ids that start with ``incomplete``, sorted."""
    try:
        root = root_of(ctx)
    except Exception:
        return []
    return [
        CompletionItem(session_id) for session_id in sorted(_session_ids(root)) if session_id.startswith(incomplete)
    ]
