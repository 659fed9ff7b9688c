"""A session file touched behind the collector's back: replaced (``os.rename`` over it, as editors and
``sed -i`` save), truncated, or removed. The writer notices before its next write and reopens or
recreates the file, saying so; no event acknowledged after the touch is lost; the readers name what
the checkpoint says was written but the files no longer hold (exit 3); and ``seq`` never goes back,
across restarts. Real collector, real files, the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import send_events, wait_for

from gz_ia.client import build_event


def _send(collector: Any, session_id: str, count: int) -> list[int]:
    """Send ``count`` events (one batch); return the ``seq`` each was acknowledged with."""
    events = [build_event(session_id=session_id, action=f"t{index}", stage="READ", agent="a") for index in range(count)]
    return [verdict.seq for verdict in send_events(collector, events, per_batch=count)]


def _logs(collector: Any, session_id: str) -> tuple[int, list[int], str]:
    """The stored seqs (the raw copy of ``--json``) and the exit and stderr of the decoded read, which
    also names a line missing inside a segment."""
    copied = collector.gz_ia("session", "logs", session_id, "--json")
    seqs = [json.loads(line)["seq"] for line in copied.stdout.splitlines() if "__notice" not in line]
    decoded = collector.gz_ia("session", "logs", session_id, "-n", "all")
    return decoded.returncode, seqs, decoded.stderr


def _replace(path: Path) -> None:
    """Save as an editor does: a new file with one line dropped, renamed over the old one."""
    lines = path.read_bytes().splitlines(keepends=True)
    fresh = path.with_name(path.name + ".swp")
    fresh.write_bytes(b"".join(lines[:1] + lines[2:]))
    os.rename(fresh, path)


def _truncate(path: Path) -> None:
    os.truncate(path, 0)


def _remove(path: Path) -> None:
    path.unlink()


TOUCHES = {"replaced": _replace, "truncated": _truncate, "removed": _remove}


@pytest.mark.parametrize("touch", sorted(TOUCHES))
def test_events_after_a_touch_are_kept_and_the_loss_is_named(make_collector: Any, touch: str) -> None:
    collector = make_collector()
    assert _send(collector, "ed", 3) == [1, 2, 3]
    path = collector.session_file("ed")
    TOUCHES[touch](path)
    assert _send(collector, "ed", 3) == [4, 5, 6]
    code, seqs, stderr = _logs(collector, "ed")
    assert seqs[-3:] == [4, 5, 6], (seqs, stderr)
    assert code == 3, stderr
    assert "not shown" in stderr
    assert collector.log_lines(f"{path.name} was {touch}"), collector.log()
    # The checkpoint's high-water mark wins over what the files show, after a clean stop and a kill.
    collector.restart()
    TOUCHES[touch](path) if touch != "replaced" else _truncate(path)
    collector.restart()
    assert _send(collector, "ed", 2) == [7, 8]
    TOUCHES[touch](path) if touch != "replaced" else _truncate(path)
    assert _send(collector, "ed", 1) == [9]
    collector.kill()
    collector.start()
    assert _send(collector, "ed", 1) == [10]
    code, seqs, stderr = _logs(collector, "ed")
    assert code == 3 and seqs[-2:] == [9, 10], (seqs, stderr)


def test_a_touch_under_load_loses_no_later_event(make_collector: Any) -> None:
    """A client keeps sending while the file is replaced, truncated and removed, each in turn: every
    event sent after a touch was done is acknowledged and stored."""
    collector = make_collector()
    _send(collector, "busy", 10)
    path = collector.session_file("busy")
    sent: list[tuple[int, float]] = []
    stop = threading.Event()

    def keep_sending() -> None:
        client = collector.client()
        try:
            while not stop.is_set():
                started = time.monotonic()
                verdict = client.send(build_event(session_id="busy", action="t", stage="READ", agent="a"), timeout=20)
                sent.append((verdict.seq, started))
        finally:
            client.close()

    sender = threading.Thread(target=keep_sending)
    sender.start()
    touched: list[float] = []

    def check_since_last_touch() -> None:
        """Events sent after the last touch are in the file (the next touch takes them, by design)."""
        after = [seq for seq, started in list(sent) if started > touched[-1]]  # acknowledged, then read
        stored = {line["seq"] for line in collector.session_lines("busy")}
        assert after and set(after) <= stored, sorted(set(after) - stored)

    try:
        wait_for(lambda: len(sent) > 20, message="events sent before the first touch")
        for touch in (_replace, _truncate, _remove):
            if touched:
                check_since_last_touch()
            touch(path)
            touched.append(time.monotonic())
            wait_for(
                lambda: sum(started > touched[-1] for _seq, started in list(sent)) > 20,
                message="events sent after the touch",
            )
    finally:
        stop.set()
        sender.join(30)
    check_since_last_touch()
    assert [seq for seq, _started in sent] == sorted(seq for seq, _started in sent)
    assert len(collector.log_lines("behind the collector's back")) >= 3, collector.log()


def _replace_longer(path: Path) -> None:
    """Save as an editor does, with a line pasted in: the new file is longer than what was written."""
    lines = path.read_bytes().splitlines(keepends=True)
    fresh = path.with_name(path.name + ".swp")
    fresh.write_bytes(b"".join([*lines, lines[-1]]))
    os.rename(fresh, path)


CLOSED_TOUCHES = {"removed": _remove, "replaced-longer": _replace_longer}
"""Truncated, or replaced by a shorter file, shows in the size alone; these two need the inode."""


@pytest.mark.parametrize("touch", sorted(CLOSED_TOUCHES))
def test_a_file_touched_while_closed_for_the_open_file_bound_is_noticed_on_reopen(
    make_collector: Any, touch: str
) -> None:
    """More sessions than ``max_open_files``: the writer closes the least recently written file; a
    touch while it is closed is noticed when it opens it again (its inode and size against what it
    wrote), said in its log, and the events after it are stored after what the file holds."""
    collector = make_collector("--max-open-files", "4")
    assert _send(collector, "ed", 3) == [1, 2, 3]
    for other in range(5):  # one write pass each: the least recently written, "ed", is closed
        _send(collector, f"other-{other}", 1)
    path = collector.session_file("ed")
    CLOSED_TOUCHES[touch](path)
    assert _send(collector, "ed", 3) == [4, 5, 6]
    what = touch.split("-", maxsplit=1)[0]
    assert collector.log_lines(f"{path.name} was {what}"), collector.log()
    _code, seqs, stderr = _logs(collector, "ed")
    assert seqs[-3:] == [4, 5, 6], (seqs, stderr)
    # What the writer recorded (checkpoint offset, size) follows the file it found: after a
    # restart the next event goes on from seq 7 and is read after the others.
    collector.restart()
    assert _send(collector, "ed", 1) == [7]
    _code, seqs, stderr = _logs(collector, "ed")
    assert seqs[-4:] == [4, 5, 6, 7], (seqs, stderr)
    assert not collector.log_lines("fewer bytes"), collector.log()
