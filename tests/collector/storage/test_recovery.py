"""The repair at start: torn last lines moved aside in every session file of a root served before."""

from __future__ import annotations

import os
from pathlib import Path

from gz_ia.collector.storage.retention import disk_usage
from gz_ia.collector.storage.writer import Writer


def test_repair_finds_every_session_while_the_root_is_listed_elsewhere(harness: Path) -> None:
    """The storage worker lists a root's directories (measuring it) while the loop repairs it at start.

    ``os.listdir`` on a descriptor reads through a duplicate sharing its position, so a listing in
    progress on the root's descriptor used to leave the repair an empty directory, and the torn tail
    stayed until the session was next written.
    """
    writer = Writer(background=False)
    store = writer.root(harness, owner=os.getuid())
    sessions = harness / "sessions"
    (sessions / "torn-1.events.jsonl").write_bytes(b'{"seq":1}\n{"se')
    (sessions / "whole-1.events.jsonl").write_bytes(b'{"seq":1}\n')
    with os.scandir(store.dirs.sessions_fd) as listing:
        next(listing)  # another listing of the same descriptor, not finished
        assert disk_usage(store.dirs).bytes >= len(b'{"seq":1}\n{"se') + len(b'{"seq":1}\n')
        assert writer.repair_root(harness, owner=os.getuid()) == 1
    assert (sessions / "torn-1.events.torn").read_bytes() == b'{"se\n'
    assert (sessions / "torn-1.events.jsonl").read_bytes() == b'{"seq":1}\n'
    writer.close()
