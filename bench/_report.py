"""Writing the results: one JSON file, a markdown table with ratios against the targets, a chart.

The targets are those of docs/performance.md; every ratio is computed from figures of the same run.
"""

from __future__ import annotations

import math
import platform
import subprocess
from pathlib import Path
from typing import Any

import msgspec

from ._common import Sample

X = "\u00d7"
"""The multiplication sign of ratios (an escape: the character itself reads like an x in code)."""
DASH = "\u2013"
"""The en dash of ranges."""


def machine() -> dict[str, str]:
    """The machine the figures were measured on."""
    model = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    osname = "unknown"
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("PRETTY_NAME="):
            osname = line.split("=", 1)[1].strip('"')
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=False)
    return {
        "cpus": str(len(__import__("os").sched_getaffinity(0))),
        "cpu_model": model,
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "os": osname,
        "python": platform.python_version(),
        "commit": (commit.stdout.strip() or "unknown") + (" + uncommitted changes" if dirty.stdout.strip() else ""),
    }


def _fmt(value: float) -> str:
    if math.isnan(value):
        return f"{DASH}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def spread(sample: Sample) -> str:
    """``median [min-max]`` of a sample (with an en dash)."""
    if len(sample.values) == 1:
        return _fmt(sample.median)
    return f"{_fmt(sample.median)} [{_fmt(sample.low)}{DASH}{_fmt(sample.high)}]"


class Target(msgspec.Struct):
    """One line of the issue's targets table, evaluated."""

    figure: str
    target: str
    measured: str
    ratio: float | None
    met: bool | None
    note: str = ""


