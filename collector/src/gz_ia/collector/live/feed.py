"""The one feed of the hub: what a write pass wrote, split into lines, per session root.

The writer calls :meth:`WrittenFeed.__call__` from :meth:`~gz_ia.collector.storage.writer.Writer.finish`
for every pass (the collector's and spool adoption's alike), once the bytes are in the files, so a
subscriber never sees an event a reader of the files could not find.
"""

from __future__ import annotations

import os

from gz_ia.collector.storage.open_files import AppendFile
from gz_ia.collector.storage.sessions import RootStore, SessionState

from .hub import Hub

__all__ = ["WrittenFeed", "source_of"]


def source_of(root: str | os.PathLike[str]) -> str:
    """The source a session root is known by in the hub: its real path, however it was named."""
    return os.path.realpath(root)


class WrittenFeed:
    """Publish written session lines into ``hub`` (rejects files are not events: they stay out)."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self._sources: dict[RootStore, str] = {}

    def __call__(self, written: list[tuple[AppendFile, bytes]], counts: dict[AppendFile, int]) -> None:
        """Publish each session's written lines (``counts``: how many each file's bytes hold, so
        that with no subscriber the bytes are numbered without being searched)."""
        sources = self._sources
        hub = self.hub
        publish = hub.publish
        buffering = hub.buffering
        for target, data in written:
            if not isinstance(target, SessionState) or not data:
                continue
            store = target.root
            source = sources.get(store)
            if source is None:
                if len(sources) > 4096:
                    sources.clear()  # stores of roots long gone: recomputed when they come back
                source = sources[store] = source_of(store.path)
            if not buffering:
                hub.skip(source, counts[target])
                continue
            lines = data.split(b"\n")
            lines.pop()  # every stored line ends with a newline: nothing after the last one
            publish(source, target.session_id, lines)
