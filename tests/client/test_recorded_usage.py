"""``recorded_usage``: the one reading of both usage key families found on disk."""

from __future__ import annotations

from gz_ia.client.usage import UsageSum, reading_of, recorded_usage, usage_attrs


def test_the_reserved_keys_are_read_as_usage_of_reads_them() -> None:
    attrs = usage_attrs(input_tokens=10, output_tokens=2, cost_usd=0.5, model="m")
    assert recorded_usage(attrs) == ((10, 2, 0, 0), 0.5, "m")


def test_the_plain_keys_are_read_when_no_reserved_key_is_there() -> None:
    plain = {"input_tokens": 7, "output_tokens": 3, "cache_read_tokens": 1, "cost_usd": 0.25, "model": "x"}
    assert recorded_usage(plain) == ((7, 3, 1, 0), 0.25, "x")


def test_an_event_with_both_families_is_counted_once_by_the_reserved_keys() -> None:
    both = {"gen_ai.usage.input_tokens": 10, "input_tokens": 999}
    assert recorded_usage(both) == ((10, 0, 0, 0), 0.0, "")


def test_no_usage_a_model_alone_and_bad_values() -> None:
    assert recorded_usage(None) is None
    assert recorded_usage({"tool": "Bash"}) is None
    assert recorded_usage({"model": "m"}) is None  # a model names no usage by itself
    assert recorded_usage({"input_tokens": -3, "output_tokens": True, "cost_usd": "1"}) == ((0, 0, 0, 0), 0.0, "")


def test_a_hooks_reading_counts_only_while_the_session_has_no_other_usage_record() -> None:
    """Codex's hook reads a turn's usage that its telemetry reports request by request: whichever
    arrives first, the session's totals are the telemetry's (never both); without telemetry, the
    hook's (in the reserved keys marked as a hook's, or the plain keys an earlier hook stored)."""
    hook = {"gen_ai.usage.input_tokens": 200, "gen_ai.usage.output_tokens": 20, "gz-ia.usage_from": "hook"}
    old_hook = {"input_tokens": 200, "output_tokens": 20}
    request = usage_attrs(input_tokens=100, output_tokens=10, cost_usd=0.5, model="gpt-x")
    # The turn made two requests: its hook's reading comes first, between them, or last.
    for order in ((hook, request, request), (request, hook, request), (request, request, old_hook)):
        both = UsageSum()
        for attrs in order:
            both.add(attrs)
        assert both.counted() == ((200, 20, 0, 0), 1.0)
    alone = UsageSum()
    assert alone.add(hook) == (((200, 20, 0, 0), 0.0, ""), True)
    alone.add(old_hook)
    assert (alone.counted(), alone.from_hooks) == (((400, 40, 0, 0), 0.0), True)
    assert reading_of(request) == (((100, 10, 0, 0), 0.5, "gpt-x"), False)
    assert reading_of({"tool": "Bash"}) is None
