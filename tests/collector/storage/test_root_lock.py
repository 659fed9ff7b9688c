"""The one-writer lock of a root: who may take it, who is refused, and what a share checks.

flock locks belong to open files, so two RootLocks in one process conflict as two processes would.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gz_ia.collector.storage.root_lock import RootLocked, RootLocks


@pytest.fixture(name="root")
def _root(tmp_path: Path) -> Path:
    """An empty workspace root of this test's own."""
    path = tmp_path / "ws" / ".harness"
    path.mkdir(parents=True)
    return path


def test_a_second_collector_is_refused_and_told_who_holds_the_root(root: Path) -> None:
    """The holder is named by pid and socket; once it lets go, the other one takes the root."""
    first = RootLocks(pid=111, sockets=["/run/a.sock"])
    second = RootLocks(pid=222, sockets=["/run/b.sock"])
    first.take(root, os.getuid())
    first.take(root, os.getuid())  # held already
    with pytest.raises(RootLocked) as refused:
        second.take(root, os.getuid())
    assert refused.value.holder == "pid 111, socket /run/a.sock"
    first.release()
    second.take(root, os.getuid())


def test_a_share_writes_only_under_its_own_front(root: Path) -> None:
    """A share takes a root only while its front holds it; the shares of a front that died keep the
    next collector out until they are gone too."""
    front = RootLocks(pid=111, sockets=["/run/a.sock"])
    share = RootLocks(pid=112, sockets=[], front=111)
    stranger = RootLocks(pid=113, sockets=[], front=999)
    with pytest.raises(RootLocked):
        share.take(root, os.getuid())  # the front has not taken it
    front.take(root, os.getuid())
    share.take(root, os.getuid())
    with pytest.raises(RootLocked):
        stranger.take(root, os.getuid())
    front.release()  # the front died; its share still drains
    successor = RootLocks(pid=222, sockets=["/run/a.sock"])
    with pytest.raises(RootLocked, match="shares of a collector that stopped"):
        successor.take(root, os.getuid())
    share.release()
    successor.take(root, os.getuid())


def test_a_removed_root_is_taken_again_when_it_comes_back(root: Path) -> None:
    """The lock held on a removed root's file is no lock on the new one: it is taken afresh."""
    first = RootLocks(pid=111, sockets=["/run/a.sock"])
    first.take(root, os.getuid())
    shutil.rmtree(root)
    root.mkdir()
    assert not first.holds(root)
    first.take(root, os.getuid())
    with pytest.raises(RootLocked):
        RootLocks(pid=222, sockets=[]).take(root, os.getuid())
