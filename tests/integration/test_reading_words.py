"""What the reading commands print is right in the small things people read: one event is "1 event",
wide characters keep the `gz-ia sessions` columns in line, a session with no events of its own takes
the status of its subagents, and a misspelled GZ_IA_* variable is named, not ignored."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

from tests.conftest import send_events

from gz_ia.client import build_event


def _event(
    session_id: str, action: str, stage: str, *, parent: str | None = None, agent: str = "a", **fields: Any
) -> Any:
    return build_event(
        session_id=session_id, parent_session_id=parent, action=action, stage=stage, agent=agent, **fields
    )


def _failed_cycle(session_id: str, parent: str) -> list[Any]:
    return [
        _event(session_id, "job", "READ", parent=parent),
        _event(session_id, "job", "FINISH", parent=parent, status="FAILED", error="exit 1"),
    ]


def _width(text: str) -> int:
    """Terminal columns: East Asian wide and full-width characters take two, combining marks none."""
    return sum(
        0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text
    )


def test_one_event_is_one_event(collector: Any, tmp_path: Path) -> None:
    send_events(collector, [_event("one", "a", "READ"), _event("two", "a", "READ"), _event("two", "b", "READ")])
    one = collector.gz_ia("session", "tree", "one", "--color", "never")
    assert one.returncode == 0, one.stderr
    assert "(1 event, 1 open)" in one.stdout, one.stdout
    two = collector.gz_ia("session", "tree", "two", "--color", "never")
    assert "(2 events, 2 open)" in two.stdout, two.stdout
    view = collector.gz_ia("session", "view", "one", "-o", str(tmp_path / "one.html"))
    assert view.returncode == 0, view.stderr
    assert "(1 session, 1 event in one)" in view.stdout, view.stdout


def test_status_counts_one_session_as_one_session(collector: Any) -> None:
    """`gz-ia status` says "1 session loaded" of a root with one session, "2 sessions" of two."""
    send_events(collector, [_event("only", "a", "READ")])
    status = collector.gz_ia("status")
    assert status.returncode == 0, status.stderr
    assert "): 1 session loaded, 1 with open actions" in status.stdout, status.stdout
    send_events(collector, [_event("second", "a", "READ")])
    assert "): 2 sessions loaded, 2 with open actions" in collector.gz_ia("status").stdout


def test_wide_characters_keep_the_session_columns_in_line(collector: Any) -> None:
    """Agents in CJK (two columns a character), with a combining accent, and one too long to show
    whole: the PARENT and SESSION columns start at the same terminal column on every line."""
    agents = {"cjk": "エージェント", "accent": "cafe\u0301", "plain": "agent", "long": "長" * 30}
    send_events(collector, [_event(session_id, "a", "READ", agent=agent) for session_id, agent in agents.items()])
    result = collector.gz_ia("sessions", "--color", "never", "--no-pager")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 5
    starts = set()
    for line in lines:
        session = line.rsplit(" ", 1)[1]
        starts.add(_width(line) - _width(session))
    assert len(starts) == 1, result.stdout
    (long_line,) = [line for line in lines if line.endswith(" long")]
    assert "\u2026" in long_line and "長" * 30 not in long_line


def test_a_session_with_no_events_of_its_own_takes_the_status_of_its_subagents(collector: Any) -> None:
    """A root that logged nothing, both of whose subagents failed, is failed; with one still running
    it is running; an ok child of a failed-free root leaves it ok."""
    events = [*_failed_cycle("kid-1", "boss"), *_failed_cycle("kid-2", "boss")]
    events += [_event("fine-1", "job", "READ", parent="calm"), _event("fine-1", "job", "FINISH", parent="calm")]
    send_events(collector, events)
    tree = collector.gz_ia("session", "tree", "boss", "--json")
    assert tree.returncode == 0, tree.stderr
    node = json.loads(tree.stdout)
    assert node["events"] == 0 and node["status"] == "failed"
    assert [child["status"] for child in node["children"]] == ["failed", "failed"]
    text = collector.gz_ia("session", "tree", "boss", "--color", "never")
    assert text.stdout.splitlines()[0].startswith("boss  -  failed "), text.stdout
    calm = json.loads(collector.gz_ia("session", "tree", "calm", "--json").stdout)
    assert calm["status"] == "ok"
    send_events(collector, [_event("kid-3", "job", "READ", parent="boss")])
    assert json.loads(collector.gz_ia("session", "tree", "boss", "--json").stdout)["status"] == "running"


def test_a_misspelled_variable_is_named_once_with_the_name_it_resembles(make_collector: Any) -> None:
    collector = make_collector(env={"GZ_IA_SOKET": "/nowhere", "GZ_IA_ROTATION_MAX_BYTE": "4096"})
    collector.stop()
    warned = collector.log_lines("GZ_IA_SOKET")
    assert len(warned) == 1, collector.log()
    assert "did you mean GZ_IA_SOCKET?" in warned[0]
    assert "did you mean GZ_IA_ROTATION_MAX_BYTES?" in collector.log_lines("GZ_IA_ROTATION_MAX_BYTE:")[0]
