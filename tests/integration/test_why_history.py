"""`gz-ia session why` read off the tallies' quiet points equals the fold of every line.

A real collector writes a tree whose sessions have what the split must get right: a subagent whose
usage is its hooks' readings, a session with both a hook's reading and other records (one cycle
holding both, and a Claude Code API request through the OTLP door), a failure early in a subagent and
one late in the top, a session cycle open throughout and a turn open across the failure with usage
recorded while it is open, cycles whose stages are stamped out of order, enough cycles that the
quiet points are thinned, and a restart of the collector halfway. Events carry their own times (as
an agent's do), so that the shape is the same every run.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gz_ia.client import build_event
from gz_ia.collector.reading import list_sessions
from gz_ia.collector.reading.after import after_moment, counts_of_spans
from gz_ia.collector.reading.cycles import load_tree
from gz_ia.collector.reading.segments import open_dirs
from gz_ia.collector.storage.checkpoints import MAX_QUIET_POINTS, Checkpoint, encode_checkpoint
from gz_ia.collector.storage.replay import replay_session
from gz_ia.collector.storage.segments import locate_active
from gz_ia.collector.views.answers import why, why_of

pytestmark = pytest.mark.needs_collector

HISTORY = ("history", "cycles", "first_failed", "quiet", "quiet_step", "begun_low", "usage_low", "open_used")
"""The checkpoint's fields that `why` reads (an earlier gz-ia wrote none of them)."""

