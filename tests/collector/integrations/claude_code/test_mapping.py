"""The pure Claude Code mapping (hook payload + state + time -> events), fed hook inputs captured
from real Claude Code runs (tests/fixtures/claude_code/captured, written by the real binary; the
end-to-end proof with the binary itself is tests/integration/test_claude_code_real.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gz_ia.collector.integrations.claude_code.mapping import hook_events
from gz_ia.collector.integrations.claude_code.state import HookState, SessionStates

CAPTURED = Path(__file__).parents[3] / "fixtures" / "claude_code" / "captured"
MS = 1_000_000


def _captured(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((CAPTURED / f"{name}.json").read_text())
    return payload


def _feed(state: HookState, *steps: tuple[str, int]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for name, at_ms in steps:
        events += hook_events(_captured(name), state, at_ms * MS)
    return events


def _brief(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(event["action"], event["stage"], event.get("status", "OK")) for event in events]


def test_a_tool_calls_duration_is_the_tools_own_and_its_finish_is_stamped_by_it() -> None:
    """duration_ms from PostToolUse, not the time between the hooks; FINISH = opening + duration."""
    state = HookState()
    events = _feed(state, ("B-PreToolUse-Read", 1000), ("B-PostToolUse-Read", 1300))
    assert _brief(events) == [("Read", "READ", "OK"), ("Read", "FINISH", "OK")]
    assert events[1]["duration_ms"] == 3
    assert events[1]["timestamp_ns"] == events[0]["timestamp_ns"] + 3 * MS
    assert events[0]["attrs"]["prompt_id"] == "85ffcd72-c1d4-4210-a20a-d452855f5fb0"
    assert (events[0]["attrs"]["permission_mode"], events[0]["attrs"]["effort"]) == ("bypassPermissions", "high")
    assert state.is_empty()


def test_a_refused_call_finishes_failed_from_the_batch_with_claude_codes_answer() -> None:
    """PreToolUse, then only PostToolBatch: FINISH FAILED with the refusal."""
    events = _feed(HookState(), ("D-PreToolUse-Write", 10), ("D-PostToolBatch-denied-Write", 50))
    assert _brief(events) == [("Write", "PENDING", "OK"), ("Write", "FINISH", "FAILED")]
    assert "haven't granted it yet" in events[1]["error"]
    assert events[1]["attrs"]["outcome"] == "refused"


def test_a_batch_closes_nothing_twice() -> None:
    """A call its PostToolUse finished is skipped by the PostToolBatch that lists it."""
    events = _feed(HookState(), ("B-PreToolUse-Bash", 1), ("B-PostToolUse-Bash", 2), ("B-PostToolBatch", 3))
    assert _brief(events) == [("Bash", "PENDING", "OK"), ("Bash", "FINISH", "OK")]


def test_a_call_no_hook_saw_is_opened_and_failed_from_the_batch() -> None:
    """A missing tool fires no Pre/Post: the batch entry alone makes its whole cycle."""
    batch = {
        **_captured("B-PostToolBatch"),
        "tool_calls": [
            {
                "tool_name": "Grep",
                "tool_input": {"pattern": "x"},
                "tool_use_id": "toolu_missing",
                "tool_response": "<tool_use_error>Error: No such tool available: Grep</tool_use_error>",
            }
        ],
    }
    events = hook_events(batch, HookState(), 5 * MS)
    assert _brief(events) == [("Grep", "READ", "OK"), ("Grep", "FINISH", "FAILED")]
    assert "No such tool available" in events[1]["error"]
    assert events[1]["attrs"]["outcome"] == "not run"


def test_the_agent_calls_finish_names_its_child_session_and_keeps_its_totals() -> None:
    """agentId, resolvedModel, totalTokens, totalToolUseCount, totalDurationMs on the Agent FINISH."""
    events = _feed(HookState(), ("B-PreToolUse-Agent", 1), ("B-PostToolUse-Agent", 2000))
    attrs = events[1]["attrs"]
    assert attrs["child_session_id"] == "bbad7d3b-4734-436d-be3e-20221d9f8019.a7b7e9606c2ee5fc4"
    assert (attrs["resolved_model"], attrs["total_tokens"], attrs["total_tool_use_count"]) == (
        "claude-opus-4-8[1m]",
        120,
        1,
    )
    assert attrs["total_duration_ms"] == 1077
    child = _feed(HookState(), ("B-PreToolUse-Bash-subagent", 1))[0]
    assert (child["session_id"], child["parent_session_id"]) == (attrs["child_session_id"], events[0]["session_id"])


def test_a_failed_turn_fails_its_prompt_and_the_session_and_session_end_closes_what_is_open() -> None:
    """StopFailure: prompt FINISH FAILED with the API error; SessionEnd closes the open call FAILED."""
    state = HookState()
    start = {**_captured("B-SessionStart"), "session_id": "s"}
    prompt = {**_captured("B-UserPromptSubmit"), "session_id": "s"}
    pre = {**_captured("B-PreToolUse-Bash"), "session_id": "s"}
    failure = {**_captured("E-StopFailure"), "session_id": "s"}
    end = {**_captured("B-SessionEnd"), "session_id": "s"}
    events = [event for payload in (start, prompt, pre, failure, end) for event in hook_events(payload, state, 7 * MS)]
    assert _brief(events) == [
        ("session", "READ", "OK"),
        ("prompt", "READ", "OK"),
        ("Bash", "PENDING", "OK"),
        ("prompt", "FINISH", "FAILED"),
        ("Bash", "FINISH", "FAILED"),
        ("session", "FINISH", "FAILED"),
    ]
    assert events[3]["error"] == "API Error: 400 scripted failure for the test"
    assert events[4]["attrs"] == {"closed_by": "session end"}
    assert events[0]["attrs"]["transcript_path"].endswith("bbad7d3b-4734-436d-be3e-20221d9f8019.jsonl")
    assert state.is_empty()


def test_in_memory_states_are_per_session_and_bounded() -> None:
    """SessionStates hands one state per key, the same one again, and forgets on request."""
    states = SessionStates()
    first = states.get("a")
    hook_events(_captured("B-PreToolUse-Read"), first, 1)
    assert states.get("a") is first
    assert states.get("b").is_empty()
    states.forget("a")
    assert states.get("a").is_empty()


def test_a_session_counts_as_failed_by_its_last_finish_or_by_any_failure_when_that_is_unknown() -> None:
    """The session-failed rule: the last FINISH decides; an earlier gz-ia's checkpoint (None) falls back."""
    from gz_ia.collector.reading.sessions import SessionSummary

    def summary(failures: int, ended_failed: bool | None) -> SessionSummary:
        return SessionSummary("s", None, "a", None, None, 5, 0, failures, 1, ended_failed=ended_failed)

    assert not summary(1, ended_failed=False).failed  # a failed call the agent carried on from
    assert summary(1, ended_failed=True).failed
    assert summary(2, ended_failed=None).failed
    assert not summary(0, ended_failed=None).failed


