"""Configuration reload (SIGHUP), the steps a collector and a sharded collector's front share.

A reload tells systemd it began (``RELOADING=1``), builds the configuration again, keeps the running
one on any error, and tells systemd it is ready again only once the new one is in effect everywhere:
a front first waits for its shares to apply it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

import msgspec

from gz_ia.collector.config import CollectorConfig, ConfigError
from gz_ia.collector.metrics import Metrics

from .systemd import Notifier

__all__ = ["begin_reload", "changed_settings", "finish_reload", "keep_restart_settings"]

log = logging.getLogger("gz_ia.collector")

_RESTART_SETTINGS: Final = ("socket", "metrics_address", "http_address", "shards", "fleet")


def keep_restart_settings(old: CollectorConfig, new: CollectorConfig) -> CollectorConfig:
    """Return ``new`` with the settings that only a restart changes (socket, metrics, shards, the fleet) kept."""
    for key in _RESTART_SETTINGS:
        if getattr(new, key) != getattr(old, key):
            # The fleet's section may hold a password in its URL: named, never shown.
            shown = "[fleet]" if key == "fleet" else repr(getattr(new, key))
            log.warning("reload: %s changed to %s; it takes effect at the next restart", key, shown)
    return msgspec.structs.replace(new, **{key: getattr(old, key) for key in _RESTART_SETTINGS})


def changed_settings(old: CollectorConfig, new: CollectorConfig) -> str:
    """What a reload changed, for its log line: ``"a, b changed"`` or ``"no change"``."""
    changed = [f.name for f in msgspec.structs.fields(new) if getattr(new, f.name) != getattr(old, f.name)]
    return ", ".join(changed) + " changed" if changed else "no change"


def begin_reload(
    load: Callable[[], CollectorConfig] | None, running: CollectorConfig, notifier: Notifier, metrics: Metrics
) -> CollectorConfig | None:
    """Tell systemd a reload began and build the configuration again.

    Returns:
        The configuration to apply, with the restart-only settings of ``running`` kept; None when
        there is nothing to reload from or the new one is refused (then the reload is over: it is
        counted, logged with the reason, and systemd is told the running configuration stays).
    """
    if load is None:
        log.warning("SIGHUP: no configuration source to reload from; nothing changed")
        return None
    notifier.notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")
    try:
        new = load()
    except ConfigError as exc:
        metrics.count_reload(applied=False, refused=str(exc))
        log.error("reload refused, keeping the running configuration: %s", exc)
        notifier.notify("READY=1", "STATUS=reload refused (see the log); running configuration kept")
        return None
    return keep_restart_settings(running, new)


def finish_reload(notifier: Notifier, metrics: Metrics, status: str) -> None:
    """Count an applied reload and tell systemd the collector is ready again, with its new ``STATUS=``."""
    metrics.count_reload(applied=True)
    notifier.notify("READY=1", f"STATUS={status}")
