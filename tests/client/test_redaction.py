"""The redaction rules on a corpus of secret shapes and of ordinary text, and on whole events."""

from __future__ import annotations

import json
import re
import string
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gz_ia.client.limits import MAX_ACTION_LENGTH
from gz_ia.client.redaction import DEFAULT_RULES, Redactor, Rule, default_patterns, parse_rules, spool_redactor
from gz_ia.client.schema import LogEvent

CORPUS = json.loads((Path(__file__).parents[1] / "fixtures" / "secrets" / "corpus.json").read_text())
SECRETS: list[dict[str, str]] = CORPUS["secrets"]
ORDINARY: list[str] = CORPUS["ordinary"]


@pytest.mark.parametrize("case", SECRETS, ids=[f"{case['rule']}-{index}" for index, case in enumerate(SECRETS)])
def test_each_secret_shape_is_replaced_by_its_rules_mark(case: dict[str, str]) -> None:
    """The secret is gone, its rule's mark stands in its place, and the text around it is kept."""
    counted: list[str] = []
    redacted = Redactor(on_redacted=counted.append).text(case["text"])
    assert case["secret"] not in redacted
    mark = f"[REDACTED:{case['rule']}]"
    assert redacted == case["text"].replace(case["secret"], mark)
    assert counted == [case["rule"]]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text: str) -> None:
    """Paths, commands, prose about tokens and passwords, ids: nothing is taken for a secret."""
    counted: list[str] = []
    assert Redactor(on_redacted=counted.append).text(text) == text
    assert counted == []


def test_every_default_rule_is_in_the_corpus() -> None:
    """The corpus holds at least one secret of every default rule, so that none goes untested."""
    assert {case["rule"] for case in SECRETS} == set(DEFAULT_RULES)


def test_redacting_twice_changes_nothing_and_counts_the_marks_found() -> None:
    """A redacted text (a client's spool) is stored as it is; its marks are counted under their rule."""
    counted: list[str] = []
    for case in SECRETS:
        once = Redactor().text(case["text"])
        assert Redactor(on_redacted=counted.append).text(once) == once
    assert counted == [case["rule"] for case in SECRETS]
    counted.clear()
    assert Redactor(on_redacted=counted.append).text("[REDACTED:made-up] x") == "[REDACTED:made-up] x"
    assert counted == ["other"]


def test_a_disabled_rule_is_left_out_and_an_unknown_name_refused() -> None:
    """``disable`` leaves a default rule out; a name that is no rule is an error naming the known ones."""
    key = "export sk-7hT3kP9qL2mX8vB4nR6wZ1yC5dF0gJ3s"
    assert Redactor(disable=["openai-key"]).text(key) == key
    assert Redactor(disable=["jwt"]).text(key) == "export sk-[REDACTED:openai-key]"
    with pytest.raises(ValueError, match="no default redaction rule named nope"):
        Redactor(disable=["nope"])


def test_rules_of_ones_own_replace_the_match_or_its_value_group() -> None:
    """A configured rule without a ``value`` group replaces its whole match; with one, that group."""
    rules = parse_rules("internal=itk_[0-9a-f]{8}\n\nticket=TCK-(?P<value>[0-9]{6})\n")
    assert rules == [Rule("internal", "itk_[0-9a-f]{8}"), Rule("ticket", "TCK-(?P<value>[0-9]{6})")]
    counted: list[str] = []
    redactor = Redactor(rules, on_redacted=counted.append)
    assert redactor.text("a itk_0123abcd b TCK-123456") == "a [REDACTED:internal] b TCK-[REDACTED:ticket]"
    assert counted == ["internal", "ticket"]
    assert redactor.text("[REDACTED:ticket]") == "[REDACTED:ticket]"
    for bad in ("Bad=x", "empty=a*", "broken=("):
        with pytest.raises(ValueError, match="redaction rule"):
            parse_rules(bad)


def _event(**fields: Any) -> LogEvent:
    base: dict[str, Any] = {
        "timestamp": datetime(2026, 12, 1, tzinfo=UTC),
        "session_id": "s1",
        "action": "Bash",
        "stage": "PENDING",
        "status": "OK",
        "agent": "claude",
    }
    return LogEvent(**(base | fields))


def test_an_event_is_redacted_in_every_free_text_field_and_kept_within_its_limits() -> None:
    """action, agent, role, error, attrs keys and values are redacted; the rest is the same; the
    marks never push a field past its limit."""
    secret = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # noqa: S105 - a fake, shaped like a real one
    event = _event(
        action="x" * (MAX_ACTION_LENGTH - 20) + " password=hunter2xyz",
        role=f"r {secret}",
        status="FAILED",
        error=f"401 for {secret}",
        attrs={"command": f"curl -H 'Authorization: Bearer {secret[4:]}'", secret: 1, "exit": 2},
        cycle="toolu_1",
    )
    redacted = Redactor().event(event)
    encoded = msgspec.json.encode(redacted)
    assert secret[4:].encode() not in encoded
    assert b"hunter2xyz" not in encoded
    assert len(redacted.action) == MAX_ACTION_LENGTH
    assert redacted.attrs is not None
    assert redacted.attrs["exit"] == 2
    assert redacted.attrs["ghp_[REDACTED:github-token]"] == 1
    assert (redacted.session_id, redacted.cycle, redacted.stage, redacted.timestamp) == (
        "s1",
        "toolu_1",
        event.stage,
        event.timestamp,
    )
    clean = _event()
    assert Redactor().event(clean) is clean


