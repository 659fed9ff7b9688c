"""The Gemini hook's own parsing, where a mistake would silently skew what is stored."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from gz_ia.collector.integrations.gemini import timestamp_ns, tool_failure


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 12, 31)))
def test_timestamps_parse_as_datetime_parses_them(moment: datetime) -> None:
    """Gemini's ``...T...Z`` stamps, parsed by hand (datetime costs the hook too much), to the millisecond."""
    stamp = moment.replace(microsecond=moment.microsecond // 1000 * 1000).isoformat(timespec="milliseconds") + "Z"
    expected = int(datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp() * 1000) * 1_000_000
    assert timestamp_ns({"timestamp": stamp}) == expected


def test_other_timestamp_forms_are_not_guessed() -> None:
    """An offset, a space, no stamp at all: None (the hook then times with its own clock)."""
    for stamp in ("2026-12-01T23:39:13+01:00", "2026-12-01 23:39:13.000Z", "", 17, None, "2026-12-01Txx:39:13Z"):
        assert timestamp_ns({"timestamp": stamp}) is None


def test_a_shell_command_fails_by_its_exit_code_a_tool_by_its_error() -> None:
    """Exit Code lines other than 0 and error objects are failures; output that merely mentions one is not."""
    shell = "run_shell_command"
    assert tool_failure({"llmContent": "Output: (empty)\nExit Code: 3\nProcess Group PGID: 1"}, shell) == "exit code 3"
    assert tool_failure({"llmContent": "Output: x\nExit Code: 0\n"}, shell) is None
    assert tool_failure({"llmContent": "Output: echo 'Exit Code: 9'\n"}, shell) is None
    assert tool_failure({"llmContent": "x", "error": {"message": "File not found: a", "type": "x"}}, "read_file") == (
        "File not found: a"
    )
    assert tool_failure({"llmContent": "Exit Code: 3"}, "read_file") is None
