"""The fleet's names: subjects, message ids, producers and a hub's sessions (pure functions)."""

from __future__ import annotations

from gz_ia.client.schema import MAX_SESSION_ID_LENGTH, is_safe_session_id
from gz_ia.collector.fleet.naming import hub_session_id, message_id, parse_subject, producer_of, subject
from gz_ia.collector.reading import host_of


def test_a_subject_names_the_machine_and_the_root_and_reads_back() -> None:
    assert subject("laptop", "0123456789ab") == "gzia.events.laptop.0123456789ab"
    assert parse_subject("gzia.events.laptop.0123456789ab") == ("laptop", "0123456789ab")
    assert parse_subject("gzia.events.laptop") is None
    assert parse_subject("other.events.laptop.x") is None
    assert parse_subject("gzia.events.a.b.c") is None


def test_a_resend_carries_the_same_id_and_the_same_producer() -> None:
    assert message_id("laptop", "r", "s1", 7) == message_id("laptop", "r", "s1", 7, 7) == "laptop/r/s1/7"
    assert message_id("laptop", "r", "s1", 7, 9) == "laptop/r/s1/7-9" != message_id("laptop", "r", "s1", 7, 8)
    producer = producer_of("laptop", "r")
    assert producer == producer_of("laptop", "r") != producer_of("runner", "r")
    assert len(producer) == 32 and all(ch in "0123456789abcdef" for ch in producer)


def test_a_hub_session_keeps_machines_apart_and_names_its_host() -> None:
    assert hub_session_id("laptop", "s1") == "laptop.s1" != hub_session_id("runner", "s1")
    assert host_of(hub_session_id("laptop", "a.b")) == "laptop"
    long_id = "x" * MAX_SESSION_ID_LENGTH
    shortened = hub_session_id("laptop", long_id)
    assert shortened == hub_session_id("laptop", long_id) and is_safe_session_id(shortened)
    assert host_of(shortened) == "laptop" and len(shortened) <= MAX_SESSION_ID_LENGTH