def evaluate(samples: dict[str, Sample], notes: dict[str, Any]) -> list[Target]:
    """Compare the figures with the targets (medians; ratios of the same run)."""

    def med(key: str) -> float | None:
        sample = samples.get(key)
        return sample.median if sample and sample.values else None

    rows: list[Target] = []

    def ratio_row(figure: str, target: str, num: float | None, den: float | None, bound: float, ge: bool) -> None:
        if num is None or den is None or den == 0:
            rows.append(Target(figure, target, "not measured", None, None))
            return
        ratio = num / den
        rows.append(Target(figure, target, f"{ratio:.2f}{X}", ratio, ratio >= bound if ge else ratio <= bound))

    for sessions, bound in (("100", 1.5), ("10000", 2.0)):
        peers = [v for v in (med(f"ingest.{sessions}.rsyslog"), med(f"ingest.{sessions}.syslog-ng")) if v]
        best = max(peers) if peers else None
        for key, how in (("gz-ia", "one process"), ("gz-ia-shards", "shards = 2")):
            ratio_row(
                f"ingest, {int(sessions):,} sessions, {how} (ours / best peer)",
                f"≥ {bound} {X}",
                med(f"ingest.{sessions}.{key}"),
                best,
                bound,
                True,
            )
    for sessions in ("100", "10000"):
        ratio_row(
            f"durable ack (fsync), {int(sessions):,} sessions (/ ours without)",
            f"≥ 0.5 {X}",
            med(f"ingest.{sessions}.gz-ia-fsync"),
            med(f"ingest.{sessions}.gz-ia"),
            0.5,
            True,
        )
    for sessions in ("100", "10000"):
        ratio_row(
            f"end to end through the client, {int(sessions):,} sessions (/ pre-encoded)",
            f"≥ 0.8 {X}",
            med(f"ingest.{sessions}.gz-ia-client"),
            med(f"ingest.{sessions}.gz-ia"),
            0.8,
            True,
        )
    ratio_row(
        "agent CPU per event, active client (/ logging)",
        f"≤ 0.2 {X}",
        med("agent.client"),
        med("agent.logging"),
        0.2,
        False,
    )
    ratio_row(
        "agent CPU per event, null client (/ logging)",
        f"≤ 0.05 {X}",
        med("agent.null"),
        med("agent.logging"),
        0.05,
        False,
    )
    null_scope = med("agent.null_scope")
    figure = "agent CPU per action scope, null client (`GZ_IA_DISABLED=1`)"
    if null_scope is None:
        rows.append(Target(figure, "≤ 1 µs", "not measured", None, None))
    else:
        rows.append(Target(figure, "≤ 1 µs", f"{null_scope:.2f} µs", null_scope, null_scope <= 1.0))
    for key, figure, bound in (
        ("pace.work-1ms", "agent loop, 1 ms of CPU work per step, 2 events (with gz-ia / without)", 1.05),
        ("pace.work-100us", "agent loop, 100 µs of CPU work per step, 2 events (with gz-ia / without)", 1.25),
    ):
        value = med(key)
        if value is None:
            rows.append(Target(figure, f"≤ {bound:g} {X}", "not measured", None, None))
        else:
            rows.append(Target(figure, f"≤ {bound:g} {X}", f"{value:.3f}{X}", value / bound, value <= bound))
    added = med("pace.log-every-5ms.added")
    figure = "agent CPU gz-ia adds per event, one event every 5 ms"
    if added is None:
        rows.append(Target(figure, "≤ 20 µs", "not measured", None, None))
    else:
        rows.append(Target(figure, "≤ 20 µs", f"{added:.1f} µs", added / 20, added <= 20))
    ratio_row(
        "`import gz_ia.client`, installed alone (/ `import logging`)",
        f"≤ 2 {X}",
        med("agent.import_client"),
        med("agent.import_logging"),
        2.0,
        False,
    )
    for key, figure, bound in (
        ("latency.rtt_p99", "acknowledged round trip p99, through Client.send (ms)", 1.0),
        ("latency.raw_rtt_p99", "acknowledged round trip p99, raw protocol in one thread (ms)", 1.0),
        ("latency.follow_p99", "follow latency p99 (ms)", 50.0),
    ):
        value = med(key)
        if value is None:
            rows.append(Target(figure, f"≤ {bound:g} ms", "not measured", None, None, str(notes.get(key, ""))))
        else:
            rows.append(Target(figure, f"≤ {bound:g} ms", f"{value:.3g} ms", value / bound, value <= bound))
    ratio_row(
        "`--json` dump of 1M events (throughput / cat)",
        f"≥ 0.33 {X}",
        med("reader.cat_seconds"),
        med("reader.dump_seconds"),
        0.33,
        True,
    )
    tail = notes.get("reader.tail")
    # bench/reader_tail.py names it last_page_ratio: the last page with the big history / the small one.
    tail_ratio = tail.get("last_page_ratio", tail.get("ratio")) if isinstance(tail, dict) else None
    figure = "last 100 events, big vs 10k history"
    if isinstance(tail, dict) and isinstance(tail.get("events"), int):
        figure = f"last 100 events, {tail['events']:,} vs {tail.get('small_events', 10_000):,} events of history"
    if isinstance(tail_ratio, int | float):
        rows.append(Target(figure, f"≤ 2 {X}", f"{tail_ratio:.2f}{X}", tail_ratio, tail_ratio <= 2))
    else:
        rows.append(Target(figure, f"≤ 2 {X}", "see reader_tail", None, None, str(tail)[:300]))
    seek = notes.get("reader.seek")
    seqs = [seek[key] for key in ("seq_early", "seq_middle", "seq_late") if isinstance(seek, dict) and key in seek]
    if seqs:
        worst = max(float(item["ratio_with_start"]) for item in seqs)
        raw = ", ".join(f"{item['ratio']:.1f}{X}" for item in seqs)
        rows.append(
            Target(
                "`session logs --seq N` / (`event_at` + the command's start), early, middle and late N",
                f"≤ 2 {X}",
                f"{worst:.2f}{X}",
                worst,
                worst <= 2,
                f"without the start: {raw}",
            )
        )
    else:
        rows.append(Target("`session logs --seq N` / `event_at`", f"≤ 2 {X}", "see reader_seek", None, None))
    rss = med("scale.rss_mb")
    rows.append(
        Target(
            "100,000 sessions under 1,024 fds: collector RSS (MB)",
            "no error; ≤ 150 MB",
            "not measured" if rss is None else f"{rss:.0f} MB" + ("" if notes.get("scale.ok", True) else " (ERRORS)"),
            None if rss is None else rss / 150,
            None if rss is None else (rss <= 150 and bool(notes.get("scale.ok", True))),
        )
    )
    flood = med("flood.rss_mb")
    rows.append(
        Target(
            "64-client flood: collector peak RSS (MB)",
            "≤ 200 MB, nothing lost",
            "not measured" if flood is None else f"{flood:.0f} MB",
            None if flood is None else flood / 200,
            None if flood is None else flood <= 200,
        )
    )
    return rows


