"""Which socket directories and peers a client trusts (gz_ia.client.trust); the real two-uid attack
is in tests/integration/test_socket_trust.py."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from gz_ia.client import trust
from gz_ia.client.env import trusted_uids


@pytest.mark.parametrize("mode", [0o700, 0o755, 0o711, 0o1777, 0o1733])
def test_a_directory_of_ours_nobody_else_can_write_in_is_trusted(tmp_path: Path, mode: int) -> None:
    """Read and search bits let a shared collector's users reach it; sticky directories (``/tmp``)
    keep others from removing the socket."""
    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(mode)
    trust.check_directory(str(directory / "collector.sock"))


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_directory_others_can_write_in_is_refused(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(trust.UntrustedSocket, match=f"writable by others \\(mode {mode:o}\\)"):
        trust.check_directory(str(directory / "collector.sock"))


def test_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    """The collector never binds through one either."""
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(trust.UntrustedSocket, match="symlink"):
        trust.check_directory(str(tmp_path / "link" / "collector.sock"))


def test_a_missing_directory_is_left_to_the_connect(tmp_path: Path) -> None:
    """Nothing listens there: the connect says so (``no collector is listening``)."""
    trust.check_directory(str(tmp_path / "missing" / "collector.sock"))


def test_a_directory_of_another_uid_is_refused_unless_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.getuid() != 0:  # chown needs root, as CI runs
        pytest.fail("run as root: the check needs a directory of another uid")
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    monkeypatch.delenv("GZ_IA_TRUSTED_UIDS", raising=False)
    with pytest.raises(trust.UntrustedSocket, match="belongs to uid 65534 \\(mode 700\\)"):
        trust.check_directory(str(directory / "collector.sock"))
    monkeypatch.setenv("GZ_IA_TRUSTED_UIDS", "65534")
    trust.check_directory(str(directory / "collector.sock"))


def test_a_peer_of_our_own_uid_is_trusted() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        trust.check_peer(left, "pair")


def test_trusted_uids_ignore_what_is_not_a_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GZ_IA_TRUSTED_UIDS", " 1001, ,me,1002 ")
    assert trusted_uids() == {1001, 1002}
    assert {os.getuid(), 0, 1001, 1002} <= trust.trusted()
    monkeypatch.delenv("GZ_IA_TRUSTED_UIDS")
    assert trusted_uids() == frozenset()


def test_a_refusal_is_an_oserror() -> None:
    """Every caller already keeps the event when a connect fails with an OSError."""
    assert issubclass(trust.UntrustedSocket, OSError)