def test_the_spool_redactor_follows_the_environment() -> None:
    """The client's spool redacts with the defaults, the environment's rules, and not at all when off."""
    assert spool_redactor({}) is not None
    assert spool_redactor({"GZ_IA_REDACTION_ENABLED": "false"}) is None
    own = spool_redactor({"GZ_IA_REDACTION_PATTERNS": "internal=itk_[0-9a-f]{8}"})
    assert own is not None
    assert own.text("itk_0123abcd") == "[REDACTED:internal]"
    unparsable = spool_redactor({"GZ_IA_REDACTION_PATTERNS": "no name"})
    assert unparsable is not None
    assert unparsable.text("ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8") == "ghp_[REDACTED:github-token]"


OVERLAPPING: list[dict[str, Any]] = CORPUS["overlapping"]


@pytest.mark.parametrize("case", OVERLAPPING, ids=[str(index) for index in range(len(OVERLAPPING))])
def test_overlapping_matches_leave_no_part_of_any_in_clear(case: dict[str, Any]) -> None:
    """Where rules' matches overlap, their union is masked (one mark, named by the match that starts
    first); matches that only touch keep a mark each. Each mark written is counted once."""
    counted: list[str] = []
    redacted = Redactor(on_redacted=counted.append).text(case["text"])
    assert redacted == case["redacted"]
    for secret in case["secrets"]:
        assert secret not in redacted
    assert counted == re.findall(r"\[REDACTED:([a-z0-9-]+)\]", case["redacted"])
    assert Redactor().text(redacted) == redacted


_SECRET_TEXTS = [case["text"] for case in SECRETS] + [case["text"] for case in OVERLAPPING]
_JOINS = st.sampled_from(["", " ", "\n", ":", "=", "-", "_", "'", '"', "/", "@", ";", "&", "--", " -u ", "A"])
_NOISE = st.text(alphabet=string.ascii_letters + string.digits + " -_:=/.@'\"\n", max_size=30)


@st.composite
def _mixed_texts(draw: st.DrawFn) -> str:
    """Secrets of every default rule among noise and each other: overlapping, adjacent, prefixed."""
    pieces = draw(st.lists(st.one_of(st.sampled_from(_SECRET_TEXTS), _NOISE), min_size=1, max_size=5))
    text = pieces[0]
    for piece in pieces[1:]:
        text += draw(_JOINS) + piece
    return text


_PATTERNS = [(rule.name, re.compile(rule.pattern)) for rule in default_patterns()]


@given(_mixed_texts())
def test_nothing_any_single_rule_matches_survives(text: str) -> None:
    """Whatever the mix, each default rule searched alone over the original finds nothing that
    the redacted text still holds; and redacting the result again changes nothing."""
    redacted = Redactor().text(text)
    covered = [
        match.span("value") if match.start("value") >= 0 else match.span()
        for _, pattern in _PATTERNS
        for match in pattern.finditer(text)
    ]
    for name, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            value = match["value"] if match.start("value") >= 0 else match.group()
            if len(value) < 8:
                continue
            # The same characters may stand elsewhere in the text outside every match (a piece
            # cut from its prefix): only those may be left.
            clear = sum(
                1
                for start in _occurrences(text, value)
                if not any(start < end and start + len(value) > begin for begin, end in covered)
            )
            assert len(_occurrences(redacted, value)) <= clear, f"{name} match {value!r} survived in {redacted!r}"
    assert Redactor().text(redacted) == redacted


def _occurrences(text: str, part: str) -> list[int]:
    found, start = [], text.find(part)
    while start >= 0:
        found.append(start)
        start = text.find(part, start + 1)
    return found


def test_a_batch_is_redacted_as_its_events_one_by_one() -> None:
    """``events`` gives what ``event`` gives each event (None stays None), counts the same, and a
    clean agent remembered from one event does not let a mark in another's agent go uncounted."""
    secret = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # noqa: S105 - a fake, shaped like a real one
    batch: list[LogEvent | None] = [
        _event(),
        None,
        _event(action=f"push {secret}"),
        _event(),
        _event(agent="[REDACTED:made-up]"),
        _event(agent="[REDACTED:made-up]"),
        _event(role="planner"),
        _event(attrs={"cmd": f"export T={secret}"}),
        _event(),
    ]
    one_by_one: list[str] = []
    single = Redactor(on_redacted=one_by_one.append)
    expected = [None if event is None else single.event(event) for event in batch]
    counted: list[str] = []
    redacted = Redactor(on_redacted=counted.append).events(batch)
    assert redacted == expected
    assert counted == one_by_one == ["github-token", "other", "other", "github-token"]
    assert redacted[0] is batch[0]
    assert redacted[1] is None
