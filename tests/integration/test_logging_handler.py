"""GzIaHandler: a program that already logs, in a real child process against a real collector."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.conftest import wait_for

from gz_ia.client.schema import MAX_ERROR_LENGTH, cut_text

PROGRAM = """
import logging

from gz_ia import client as gz
from gz_ia.client.log_handler import GzIaHandler

handler = GzIaHandler(agent="indexer", session_id="logged")
logging.basicConfig(level=logging.INFO, handlers=[handler, logging.StreamHandler()])
log = logging.getLogger("indexer")
log.info("starting up")  # not tagged: ignored
log.info("indexing", extra={"gz_action": "Index deps", "gz_stage": "READ"})
log.info("done", extra={"gz_action": "Index deps", "gz_stage": "FINISH", "gz_duration_ms": 42,
                        "gz_attrs": {"files": 12}})
log.info("bad", extra={"gz_action": "Index deps", "gz_stage": "WRITING"})  # not a stage: counted
log.info("tests", extra={"gz_action": "Run tests", "gz_stage": "pending"})
try:
    raise ValueError("3 tests failed")
except ValueError:
    log.exception("tests failed", extra={"gz_action": "Run tests", "gz_stage": "FINISH"})
with gz.session("scoped", agent="planner", role="lead"):
    logging.getLogger().removeHandler(handler)
    logging.getLogger().addHandler(GzIaHandler(agent="unused"))
    log.warning("plan", extra={"gz_action": "Plan", "gz_stage": "READ"})  # the scope's session
    log.error("plan failed", extra={"gz_action": "Plan", "gz_stage": "FINISH"})
    log.info("huge", extra={"gz_action": "Huge", "gz_stage": "READ"})
    log.error("x" * 20_000, extra={"gz_action": "Huge", "gz_stage": "FINISH"})  # cut by the client, marked
assert (handler.sent, handler.ignored) == (4, 1), (handler.sent, handler.ignored)
gz.get_client().flush(5)
"""


def test_tagged_records_become_events_and_the_rest_is_ignored(collector: Any) -> None:
    """Untagged records are ignored; tagged ones are events of the handler's or the scope's session;
    log.exception and level ERROR make a FINISH FAILED with the error, cut and marked past its limit."""
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=collector.env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    wait_for(lambda: len(collector.session_lines("scoped")) == 4, message="the scoped events")
    logged = collector.session_lines("logged")
    assert [(line["action"], line["stage"], line["status"]) for line in logged] == [
        ("Index deps", "READ", "OK"),
        ("Index deps", "FINISH", "OK"),
        ("Run tests", "PENDING", "OK"),
        ("Run tests", "FINISH", "FAILED"),
    ]
    assert {line["agent"] for line in logged} == {"indexer"}
    assert (logged[1]["duration_ms"], logged[1]["attrs"]) == (42, {"files": 12})
    assert logged[3]["error"] == "ValueError: 3 tests failed"
    scoped = collector.session_lines("scoped")
    assert [(line["stage"], line["status"], line["agent"], line["role"]) for line in scoped[:2]] == [
        ("READ", "OK", "planner", "lead"),
        ("FINISH", "FAILED", "planner", "lead"),
    ]
    assert scoped[1]["error"] == "plan failed"
    assert scoped[3]["error"] == cut_text("x" * 20_000, MAX_ERROR_LENGTH)
    assert scoped[3]["error"].endswith("…[cut, 20000 chars]")
    assert collector.rejects() == []
