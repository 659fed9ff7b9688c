"""``gz-ia gc`` as one report, whether the running collector or the command itself deleted.

When a collector serves the root, ``gz-ia gc`` asks it (:class:`gz_ia.client.protocol.Collect`):
it removes idle sessions on its event loop with no write pass in flight, keeping every session it
holds with staged lines, open actions or a recent write (its memory, not the files' mtimes, says
what is live), and trims archives in its storage worker with its running retention settings. Only
when no collector answers does the command delete by itself (:func:`collect_locally`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from gz_ia.collector.storage.retention import RetentionPolicy, RetentionReport, apply_retention, collect_idle
from gz_ia.collector.storage.roots import RootDirs

__all__ = ["MAX_LISTED", "collect_locally", "gc_report", "keeper", "merge_gc_reports"]

MAX_LISTED: Final = 2000
"""Files and sessions listed by name in one report (the totals always count all): a report must
fit in one frame whatever the root holds."""


def gc_report(
    root: Path,
    policy: RetentionPolicy,
    idle: RetentionReport,
    trimmed: RetentionReport,
    *,
    kept_live: list[str],
    dry_run: bool,
    by: str,
) -> dict[str, object]:
    """The JSON-compatible report of one gc pass (``by``: ``collector`` or ``gz-ia``, who deleted)."""
    deleted = [*idle.deleted, *trimmed.deleted]
    return {
        "root": str(root),
        "by": by,
        "dry_run": dry_run,
        "retention": {
            "max_archives": policy.max_archives,
            "max_age_seconds": policy.max_age_seconds,
            "max_root_bytes": policy.max_root_bytes,
        },
        "deleted": [[item.directory, item.name, item.size, item.reason] for item in deleted[:MAX_LISTED]],
        "deleted_files": len(deleted),
        "deleted_bytes": sum(item.size for item in deleted),
        "sessions_removed": idle.sessions_removed[:MAX_LISTED],
        "sessions_removed_count": len(idle.sessions_removed),
        "sessions_kept_live": kept_live[:MAX_LISTED],
    }


def merge_gc_reports(reports: list[dict[str, object]]) -> dict[str, object]:
    """The reports of a sharded collector's shares as one (each removed its own sessions)."""
    merged = dict(reports[0])
    for key in ("deleted", "sessions_removed", "sessions_kept_live"):
        listed = [item for report in reports for item in _listed(report.get(key))]
        merged[key] = listed[:MAX_LISTED]
    for key in ("deleted_files", "deleted_bytes", "sessions_removed_count"):
        merged[key] = sum(_number(report.get(key)) for report in reports)
    return merged


def collect_locally(
    dirs: RootDirs, policy: RetentionPolicy, *, older_than: float, now: float, dry_run: bool
) -> dict[str, object]:
    """Run gc without a collector (none answers on the socket): mtimes are all there is to go by."""
    idle = collect_idle(dirs, older_than, now=now, dry_run=dry_run) if older_than else RetentionReport()
    trimmed = apply_retention(dirs, policy, now=now, dry_run=dry_run)
    return gc_report(dirs.path, policy, idle, trimmed, kept_live=[], dry_run=dry_run, by="gz-ia")


def keeper(owns: Callable[[str], bool], release: Callable[[str], bool], kept: list[str]) -> Callable[[str], bool]:
    """The veto :func:`collect_idle` asks about each idle session: another share's, or live here."""

    def keep(session_id: str) -> bool:
        if not owns(session_id):
            return True
        if release(session_id):
            kept.append(session_id)
            return True
        return False

    return keep


def _listed(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _number(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
