"""``gz-ia gc`` and ``gz-ia disk-usage``: what old data takes, and deleting it (like journalctl's
``--disk-usage``, ``--vacuum-size`` and ``--vacuum-time``).

Exit codes: 0 success (nothing to delete included), 1 the root is missing or unusable (or the
collector refused it), 2 usage error, 69 (``EX_UNAVAILABLE``) a collector listens but did not
answer, is busy or is restarting a share: nothing was deleted.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import click

from gz_ia.collector.errors import CollectorError

from ._common import EXIT_NOT_FOUND, EXIT_UNAVAILABLE, root_of, socket_path_of
from ._output import quietly

__all__ = ["disk_usage_command", "gc_command"]

_SIZE: Final = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$")
_SIZE_UNITS: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: str) -> int:
    """Return the bytes of ``500M``, ``1G``, ``10K`` or a plain number of bytes (powers of 1024)."""
    match = _SIZE.match(value.strip().lower())
    if not match:
        raise ValueError(f"{value!r} is not a size like 500M, 2G or 4096")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def human_size(size: float) -> str:
    """``1.5M`` for 1,572,864 bytes, as journalctl prints sizes."""
    for unit in ("B", "K", "M", "G"):
        if size < 1024:
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}T"


class _NoCollector(CollectorError):
    """Nothing listens on the socket: gc runs in this process."""


def _ask_collector(path: Path, request: Any, *, timeout: float) -> Any:
    """Send ``request`` to the collector on ``path``; return its reply (a Report or an Error).

    Raises:
        _NoCollector: nothing listens there.
        TimeoutError: it did not answer within ``timeout``.
    """
    from gz_ia.client import trust
    from gz_ia.client.protocol import FrameReader, collector_message_decoder, encode_frame

    reader = FrameReader()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            trust.connect(sock, str(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise _NoCollector(str(exc)) from exc
        sock.sendall(encode_frame(request))
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionResetError("the collector closed the connection without an answer")
            bodies = reader.feed(data)
            if bodies:
                return collector_message_decoder.decode(bodies[0])


@click.command("gc")
@click.option(
    "--older-than",
    default="30d",
    show_default=True,
    help="Remove whole sessions whose last write is older than this (10m, 12h, 30d, 2w).",
)
@click.option(
    "--vacuum-size", default=None, help="Delete the oldest archives until the root takes at most SIZE (500M)."
)
@click.option("--vacuum-time", default=None, help="Delete archives older than AGE (12h, 30d).")
@click.option("--dry-run", is_flag=True, help="Only print what would be removed.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Collector config whose [retention] limits to apply when no collector answers [default: the collector's].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds to wait for the collector.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.pass_context
def gc_command(
    ctx: click.Context,
    older_than: str,
    vacuum_size: str | None,
    vacuum_time: str | None,
    dry_run: bool,
    config_path: Path | None,
    as_json: bool,
    timeout: float,
    quiet: bool,
) -> None:
    """Remove idle sessions and apply the retention limits to the root, now.

    When a collector answers on the socket, it does the deleting, with its running retention
    settings, and keeps every session it is writing. Otherwise gz-ia deletes by itself, with the
    [retention] of --config (or the default configuration file). A session is idle when its last
    write is older than --older-than, open actions or not. Only files the collector names are
    removed.
    """
    from gz_ia.client.protocol import Collect, Error, RejectReason, Report
    from gz_ia.client.trust import UntrustedSocket
    from gz_ia.collector.query import parse_span
    from gz_ia.collector.storage.retention import MIN_IDLE_AGE

    threshold = _option(parse_span, older_than, "--older-than")
    if threshold < MIN_IDLE_AGE:
        raise click.BadParameter(
            f"{older_than!r} is too recent: a collector may still be writing a session idle for "
            f"less than {MIN_IDLE_AGE / 60:g} minutes",
            param_hint="--older-than",
        )
    vacuum_bytes = _option(parse_size, vacuum_size, "--vacuum-size") if vacuum_size is not None else 0
    vacuum_seconds = _option(parse_span, vacuum_time, "--vacuum-time") if vacuum_time is not None else 0.0
    if vacuum_size is not None and vacuum_bytes <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--vacuum-size")
    if vacuum_time is not None and vacuum_seconds <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--vacuum-time")
    root = root_of(ctx)
    request = Collect(
        root=str(root),
        older_than=threshold,
        vacuum_bytes=vacuum_bytes,
        vacuum_seconds=vacuum_seconds,
        dry_run=dry_run,
    )
    path = socket_path_of(ctx)
    try:
        reply = _ask_collector(path, request, timeout=timeout)
    except _NoCollector:
        report = _collect_here(ctx, root, config_path, request)
    except UntrustedSocket as exc:
        click.echo(f"gz-ia: {exc}; nothing was deleted", err=True)
        ctx.exit(EXIT_UNAVAILABLE)
    except OSError as exc:
        click.echo(f"gz-ia: the collector at {path} did not answer the gc ({exc}); nothing was deleted", err=True)
        ctx.exit(EXIT_UNAVAILABLE)
    else:
        if isinstance(reply, Error):
            click.echo(f"gz-ia: the collector refused the gc: {reply.reason}: {reply.detail}", err=True)
            # A root it cannot use is the caller's to fix; anything else (busy, a share being
            # restarted) passes: nothing was deleted, try again.
            ctx.exit(EXIT_NOT_FOUND if reply.reason == RejectReason.ROOT_NOT_ALLOWED else EXIT_UNAVAILABLE)
        answer = reply.data.get("gc") if isinstance(reply, Report) else None
        if not isinstance(answer, dict):
            click.echo(f"gz-ia: the collector at {path} does not run gc (an older version?)", err=True)
            ctx.exit(EXIT_UNAVAILABLE)
        report = answer
    if as_json:
        click.echo(json.dumps(report, indent=2))
    elif not quiet:
        _print_gc(report)


def _option(parse: Any, value: str, hint: str) -> Any:
    try:
        return parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from exc


def _collect_here(ctx: click.Context, root: Path, config_path: Path | None, request: Any) -> dict[str, object]:
    """No collector answers: delete from this process, going by the files' mtimes, holding the
    root's writer lock so that no collector writes it meanwhile (and none that does is overruled)."""
    from gz_ia.collector.config import ConfigError, load_config
    from gz_ia.collector.service.gc_report import collect_locally, gc_report
    from gz_ia.collector.storage.retention import RetentionPolicy, RetentionReport
    from gz_ia.collector.storage.root_lock import RootLocked, RootLocks
    from gz_ia.collector.storage.roots import LayoutError, open_root

    try:
        config = load_config(config_path)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    policy = RetentionPolicy(config.retention).tightened(
        max_root_bytes=request.vacuum_bytes, max_age_seconds=request.vacuum_seconds
    )
    try:
        dirs = open_root(root, owner=None, create=False)
    except LayoutError as exc:
        if _fresh_root(root, exc):
            nothing = RetentionReport()
            return gc_report(root, policy, nothing, nothing, kept_live=[], dry_run=request.dry_run, by="gz-ia")
        click.echo(f"gz-ia: {exc}", err=True)
        ctx.exit(EXIT_NOT_FOUND)
    locks = RootLocks(pid=os.getpid(), sockets=[])
    try:
        if not request.dry_run:
            locks.take(root, owner=os.getuid())
        return collect_locally(dirs, policy, older_than=request.older_than, now=time.time(), dry_run=request.dry_run)
    except RootLocked as exc:
        click.echo(
            f"gz-ia: another collector writes {root} ({exc.holder}); nothing was deleted: "
            "run gz-ia gc with that collector's --socket",
            err=True,
        )
        ctx.exit(EXIT_UNAVAILABLE)
    finally:
        locks.release()
        dirs.close()


