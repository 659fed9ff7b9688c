"""What makes a collector process one share of a sharded collector: its role and its configuration.

The daemon runs a share (``python -m gz_ia.collector.daemon --share <directory> <share> <shares>
<front pid> <version>``, started by the front only) as a :class:`~..service.server.Collector` given the
:func:`share_role` and the :class:`.share_connection.ShareConnection`: it serves the sessions whose
id hashes to it (:func:`gz_ia.client.protocol.owner_of`), writes its own rejects file, and leaves
to the front what concerns the collector as a whole (spool adoption, the known-roots file, the
connection limits, the roots' locks); share 0 also does what concerns each root as a whole
(measuring it, its size budget, its rejects files) and repairs the known roots at start.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.protocol import Owners, owner_of
from gz_ia.collector.config import CollectorConfig, ConfigError
from gz_ia.collector.service.duties import Role

from .wire import CONFIG_FILE, rejects_stem, share_config

__all__ = ["config_loader", "share_role", "stop_with_front"]

log = logging.getLogger("gz_ia.collector")

_PR_SET_PDEATHSIG: Final = 1
_SERVED_KEPT: Final = 65_536


def share_role(share: int, shares: int, *, front: int) -> Role:
    """The :class:`~..service.duties.Role` of share ``share`` of ``shares``, started by the front (pid ``front``)."""
    owners = Owners(shares)

    def unserved(session_id: str) -> str:
        return f"session {session_id!r} belongs to share {owners[session_id]} of {shares}, not {share}"

    return Role(
        serves=_Served(share, shares),
        unserved=unserved,
        rejects_stem=rejects_stem(share),
        root_wide=share == 0,
        adopts_spools=False,
        records_known_roots=False,
        repairs_known_roots=share == 0,
        limits_connections=False,
        lock_holder=front,
        open_actions_divisor=shares,
        started_message=f"share {share} of {shares} serving the front",
    )


class _Served(dict[str, bool]):
    """Whether share ``share`` of ``shares`` serves a session, remembered per session id (a lookup
    per event costs no call); bounded: forgotten all at once past ``_SERVED_KEPT`` ids."""

    def __init__(self, share: int, shares: int) -> None:
        super().__init__()
        self.share = share
        self.shares = shares

    def __missing__(self, session_id: str) -> bool:
        if len(self) >= _SERVED_KEPT:
            self.clear()
        served = self[session_id] = owner_of(session_id, self.shares) == self.share
        return served


def config_loader(directory: Path, share: int) -> Callable[[], CollectorConfig]:
    """Read the front's configuration as share ``share`` runs it (at start and on SIGHUP)."""

    def load() -> CollectorConfig:
        try:
            config = msgspec.json.decode((directory / CONFIG_FILE).read_bytes(), type=CollectorConfig)
        except (OSError, msgspec.DecodeError) as exc:
            raise ConfigError(f"cannot read the front's configuration: {exc}") from exc
        return share_config(config, directory, share)

    return load


def stop_with_front(front: int) -> None:
    """Have the kernel send this share SIGTERM when the front dies (even by SIGKILL): a share left
    behind would hold its sessions' files with nobody to feed it. It drains and exits as usual."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        log.warning("cannot ask to be stopped with the front; a share may outlive a killed front")
    if os.getppid() != front:  # the front died before the request took effect
        sys.exit(0)
