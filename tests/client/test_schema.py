"""The msgspec LogEvent is the published JSON schema, only narrowed."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gz_ia.client import schema
from gz_ia.client.schema import LogEvent, Stage, Status, StoredEvent, is_safe_session_id

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = json.loads((REPO / "docs" / "logevent.schema.json").read_text())


def _generated() -> dict[str, object]:
    (schema,), components = msgspec.json.schema_components([LogEvent])
    ref = str(schema["$ref"]).rsplit("/", 1)[-1]
    return dict(components[ref])


SCHEMA_SHA256 = "c376435dec332db03e7b120152f925400bb1dbe236eb718665ac4b4d6c6b1b9f"
"""The published schema as the design defined it: LogEvent narrows it, never edits it."""


def test_the_published_schema_is_verbatim() -> None:
    """docs/logevent.schema.json is the design's schema, byte for byte."""
    published = (REPO / "docs" / "logevent.schema.json").read_bytes()
    assert hashlib.sha256(published).hexdigest() == SCHEMA_SHA256
    assert PUBLISHED["title"] == "LogEvent"


def test_required_fields_match() -> None:
    """LogEvent requires exactly the fields the published schema requires."""
    required = _generated()["required"]
    assert isinstance(required, list)
    assert set(required) == set(PUBLISHED["required"])


def test_every_published_property_exists_with_the_same_type() -> None:
    """Each published property is a field of the same JSON type (and enum), optional ones nullable only in Python."""
    generated = _generated()["properties"]
    assert isinstance(generated, dict)
    for name, spec in PUBLISHED["properties"].items():
        assert name in generated, name
        ours = generated[name]
        variants = ours.get("anyOf", [ours])
        types = {variant.get("type") for variant in variants if variant.get("type") != "null"}
        if "$ref" in str(variants):
            types = {"string"}  # Stage and Status are string enums
        assert spec["type"] in types, (name, ours)
    assert {stage.value for stage in Stage} == set(PUBLISHED["properties"]["stage"]["enum"])
    assert {status.value for status in Status} == set(PUBLISHED["properties"]["status"]["enum"])


def test_unset_optional_fields_are_omitted_not_null() -> None:
    """omit_defaults keeps None out of the JSON: the schema types optional fields as strings."""
    event = LogEvent(
        timestamp=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        session_id="s1",
        action="a",
        stage=Stage.READ,
        status=Status.OK,
        agent="agy",
    )
    encoded = json.loads(msgspec.json.encode(event))
    assert encoded == {
        "timestamp": "2026-01-02T03:04:05Z",
        "session_id": "s1",
        "action": "a",
        "stage": "READ",
        "status": "OK",
        "agent": "agy",
    }


def test_failed_requires_an_error() -> None:
    """A FAILED event without an error cannot be built or decoded."""
    with pytest.raises(ValueError, match="requires a non-empty error"):
        LogEvent(
            timestamp=datetime.now(UTC),
            session_id="s",
            action="a",
            stage=Stage.FINISH,
            status=Status.FAILED,
            agent="a",
        )
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(
            b'{"timestamp":"2026-01-01T00:00:00Z","session_id":"s","action":"a","stage":"FINISH",'
            b'"status":"FAILED","agent":"a","error":""}',
            type=LogEvent,
        )


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        ("3f9a12c8", True),
        ("sub_9c2d14e7", True),
        ("a.b-c_d", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        (".hidden", False),
        ("..", False),
        ("../etc", False),
        ("a/b", False),
        ("a\x00b", False),
        ("ok\n", False),
        ("/abs", False),
        ("é", False),
    ],
)
def test_session_id_safety(value: str, safe: bool) -> None:
    """Session ids that could become a path outside the root are unsafe, by function and by schema."""
    assert is_safe_session_id(value) is safe
    document = {
        "timestamp": "2026-01-01T00:00:00Z",
        "session_id": value,
        "action": "a",
        "stage": "READ",
        "status": "OK",
        "agent": "a",
    }
    try:
        msgspec.json.decode(json.dumps(document), type=LogEvent)
    except msgspec.ValidationError:
        decoded = False
    else:
        decoded = True
    assert decoded is safe


