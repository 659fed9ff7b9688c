"""Attribute values JSON cannot carry: stored readably, never lost, never raised out of a scope.

A NaN or an infinity becomes the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, and an int
outside the signed 64-bit range its decimal string, on every path an agent logs through (the
client's scopes and ``log()``, ``gz-ia session log --attr``); the collector does the same for what
older clients sent. Every reader shows the lines, and one with a ``null`` attribute already on disk.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

import gz_ia.client as gz

ODD: dict[str, Any] = {
    "loss": math.nan,
    "up": math.inf,
    "down": -math.inf,
    "tokens": 2**64,
    "debt": -(2**70),
    "big": 10**30,
    "top": 2**63 - 1,
    "bottom": -(2**63),
    "past": 2**63,
}
STORED: dict[str, Any] = {
    "loss": "NaN",
    "up": "Infinity",
    "down": "-Infinity",
    "tokens": "18446744073709551616",
    "debt": "-1180591620717411303424",
    "big": "1" + "0" * 30,
    "top": 2**63 - 1,
    "bottom": -(2**63),
    "past": "9223372036854775808",
}


def _readers_show(collector: Any, session_id: str, count: int, failed: int) -> None:
    """``session logs``, ``logs``, ``logs --failed`` and ``sessions`` all read the session whole."""
    shown = collector.gz_ia("session", "logs", session_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert len(shown.stdout.splitlines()) == count, shown.stdout
    every = collector.gz_ia("logs", "--json")
    assert every.returncode == 0, every.stderr
    assert sum(json.loads(line)["session_id"] == session_id for line in every.stdout.splitlines()) == count
    failures = collector.gz_ia("logs", "--failed", "--json")
    assert failures.returncode == 0, failures.stderr
    assert len(failures.stdout.splitlines()) == failed, failures.stdout
    sessions = collector.gz_ia("sessions")
    assert sessions.returncode == 0, sessions.stderr
    assert session_id in sessions.stdout


def _fail_with(scope: gz.SessionScope, attrs: dict[str, Any]) -> None:
    with scope.action("Train") as act:
        act.set(**attrs)
        raise KeyError("missing")


def test_scopes_and_log_store_values_json_cannot_carry_as_strings(collector: Any, schema_validator: Any) -> None:
    """A failing action with NaN, infinities and huge ints: the user's exception comes out, the
    FINISH FAILED is stored with the values as strings, and every reader shows it."""
    client = collector.client()
    with gz.session("odd", agent="agy", client=client) as scope:
        with pytest.raises(KeyError, match="missing"):
            _fail_with(scope, ODD)
        with scope.action("Measure") as act:
            act.pending(**ODD)
        scope.log("Log", "READ", attrs=ODD)
        scope.log("Log", "FINISH", attrs={"n": 2**64})
    client.log(session_id="odd", action="raw", stage="READ", agent="agy", attrs={"x": math.nan, "n": -(2**64)})
    assert client.flush(timeout=20)
    stats = client.stats()
    client.close()
    assert (stats.accepted, stats.rejected, stats.invalid, stats.dropped) == (8, 0, 0, 0), stats
    lines = collector.session_lines("odd")
    for line in lines:
        schema_validator.validate(line)
    assert [line["stage"] for line in lines] == [
        "READ",
        "FINISH",
        "READ",
        "PENDING",
        "FINISH",
        "READ",
        "FINISH",
        "READ",
    ]
    assert lines[1]["status"] == "FAILED" and lines[1]["error"] == "KeyError: 'missing'"
    assert lines[1]["attrs"] == STORED
    assert lines[3]["attrs"] == STORED
    assert lines[5]["attrs"] == STORED
    assert lines[6]["attrs"] == {"n": "18446744073709551616"}
    assert lines[7]["attrs"] == {"x": "NaN", "n": "-18446744073709551616"}
    assert not collector.rejects()
    _readers_show(collector, "odd", count=len(lines), failed=1)


def test_the_collector_stores_what_older_clients_sent_readably(collector: Any, schema_validator: Any) -> None:
    """NaN and infinities sent as MessagePack floats (as clients before this sent them) are accepted
    and stored as strings, never as ``null``."""
    client = collector.client()
    now = datetime.now(UTC)
    base = {"timestamp": now, "session_id": "older", "agent": "old", "status": "OK", "action": "a"}
    for event in (
        {**base, "stage": "READ", "attrs": {"ok": 1.5}},
        {**base, "stage": "FINISH", "status": "FAILED", "error": "e", "attrs": {"l": math.nan, "i": -math.inf}},
    ):
        client._sender.submit(msgspec.msgpack.encode(event), "older")
    assert client.flush(timeout=20)
    stats = client.stats()
    client.close()
    assert (stats.accepted, stats.rejected) == (2, 0), stats
    lines = collector.session_lines("older")
    for line in lines:
        schema_validator.validate(line)
    assert [line["attrs"] for line in lines] == [{"ok": 1.5}, {"l": "NaN", "i": "-Infinity"}]
    assert b"null" not in collector.session_file("older").read_bytes()
    _readers_show(collector, "older", count=2, failed=1)


def test_session_log_attrs_json_cannot_carry_are_stored_as_strings(collector: Any) -> None:
    """``gz-ia session log --attr`` (the one-shot fast path) makes a value storable as the client does."""
    args = ("session", "log", "one-shot", "--agent", "agy", "--action", "a")
    odd = ("--attr", "l=nan", "--attr", "i=-inf", "--attr", "n=99999999999999999999", "--attr", "f=1e999")
    first = collector.gz_ia(*args, "--stage", "READ", *odd)
    assert first.returncode == 0, first.stderr
    (line,) = collector.session_lines("one-shot")
    assert line["attrs"] == {"l": "NaN", "i": "-Infinity", "n": "99999999999999999999", "f": "Infinity"}


def test_a_null_attr_already_on_disk_is_shown_by_every_reader(collector: Any) -> None:
    """A session file written by a collector before this one stored a NaN as ``null``.

    The lines are written by hand (no collector writes a ``null`` any more), with the collector
    stopped so that it does not write the session meanwhile."""
    collector.stop()
    sessions = collector.root / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    common = '"session_id":"nulls","action":"Train","agent":"agy"'
    lines = [
        '{"timestamp":"2026-01-01T00:00:00Z",' + common + ',"stage":"READ","status":"OK","seq":1}',
        '{"timestamp":"2026-01-01T00:00:01Z",' + common + ',"stage":"FINISH","status":"FAILED","error":"boom",'
        '"attrs":{"x":null,"y":2},"seq":2}',
    ]
    (sessions / "nulls.events.jsonl").write_text("\n".join(lines) + "\n")
    _readers_show(collector, "nulls", count=2, failed=1)
    shown = collector.gz_ia("session", "logs", "nulls")
    assert shown.returncode == 0, shown.stderr
    assert "boom" in shown.stdout