def markdown(samples: dict[str, Sample], targets: list[Target], meta: dict[str, Any]) -> str:
    """The results as markdown: the machine, every figure, then the targets with ratios."""
    out = ["# gz-ia benchmark results", ""]
    out += [f"- {key}: {value}" for key, value in meta["machine"].items()]
    out += [f"- command: `{meta['command']}`", f"- runs per configuration: {meta['runs']}"]
    out += [f"- 1-minute load average before the run: {meta.get('load_average_before', '?')}"]
    out += [f"- file creation in /tmp before the run: {meta.get('file_creation_us_before', '?')} µs", ""]
    out += [
        f"## Figures (median [min{DASH}max] over the runs)",
        "",
        "| figure | value | unit | notes |",
        "|---|---|---|---|",
    ]
    for sample in samples.values():
        extra = ", ".join(f"{k} {_fmt(v) if isinstance(v, float) else v}" for k, v in sample.extra.items())
        out.append(f"| {sample.name} | {spread(sample)} | {sample.unit} | {extra} |")
    out += [
        "",
        "## Targets (ratios from the same run)",
        "",
        "| figure | target | measured | met |",
        "|---|---|---|---|",
    ]
    for row in targets:
        met = f"{DASH}" if row.met is None else ("yes" if row.met else "**no**")
        note = f" ({row.note})" if row.note else ""
        out.append(f"| {row.figure} | {row.target} | {row.measured}{note} | {met} |")
    gaps = meta.get("gaps") or []
    if gaps:
        out += ["", "## Gaps", ""] + [f"- {gap}" for gap in gaps]
    return "\n".join(out) + "\n"


def chart(samples: dict[str, Sample], targets: list[Target], path: Path) -> None:
    """Draw ingest throughput per system and workload, and each target's measured/target ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [
        ("rsyslog", "rsyslog"),
        ("syslog-ng", "syslog-ng"),
        ("gz-ia", "gz-ia"),
        ("gz-ia-shards", "gz-ia, 2 shards"),
        ("gz-ia-fsync", "gz-ia fsync"),
        ("gz-ia-client", "gz-ia via client"),
    ]
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [1.1, 1]})
    width = 0.14
    for offset, (key, label) in enumerate(systems):
        xs, ys, lows, highs = [], [], [], []
        for index, sessions in enumerate(("100", "10000")):
            sample = samples.get(f"ingest.{sessions}.{key}")
            if sample is None or not sample.values:
                continue
            xs.append(index + (offset - 2.5) * width)
            ys.append(sample.median / 1000)
            lows.append((sample.median - sample.low) / 1000)
            highs.append((sample.high - sample.median) / 1000)
        if xs:
            left.bar(xs, ys, width, yerr=[lows, highs], capsize=3, label=label)
    left.set_xticks([0, 1], ["100 sessions", "10,000 sessions"])
    left.set_ylabel(f"thousand events/s (median, min{DASH}max)")
    left.set_title("Ingest of pre-encoded events, 8 connections, until on disk")
    left.legend(fontsize=8)
    rows = [row for row in targets if row.ratio is not None]
    names = [row.figure[:48] for row in rows]
    # Normalise so that >= 1 always means "target met".
    scores = []
    for row in rows:
        assert row.ratio is not None
        if "ms" in row.target or "MB" in row.target:
            scores.append(1 / row.ratio if row.ratio else 0.0)
        else:
            bound = float(row.target.split()[1])
            higher_ok = row.target.startswith("≥")
            scores.append(row.ratio / bound if higher_ok else (bound / row.ratio if row.ratio else 0.0))
    colours = ["tab:green" if score >= 1 else "tab:red" for score in scores]
    right.barh(range(len(rows)), scores, color=colours)
    right.axvline(1.0, color="black", linewidth=1)
    right.set_yticks(range(len(rows)), names, fontsize=7)
    right.invert_yaxis()
    right.set_xscale("log")
    right.set_xlabel("measured vs target (≥ 1: met)")
    right.set_title("Targets")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
