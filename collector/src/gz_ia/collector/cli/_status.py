"""``gz-ia status``: ask the running collector about itself."""

from __future__ import annotations

import json
from typing import Any

import click

from ._common import EXIT_UNAVAILABLE, EXIT_UNHEALTHY, socket_path_of

__all__ = ["status"]


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--timeout", type=float, default=3.0, show_default=True)
@click.pass_context
def status(ctx: click.Context, as_json: bool, timeout: float) -> None:
    """Ask the running collector for its health, uptime, roots and counters.

    Exits 1 when it answers unhealthy (it cannot write a root: a full disk, a removed or read-only
    root, an I/O error; or a share of a sharded collector is down), with the reasons, and 69 when
    none answers or it refuses the query (``busy`` at its connection limit). Running ``gz-ia export
    otel`` processes (positions in $XDG_STATE_HOME/gz-ia/otel) are listed with each signal's state.
    """
    from gz_ia.client.protocol import RejectReason
    from gz_ia.collector.oneshot.session_log import START_ONE
    from gz_ia.collector.service.status import StatusRefused, StatusUnavailable, query_status

    path = socket_path_of(ctx)
    try:
        report: dict[str, Any] = query_status(path, timeout=timeout)
    except StatusRefused as exc:
        what = "is busy" if exc.reason == RejectReason.BUSY else f"refused the query: {exc.reason}"
        click.echo(f"gz-ia: the collector at {path} {what}: {exc.detail}", err=True)
        ctx.exit(EXIT_UNAVAILABLE)
    except StatusUnavailable as exc:
        click.echo(f"gz-ia: no collector is reachable at {path}: {exc}\n{START_ONE}", err=True)
        ctx.exit(EXIT_UNAVAILABLE)
    exporters = _exporters()
    if as_json:
        click.echo(json.dumps({**report, "otel_exporters": exporters}, indent=2, sort_keys=True))
    else:
        _print_report(report)
        _print_exporters(exporters)
    if not report.get("healthy", True):
        ctx.exit(EXIT_UNHEALTHY)


def _print_report(report: dict[str, Any]) -> None:
    from gz_ia.collector.views.terminal import plural

    health = "healthy" if report.get("healthy", True) else "UNHEALTHY"
    click.echo(
        f"gz-ia collector {report['version']}: {health}, pid {report['pid']}, "
        f"up {report['uptime_seconds']:.0f} s, durability {report['durability']}"
    )
    for reason in report.get("reasons", []):
        click.echo(f"  unhealthy: {reason}")
    refused = report.get("config_reload_refused")
    if refused:
        click.echo(f"  config reload refused, the running configuration stays until a reload succeeds: {refused}")
    shares = report.get("shares")
    if isinstance(shares, dict):  # a sharded collector (shards > 1)
        pids = ", ".join("-" if pid is None else str(pid) for pid in shares["pids"])
        click.echo(f"shares: {shares['count']}, restarts {shares['restarts']}, pids {pids}")
        for share in shares.get("down", []):
            click.echo(f"  share {share} is down, being restarted: clients are refused meanwhile and resend later")
    click.echo(f"connections: {report['connections']}")
    _print_metrics(report.get("metrics_endpoint"))
    _print_http(report)
    fleet = report.get("fleet")
    if isinstance(fleet, dict):
        state = "connected" if fleet.get("connected") else "NOT CONNECTED (events are kept and shipped later)"
        click.echo(
            f"fleet: {fleet['role']} as {fleet['host']} on {fleet['url']}, {state}, {fleet['lag_events']} events behind"
        )
    limits = report.get("limits")
    if isinstance(limits, dict):  # in effect: max_open_files may be lower than configured
        click.echo("limits: " + ", ".join(f"{key} {value}" for key, value in limits.items()))
    for root in report["roots"]:
        click.echo(
            f"root {root['path']} (id {root.get('id', '-')}): {plural(root['sessions_loaded'], 'session')} loaded, "
            f"{root['open_sessions']} with open actions"
        )
    counters = report["counters"]
    click.echo(
        "events: " + ", ".join(f"{key} {value}" for key, value in counters.items() if not isinstance(value, dict))
    )
    for reason, count in counters.get("rejected_by_reason", {}).items():
        click.echo(f"  rejected {reason}: {count}")
    for rule, count in counters.get("redacted_by_pattern", {}).items():
        click.echo(f"  redacted {rule}: {count}")
    spools = report.get("spools")
    quarantined = spools.get("quarantined", []) if isinstance(spools, dict) else []
    if quarantined:
        click.echo(f"quarantined spools: {len(quarantined)} (they will never be adopted; their events are kept there)")
    for entry in quarantined:
        click.echo(f"  {entry['path']}: {entry['reason']}")


def _print_http(report: dict[str, Any]) -> None:
    """The loopback HTTP side's endpoints (hooks, OTLP, the live view), or, loudly, why it is not served."""
    endpoints = report.get("endpoints")
    if report.get("http_error"):
        click.echo(f"http: NOT SERVED: {report['http_error']} (events are accepted all the same)")
    elif isinstance(endpoints, dict) and endpoints:
        named = ", ".join(f"{name} {url}" for name, url in sorted(endpoints.items()) if name != "http")
        click.echo(f"http: {endpoints.get('http')}" + (f" ({named})" if named else ""))


def _print_metrics(endpoint: object) -> None:
    """Where Prometheus scrapes this collector, or, loudly, why it cannot."""
    if not isinstance(endpoint, dict):
        return
    if endpoint.get("url"):
        click.echo(f"metrics: {endpoint['url']}")
    elif endpoint.get("error"):
        click.echo(f"metrics: NOT SERVED: {endpoint['error']} (events are accepted all the same)")
    else:
        click.echo("metrics: off")


def _exporters() -> list[dict[str, Any]]:
    """The running OTel exporters' status files (default state directory), as plain data."""
    import msgspec

    from gz_ia.collector.otel.positions import default_state_dir
    from gz_ia.collector.otel.status import running_exporters

    return [msgspec.to_builtins(report) for report in running_exporters(default_state_dir())]


def _print_exporters(exporters: list[dict[str, Any]]) -> None:
    """Each running exporter and, loudly, each signal its backend refuses."""
    for exporter in exporters:
        click.echo(f"otel export: pid {exporter['pid']}")
        for signal in exporter["signals"]:
            if signal["state"] == "ok":
                click.echo(f"  {signal['signal']}: ok -> {signal['endpoint']}")
            else:
                answer = signal["answer"] or "no details"
                click.echo(f"  {signal['signal']}: {signal['state'].upper()} by {signal['endpoint']}: {answer}")
