"""Misuses of the client's public API that mypy --strict must refuse, each with the error code it
reports marked ``# E: <code>`` on its line (``test_typing.py`` checks both ways). Never run; left
out of the whole-tree mypy run (``exclude`` in pyproject.toml)."""

from __future__ import annotations

import gz_ia.client as gz


def misuses(client: gz.Client, event: gz.LogEvent) -> None:
    gz.session(agent=7)  # E: arg-type
    gz.build_event(session_id="s1", action="Read", stage="READ")  # E: call-arg
    with gz.session(agent="claude") as session, session.action("Read") as act:
        act.pending(files=[1, 2])  # E: arg-type
    spooled: str = client.stats().spooled  # E: assignment
    verdict = client.send(event)
    verdict.seq = 2  # E: misc
    client.log(session_id="s1", action="Read", stage="READ", agent="claude", attrs={"n": None})  # E: dict-item
    del spooled
