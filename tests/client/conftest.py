"""Fixtures of the client's tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(name="silent_socket")
def _silent_socket(short_tmp: Path) -> Iterator[Path]:
    """A socket that takes connections and never answers: the sender waits on it without an
    error of its own, so ``stats().last_error`` keeps the reason of an invalid call."""
    path = short_tmp / "silent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(8)
        yield path
