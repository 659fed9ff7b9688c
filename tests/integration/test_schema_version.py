"""Every stored line says the schema version it was written with; readers read every older version
(lines that name none are version 1) and what they know of a newer one."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import msgspec
from tests.conftest import send_events

from gz_ia.client.schema import FIRST_SCHEMA_VERSION, SCHEMA_VERSION, LogEvent, Stage, StoredEvent

# Lines as the collector wrote them before lines carried a version (hand-written: no collector of
# this version can write one), and one from a newer gz-ia with a field this one does not know.
OLD_LINES = (
    b'{"timestamp":"2026-11-01T10:00:00Z","session_id":"old","action":"plan","stage":"READ","status":"OK",'
    b'"agent":"claude","seq":1,"delivery":"aa:1"}\n'
    b'{"timestamp":"2026-11-01T10:00:01Z","session_id":"old","action":"plan","stage":"FINISH","status":"OK",'
    b'"agent":"claude","duration_ms":5,"attrs":{"tokens":3},"seq":2,"delivery":"aa:2"}\n'
    b'{"timestamp":"2026-11-01T10:00:02Z","session_id":"old","action":"next","stage":"READ","status":"OK",'
    b'"agent":"claude","seq":3,"schema_version":99,"some_future_field":{"x":1},"delivery":"aa:3"}\n'
)


def _send_one(collector: Any) -> None:
    now = datetime.now(UTC)
    send_events(
        collector,
        [
            LogEvent(timestamp=now, session_id="s", action="a", stage=stage, status="OK", agent="claude")  # type: ignore[arg-type]
            for stage in (Stage.READ, Stage.FINISH)
        ],
    )


def test_every_line_written_names_the_schema_version(collector: Any, schema_validator: Any) -> None:
    """The collector writes ``schema_version`` into every line; the line stays valid against the
    published schema and decodes as a StoredEvent of that version."""
    _send_one(collector)
    lines = collector.session_file("s").read_bytes().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert json.loads(line)["schema_version"] == SCHEMA_VERSION
        schema_validator.validate(json.loads(line))
        assert msgspec.json.decode(line, type=StoredEvent).schema_version == SCHEMA_VERSION


def test_lines_of_earlier_and_later_versions_are_read(collector: Any) -> None:
    """A session whose lines name no version (1) or a newer one is listed, summarised and read."""
    _send_one(collector)  # the root exists once the collector wrote into it
    (collector.root / "sessions" / "old.events.jsonl").write_bytes(OLD_LINES)
    rows = [
        json.loads(line) for line in collector.gz_ia("session", "logs", "old", "--json", check=True).stdout.splitlines()
    ]
    assert [row["seq"] for row in rows] == [1, 2, 3]
    decoded = [msgspec.json.decode(line, type=StoredEvent) for line in OLD_LINES.splitlines()]
    assert [event.schema_version for event in decoded] == [FIRST_SCHEMA_VERSION, FIRST_SCHEMA_VERSION, 99]
    (summary,) = [
        json.loads(line)
        for line in collector.gz_ia("sessions", "--json", check=True).stdout.splitlines()
        if json.loads(line)["session_id"] == "old"
    ]
    assert (summary["events"], summary["open_actions"]) == (3, 1)