def test_a_stop_failure_handled_after_session_end_keeps_its_error() -> None:
    """SessionEnd does not wait for StopFailure: handled first, it closes the turn FAILED; the late
    StopFailure then logs its error as the instant cycle ``turn failure``."""
    state = HookState()
    prompt = {**_captured("B-UserPromptSubmit"), "session_id": "s"}
    failure = {**_captured("E-StopFailure"), "session_id": "s"}
    end = {**_captured("B-SessionEnd"), "session_id": "s"}
    events = [event for payload in (prompt, end, failure) for event in hook_events(payload, state, 9 * MS)]
    assert _brief(events) == [
        ("prompt", "READ", "OK"),
        ("prompt", "FINISH", "FAILED"),
        ("turn failure", "READ", "OK"),
        ("turn failure", "FINISH", "FAILED"),
    ]
    assert "had not finished" in events[1]["error"]
    assert events[3]["error"] == "API Error: 400 scripted failure for the test"


def _transcript_ending_on_an_api_error(tmp_path: Path) -> str:
    """A transcript whose last entries are the prompt and the synthetic assistant message Claude Code
    2.1.197 wrote for an HTTP 400 (fields as the real run wrote them; the file is made here, because
    which of SessionEnd and StopFailure a real run handles first is up to the scheduler)."""
    prompt = {"type": "user", "message": {"role": "user", "content": "RUN-APIERR: anything"}}
    error = {
        "type": "assistant",
        "error": "unknown",
        "isApiErrorMessage": True,
        "apiErrorStatus": 400,
        "message": {"model": "<synthetic>", "role": "assistant", "content": [
            {"type": "text", "text": "API Error: 400 scripted failure for the test"}
        ]},
    }  # fmt: skip
    path = tmp_path / "transcript.jsonl"
    path.write_text("".join(json.dumps(entry) + "\n" for entry in (prompt, error, {"type": "last-prompt"})))
    return str(path)


def test_a_stop_failure_after_session_end_is_one_failure_when_the_transcript_names_it(tmp_path: Path) -> None:
    """SessionEnd first, on a turn whose transcript ends on an API error: the turn FINISHes FAILED with
    that error and the session with it; the late StopFailure adds nothing, and then the state may go."""
    transcript = _transcript_ending_on_an_api_error(tmp_path)
    state = HookState()
    start = {**_captured("B-SessionStart"), "session_id": "s"}
    prompt = {**_captured("B-UserPromptSubmit"), "session_id": "s"}
    end = {**_captured("B-SessionEnd"), "session_id": "s", "transcript_path": transcript}
    failure = {**_captured("E-StopFailure"), "session_id": "s", "transcript_path": transcript}
    events = [event for payload in (start, prompt, end) for event in hook_events(payload, state, 9 * MS)]
    assert not state.is_empty()  # the StopFailure is awaited
    events += hook_events(failure, state, 10 * MS)
    assert state.is_empty()
    assert _brief(events) == [
        ("session", "READ", "OK"),
        ("prompt", "READ", "OK"),
        ("prompt", "FINISH", "FAILED"),
        ("session", "FINISH", "FAILED"),
    ]
    assert {events[2]["error"], events[3]["error"]} == {"API Error: 400 scripted failure for the test"}
    assert events[3]["attrs"]["failed_because"] == "the last turn failed"


def test_both_transports_make_the_same_events() -> None:
    """log_event (a receiver in the collector) packs to the bytes plain_event (the command hook) packs."""
    import msgspec

    from gz_ia.collector.integrations.claude_code.log_events import log_event
    from gz_ia.collector.oneshot._msgpack import pack
    from gz_ia.collector.oneshot.ledger import plain_event

    state = HookState()
    names = ("B-SessionStart", "B-UserPromptSubmit", "B-PreToolUse-Agent", "B-PostToolUse-Agent",
             "B-PreToolUse-Bash-subagent", "B-PostToolUse-Bash-subagent", "B-PostToolUseFailure-Bash", "B-Stop",
             "B-SessionEnd")  # fmt: skip
    events = _feed(state, *((name, 1_700_000_000_000 + index * 7) for index, name in enumerate(names)))
    assert len(events) > 8
    for fields in events:
        assert msgspec.msgpack.encode(log_event(fields)) == pack(plain_event(**fields))