def test_stored_event_reads_a_stored_line() -> None:
    """A line the collector wrote decodes as StoredEvent with seq and delivery."""
    line = (
        b'{"timestamp":"2026-01-01T00:00:00Z","session_id":"s","action":"a","stage":"READ",'
        b'"status":"OK","agent":"a","seq":7,"delivery":"ab:3","future_field":1}'
    )
    stored = msgspec.json.decode(line, type=StoredEvent)
    assert (stored.seq, stored.delivery) == (7, "ab:3")


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
        (2**64, "18446744073709551616"),
        (2**63, "9223372036854775808"),
        (-(2**63) - 1, "-9223372036854775809"),
        (10**30, "1" + "0" * 30),
    ],
)
def test_storable_turns_what_json_cannot_carry_into_a_string(value: Any, stored: str) -> None:
    """NaN, the infinities and ints past the signed 64-bit range: strings a reader shows; the event
    built from them decodes as the collector decodes it."""
    assert schema.storable(value) == stored
    event = schema.fit_event(
        LogEvent(
            timestamp=datetime.now(UTC), session_id="s", action="a", stage=Stage.READ,
            status=Status.OK, agent="g", attrs={"v": value},
        )
    )  # fmt: skip
    assert event.attrs == {"v": stored}
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(event), type=LogEvent).attrs == {"v": stored}


@pytest.mark.parametrize("value", [True, False, 0, 2**63 - 1, -(2**63), 1.5, -0.0, "NaN", "x", None, [1]])
def test_storable_leaves_every_other_value_as_it_is(value: Any) -> None:
    """What the schema takes as it is stays the very object (no copy on the hot path)."""
    assert schema.storable(value) is value


def test_storable_writes_an_int_too_long_for_decimal_in_hexadecimal() -> None:
    """Past Python's bound on int-to-decimal conversion, hexadecimal: exact, and never an exception."""
    value = 1 << 20_000
    assert schema.storable(value) == hex(value)


@pytest.mark.parametrize(
    "nanoseconds",
    [
        0,
        999,
        1_000,
        999_999_999,
        1_700_000_000_000_000_000,
        1_700_000_000_999_999_999,
        4_102_444_799_999_999_000,
        -1_000_000,
        (1 << 34) * 10**9 + 5_000,
    ],
)
def test_log_stamps_the_exact_microsecond(nanoseconds: int) -> None:
    """``log()``'s stamp reads back as the time cut to its microsecond, in UTC, exactly."""
    from datetime import timedelta

    exact = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=nanoseconds // 1000)
    stamp = _stamp_read_back(nanoseconds)
    assert stamp == exact
    assert stamp.utcoffset() == timedelta(0)


def _stamp_read_back(nanoseconds: int) -> datetime:
    from gz_ia.client._client import _timestamp

    return msgspec.msgpack.decode(msgspec.msgpack.encode(_timestamp(nanoseconds)), type=datetime)


def test_log_stamps_the_bytes_msgspec_writes_for_the_datetime() -> None:
    """The stamp made from integers is the MessagePack timestamp msgspec writes for that datetime
    (its 8-byte form, whenever the time has a fraction of a second)."""
    from datetime import timedelta

    from gz_ia.client._client import _timestamp

    nanoseconds = 1_700_000_000_123_456_789
    exact = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=nanoseconds // 1000)
    assert msgspec.msgpack.encode(_timestamp(nanoseconds)) == msgspec.msgpack.encode(exact)


def test_log_stamps_the_exact_microsecond_across_a_century() -> None:
    """Spread over 1970-2100, so that a slip in the arithmetic would show."""
    import random
    from datetime import timedelta

    draw = random.Random(28)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for _ in range(20_000):
        nanoseconds = draw.randrange(0, 4_102_444_800 * 10**9)
        assert _stamp_read_back(nanoseconds) == epoch + timedelta(microseconds=nanoseconds // 1000), nanoseconds
