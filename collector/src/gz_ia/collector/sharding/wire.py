"""What passes between the front and its shares besides the clients' frames: names and the Peer frame.

The shares live in a private directory the front makes (0700) beside its own socket, each on a
socket of its own, with the front's configuration in ``config.json``, which they read again on
SIGHUP. Each share writes a rejects file of its own, as every file has a single writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.protocol import HEADER_SIZE, Route
from gz_ia.collector.config import CollectorConfig
from gz_ia.collector.storage.names import REJECTS_STEM

__all__ = [
    "CONFIG_FILE",
    "Peer",
    "peer_decoder",
    "peer_frame",
    "rejects_stem",
    "route_frame",
    "share_config",
    "share_socket",
]

CONFIG_FILE: Final = "config.json"


def share_socket(directory: Path, share: int) -> Path:
    """The private socket of share ``share``."""
    return directory / f"share-{share}.sock"


def share_config(config: CollectorConfig, directory: Path, share: int) -> CollectorConfig:
    """A share's configuration: the front's, on the share's private socket and without metrics server."""
    return msgspec.structs.replace(
        config, socket=str(share_socket(directory, share)), metrics_address="off", http_address="off"
    )


def rejects_stem(share: int) -> str:
    """The stem of the rejects file that share ``share`` writes: share 0's is the usual one."""
    return REJECTS_STEM if share == 0 else f"{REJECTS_STEM}-{share}"


class Peer(msgspec.Struct, tag="peer", kw_only=True):
    """The first frame on each of the front's connections to a share: who the client is.

    The share's ``SO_PEERCRED`` names the front; the share uses these instead, for the same checks
    (a root must belong to the client's uid). Only a process of the collector's own user can reach
    a share's socket, and such a process could write any root of that user's anyway.
    """

    uid: int
    pid: int


peer_decoder: Final = msgspec.msgpack.Decoder(Peer)


def peer_frame(uid: int, pid: int) -> bytes:
    """The :class:`Peer` frame the front sends first on a connection to a share."""
    body = msgspec.msgpack.encode(Peer(uid=uid, pid=pid))
    return len(body).to_bytes(HEADER_SIZE, "big") + body


def route_frame(share: int) -> bytes:
    """The Route frame, header included, that precedes a batch for share ``share``."""
    body = msgspec.msgpack.encode(Route(share=share))
    return len(body).to_bytes(HEADER_SIZE, "big") + body