def _print_gc(report: dict[str, Any]) -> None:
    verb = "would remove" if report["dry_run"] else "removed"
    for directory, name, size, reason in report["deleted"]:
        click.echo(f"{verb} {directory}/{name} ({size} bytes, {reason})")
    unlisted = report["deleted_files"] - len(report["deleted"])
    if unlisted > 0:
        click.echo(f"... and {unlisted} more file(s)")
    for session_id in report["sessions_kept_live"]:
        click.echo(f"kept session {session_id}: the collector is writing it")
    retention = report["retention"]
    limits = ", ".join(
        f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
        for key, value in retention.items()
        if value
    )
    who = "by the collector" if report["by"] == "collector" else "by gz-ia (no collector answered)"
    click.echo(
        f"{verb} {report['sessions_removed_count']} idle session(s) and {report['deleted_files']} file(s), "
        f"{report['deleted_bytes']} bytes, {who}; retention: {limits or 'no limits'}"
    )


@click.command("disk-usage")
@click.option("--json", "as_json", is_flag=True, help="Print the usage as JSON (sizes in bytes).")
@click.option("-n", "--lines", type=int, default=None, help="Show only the N largest sessions.")
@click.pass_context
@quietly
def disk_usage_command(ctx: click.Context, as_json: bool, lines: int | None) -> None:
    """Show what the root's sessions and rejects files take on disk, per session, largest first.

    Sizes are the files' sizes, as retention's max_root_bytes and gc --vacuum-size count them.
    """
    from gz_ia.collector.storage.retention import RootUsage, disk_usage
    from gz_ia.collector.storage.roots import LayoutError, open_root

    root = root_of(ctx)
    try:
        dirs = open_root(root, owner=None, create=False)
    except LayoutError as exc:
        if not _fresh_root(root, exc):
            click.echo(f"gz-ia: {exc}", err=True)
            ctx.exit(EXIT_NOT_FOUND)
        usage = RootUsage()
    else:
        try:
            usage = disk_usage(dirs)
        finally:
            dirs.close()
    ranked = sorted(usage.sessions.items(), key=lambda item: (-item[1].bytes, item[0]))
    if lines is not None:
        ranked = ranked[: max(0, lines)]
    if as_json:
        document = {
            "root": str(root),
            "bytes": usage.bytes,
            "files": usage.files,
            "rejects_bytes": usage.rejects_bytes,
            "sessions": [
                {
                    "session_id": session_id,
                    "bytes": session.bytes,
                    "active_bytes": session.active_bytes,
                    "archived_bytes": session.archived_bytes,
                    "archives": session.archives,
                    "other_bytes": session.other_bytes,
                    "last_write": _utc(session.last_write),
                }
                for session_id, session in ranked
            ],
        }
        click.echo(json.dumps(document, indent=2))
        return
    click.echo(
        f"Sessions and rejects under {root} take up {human_size(usage.bytes)} ({usage.bytes} bytes) "
        f"in {usage.files} file(s), {len(usage.sessions)} session(s)."
    )
    if not ranked:
        return
    click.echo(f"{'SIZE':>8} {'ACTIVE':>8} {'ARCHIVED':>8} {'ARCHIVES':>8}  {'LAST WRITE (UTC)':<20}  SESSION")
    for session_id, session in ranked:
        click.echo(
            f"{human_size(session.bytes):>8} {human_size(session.active_bytes):>8} "
            f"{human_size(session.archived_bytes):>8} {session.archives:>8}  "
            f"{_utc(session.last_write)[:19]:<20}  {session_id}"
        )
    if usage.rejects_bytes:
        click.echo(f"{human_size(usage.rejects_bytes):>8} rejects files")


def _fresh_root(root: Path, exc: Exception) -> bool:
    """Tell whether ``root`` is a directory no collector has written to yet (``mkdir .harness``, as
    the guide suggests): a root with no sessions, not an error."""
    cause = exc.__cause__
    return (
        isinstance(cause, OSError)
        and cause.errno == errno.ENOENT
        and root.is_dir()
        and not root.is_symlink()
        and not os.path.lexists(root / "sessions")
    )


def _utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z") if timestamp else ""
