"""What the user's own programs know of the collector's HTTP side and nobody else may: its key and port.

A loopback port is reachable by every process of the machine and by every page the user's browser
shows. The kernel names the uid of a connection's peer, which keeps other users out, but a browser
is one of the user's own processes for every site it shows: a page of another site can post a form,
a beacon or a ``no-cors`` fetch to any port, and a page that rebinds its host name to 127.0.0.1
reads the answers too. So every route that writes or reveals anything asks for the **key**, as
Jupyter asks for its token: a random value that the user's own programs read from a ``0600`` file
(``gz-ia install`` writes it where an agent sends its hooks and telemetry) and no page can.

The **port** of ``http_address = "auto"`` is drawn at random the first time, not derived from the
uid: a port is first come, first served among a machine's users, and one that anyone can compute is
one anyone can take first, to receive what the user's agents send.

Both are drawn once and kept in ``<state dir>/http.json`` (``$GZ_IA_STATE_DIR``, else
``~/.local/state/gz-ia``): settings files name them. Remove the file to draw new ones (then install
the agents' hooks and telemetry again).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gz_ia.collector.errors import CollectorError

__all__ = ["CREDENTIALS_FILE", "Credentials", "CredentialsUnusable", "load_credentials"]

CREDENTIALS_FILE: Final = "http.json"
_KEY_BYTES: Final = 32
_PORTS: Final = range(10000, 32768)
"""Where ``auto`` draws its port: above the well-known and registered crowd most services use, below
the kernel's ephemeral range (32768 and up), where an outgoing connection may hold any port."""
_DRAWS: Final = 64


class CredentialsUnusable(CollectorError, PermissionError):
    """The credentials file cannot be trusted or read: another owner, a link, open to others, damaged."""


@dataclass(frozen=True)
class Credentials:
    """The HTTP side's key and the port ``http_address = "auto"`` serves on."""

    key: str
    port: int


def _read(path: Path) -> Credentials:
    """The credentials in ``path``, once the file is a regular file of this user nobody else may read.

    Raises:
        FileNotFoundError: none yet.
        CredentialsUnusable: why the file is not to be trusted (and what to do).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise CredentialsUnusable(
                f"{path} is not a file of your own that only you may read (owner uid {info.st_uid}, mode "
                f"{stat.S_IMODE(info.st_mode):o}): remove it, and gz-ia draws a new key and port"
            )
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        content = json.loads(data)
        key, port = content["key"], content["port"]
    except (ValueError, KeyError, TypeError):
        key, port = None, None
    if not isinstance(key, str) or len(key) < 32 or not isinstance(port, int) or port not in _PORTS:
        raise CredentialsUnusable(f"{path} is damaged: remove it, and gz-ia draws a new key and port")
    return Credentials(key, port)


def _free_port() -> int:
    """A port of :data:`_PORTS` that nothing listens on now (the last one tried if all were busy)."""
    port = _PORTS.start
    for _ in range(_DRAWS):
        port = random.choice(_PORTS)  # noqa: S311 - not a secret, only not computable from the uid
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    return port


def load_credentials(state_dir: Path, *, create: bool = True) -> Credentials:
    """The user's key and port, drawn and written (``0600``, in a ``0700`` directory) the first time.

    Two programs drawing them at once agree: the file appears whole (written aside, then linked in
    place), and the one that loses the race reads the winner's.

    Raises:
        FileNotFoundError: none yet and ``create`` is false.
        CredentialsUnusable: the file or its directory cannot be trusted.
        OSError: the state directory cannot be made or written.
    """
    path = state_dir / CREDENTIALS_FILE
    with contextlib.suppress(FileNotFoundError):
        return _read(path)
    if not create:
        raise FileNotFoundError(f"no key yet at {path}")
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(state_dir)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise CredentialsUnusable(
            f"{state_dir} is not a directory of your own that only you may write (owner uid {info.st_uid}, "
            f"mode {stat.S_IMODE(info.st_mode):o}): the key is not kept there; set GZ_IA_STATE_DIR to one"
        )
    drawn = {"key": secrets.token_urlsafe(_KEY_BYTES), "port": _free_port()}
    draft = state_dir / f".{CREDENTIALS_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(drawn).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        with contextlib.suppress(FileExistsError):  # another program drew them first: theirs stand
            os.link(draft, path)
    finally:
        os.unlink(draft)
    return _read(path)