T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOOK = {"gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 2, "gz-ia.usage_from": "hook"}
TELEMETRY = {"gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 1, "gz-ia.cost_usd": 0.25}


def write_tree(collector: Any) -> None:
    """Send the tree through a real client and wait until the collector has stored it; the collector
    restarts halfway (the rest goes on from the tallies its checkpoints restore)."""
    clients = [collector.client()]

    def emit(session: str, action: str, stage: str, at: float, **fields: Any) -> None:
        clients[-1].emit(
            build_event(
                session_id=session,
                action=action,
                stage=stage,
                agent="codex",
                timestamp=T0 + timedelta(seconds=at),
                **fields,
            )
        )

    # The top: a session cycle open throughout, 400 numbered steps; a turn open from 150 s to 250 s
    # (across the child's failure) with usage recorded while it is open;
    # usage of both kinds, one cycle holding both; stages out of order; a late failure.
    emit("h-top", "session", "READ", 0.5)  # open all along, as Claude Code's session is
    for step in range(400):
        at = 1 + step * 2.0
        named = {"cycle": f"c{step}"}
        if step == 200:
            assert clients[-1].flush(10)
            clients[-1].close()
            collector.stop()
            collector.start()
            clients.append(collector.client())
        if step == 75:
            emit("h-top", "turn", "READ", 150)
        if step == 100:
            emit("h-top", "turn", "PENDING", 200, attrs=HOOK)  # usage on an open cycle: no quiet moment
        if step == 50:
            emit("h-top", "step", "READ", at, **named)
            emit("h-top", "step", "PENDING", at - 20.5, **named)  # stamped before its READ (and cycles before)
            emit("h-top", "step", "FINISH", at + 1, attrs=TELEMETRY, **named)
            continue
        if step == 60:
            at -= 3.0  # this cycle is stamped before the one before it
        attrs: dict[str, Any] | None = TELEMETRY if step % 3 == 0 else HOOK if step % 5 == 0 else None
        emit("h-top", "step", "READ", at, **named)
        if step == 100:
            emit("h-top", "step", "PENDING", at + 0.5, attrs=HOOK, **named)  # one cycle, both kinds
            attrs = TELEMETRY
        if step == 180:
            emit("h-top", "step", "FINISH", at + 1.5, status="FAILED", error="late", **named)
            continue
        emit("h-top", "step", "FINISH", at + 1.5, **({"attrs": attrs} if attrs else {}), **named)
        if step == 125:
            emit("h-top", "turn", "FINISH", 250, attrs=TELEMETRY)
    # Claude Code's telemetry: an API request's usage record, through the collector's OTLP door.
    assert clients[-1].flush(10)
    post_api_request(collector, "h-top", at=601.25, tokens=(40, 7))
    emit("h-top", "session", "FINISH", 805, attrs=TELEMETRY)
    # A subagent whose usage is its hooks' readings, failing early.
    for step in range(100):
        at = 100 + step * 2.0
        emit("h-child", "run", "READ", at, parent_session_id="h-top")
        failed = {"status": "FAILED", "error": "early"} if step == 5 else {}
        emit("h-child", "run", "FINISH", at + 1.25, parent_session_id="h-top", attrs=HOOK, **failed)
    # One that ended before the failure, one that began after it.
    for step in range(10):
        for session, at in (("h-before", 1 + step), ("h-after", 400 + step)):
            emit(session, "look", "READ", at, parent_session_id="h-top")
            emit(session, "look", "FINISH", at + 0.5, parent_session_id="h-top", attrs=TELEMETRY)
    assert clients[-1].flush(10)
    clients[-1].close()


def post_api_request(collector: Any, session_id: str, *, at: float, tokens: tuple[int, int]) -> None:
    """One Claude Code ``api_request`` log record, as its OpenTelemetry exports it (OTLP/HTTP JSON)."""

    def attribute(key: str, value: Any) -> dict[str, Any]:
        kind = "intValue" if isinstance(value, int) else "doubleValue" if isinstance(value, float) else "stringValue"
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}

    stamp = int((T0 + timedelta(seconds=at)).timestamp() * 1e9)
    attributes = {"event.name": "api_request", "session.id": session_id, "model": "claude-x", "duration_ms": 900}
    attributes |= {"input_tokens": tokens[0], "output_tokens": tokens[1], "cost_usd": 0.125}
    record = {
        "timeUnixNano": str(stamp),
        "body": {"stringValue": "claude_code.api_request"},
        "attributes": [attribute(key, value) for key, value in attributes.items()],
    }
    service = [attribute("service.name", "claude-code")]
    body = {"resourceLogs": [{"resource": {"attributes": service}, "scopeLogs": [{"logRecords": [record]}]}]}
    request = urllib.request.Request(
        collector.http_url + "/v1/logs",
        data=json.dumps(body).encode(),
        headers=collector.http_headers(**{"Content-Type": "application/json", "X-Gz-Ia-Root": str(collector.root)}),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def replayed_checkpoint(root: Path, session_id: str) -> Checkpoint:
    """The checkpoint a replay of every line of the session from nothing arrives at."""
    dirs = open_dirs(root)
    try:
        number, active, _ = locate_active(dirs.sessions_fd, session_id, 1)
        try:
            fold, segment_seq, complete = replay_session(dirs.sessions_fd, session_id, None, number, active)
        finally:
            if active is not None:
                active.close()
        assert complete
        return fold.tally_checkpoint(segment=number, offset=0, segment_seq=segment_seq, started=0.0)
    finally:
        dirs.close()


def full_why(root: Path, session_id: str) -> dict[str, Any] | None:
    answer = why_of(load_tree(root, session_id))
    return None if answer is None else answer.as_json()


def fast_why(root: Path, session_id: str) -> dict[str, Any] | None:
    answer = why(root, session_id)
    return None if answer is None else answer.as_json()


def test_why_off_the_quiet_points_is_the_fold_of_every_line(collector: Any) -> None:
    write_tree(collector)
    root = collector.root
    assert fast_why(root, "h-top") == full_why(root, "h-top")
    answer = fast_why(root, "h-top")
    assert answer is not None
    assert answer["first_failure"]["session_id"] == "h-child" and answer["first_failure"]["error"] == "early"
    assert fast_why(root, "h-child") == full_why(root, "h-child")
    # Every session, split at many moments (each stamp and either side of it), as the fold splits it.
    summaries = {summary.session_id: summary for summary in list_sessions(root, history=True)}
    dirs = open_dirs(root)
    try:
        for session_id in ("h-top", "h-child", "h-before", "h-after"):
            summary = summaries[session_id]
            assert summary.history is not None, session_id
            node = load_tree(root, session_id, tree=False)
            stamps = sorted({stamp for span in node.actions for stamp in (span.begun, span.usage_at) if stamp})
            micro = timedelta(microseconds=1)
            # A sample, and every stamp where the cycle stamped out of order and the API request lie.
            around = [(75, 105), (595, 605)]
            near = [stamp for stamp in stamps for low, high in around if low <= (stamp - T0).total_seconds() <= high]
            for stamp in sorted({*stamps[::6], *near}):
                for moment in (stamp - micro, stamp, stamp + micro):
                    fast = after_moment(dirs, summary, moment)
                    full = counts_of_spans(node.actions, moment, hooks_count=node.usage.from_hooks)
                    assert fast is not None, (session_id, moment)
                    assert (fast.actions, fast.tokens) == (full.actions, full.tokens), (session_id, moment)
                    assert fast.cost_usd == pytest.approx(full.cost_usd, abs=1e-9), (session_id, moment)
    finally:
        dirs.close()

    # The checkpoint the writer left says the same as a fold: its cycles, its first failure, and
    # quiet points thinned to the bound.
    collector.stop()
    state = root / "state" / "h-top.session.json"
    checkpoint = json.loads(state.read_text())
    top = load_tree(root, "h-top", tree=False)
    assert checkpoint["history"] is True
    assert checkpoint["cycles"] == top.cycles == 403  # with the API request's
    assert checkpoint["first_failed"][1:] == ["step", "late", False]
    assert 1 < len(checkpoint["quiet"]) <= MAX_QUIET_POINTS
    assert checkpoint["quiet_step"] > 1
    assert all(point[-1] for point in checkpoint["quiet"][:-1])  # each carries the open session cycle
    # A replay of the lines (recovery, the listing) keeps the same history as the writer did.
    for session_id in ("h-top", "h-child"):
        written = json.loads((root / "state" / f"{session_id}.session.json").read_text())
        replayed = json.loads(encode_checkpoint(replayed_checkpoint(root, session_id)))
        for name in HISTORY:
            assert replayed.get(name) == written.get(name), (session_id, name)

    # A checkpoint of an earlier gz-ia knows none of it: the session is folded as before.
    for name in HISTORY:
        checkpoint.pop(name, None)
    state.write_text(json.dumps(checkpoint) + "\n")
    assert next(s for s in list_sessions(root, history=True) if s.session_id == "h-top").history is None
    assert fast_why(root, "h-top") == full_why(root, "h-top")
