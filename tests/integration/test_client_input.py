"""The client survives anything an agent hands it: oversized fields, unsendable events, invalid ids."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import gz_ia.client as gz
from gz_ia.client import EventRejected, RejectReason, build_event
from gz_ia.client.schema import (
    MAX_ACTION_LENGTH,
    MAX_AGENT_LENGTH,
    MAX_ATTR_KEY_LENGTH,
    MAX_ATTR_STRING_LENGTH,
    MAX_ATTRS,
    MAX_ERROR_LENGTH,
)

CUT_ATTRS_KEY = "gz-ia.cut_attrs"


def _is_cut(text: str, limit: int) -> bool:
    return len(text) == limit and "…[cut, " in text and text.endswith(" chars]")


def test_oversized_fields_are_cut_and_marked_and_delivery_goes_on(collector: Any, schema_validator: Any) -> None:
    """Fields past their limits are cut on the client, marked, and delivered; nothing after them is lost."""
    client = collector.client()
    with gz.session("big", agent="agy", client=client) as scope:
        scope.log("before", "READ")
        with scope.action("Huge failure") as act:
            act.fail("y" * 2_000_000)
        with pytest.raises(ValueError, match="huge"), scope.action("Huge exception"):
            raise ValueError("huge " + "z" * 100_000)
        scope.log("a" * 5_000, "READ", attrs={f"k{n}": "v" * 5_000 for n in range(MAX_ATTRS + 8)})
        scope.log("after", "READ")
    verdict = client.send(
        build_event(session_id="big", action="sent", stage="READ", agent="agy", error="E" * 1_100_000)
    )
    assert verdict.seq > 0
    client.log(session_id="big", action="logged", stage="READ", agent="g" * 1_000, attrs={"k" * 100: 1})
    assert client.flush(timeout=20)
    stats = client.stats()
    client.close()
    assert stats.rejected == 0 and stats.dropped == 0 and stats.invalid == 0, stats
    lines = collector.session_lines("big")
    for line in lines:
        schema_validator.validate(line)
    assert [line["action"][:12] for line in lines] == [
        "before",
        "Huge failure",
        "Huge failure",
        "Huge excepti",
        "Huge excepti",
        "a" * 12,
        "after",
        "sent",
        "logged",
    ]
    assert _is_cut(lines[2]["error"], MAX_ERROR_LENGTH) and lines[2]["error"].startswith("yyy")
    assert _is_cut(lines[4]["error"], MAX_ERROR_LENGTH) and lines[4]["error"].startswith("ValueError: huge zzz")
    assert _is_cut(lines[5]["action"], MAX_ACTION_LENGTH)
    attrs = lines[5]["attrs"]
    assert len(attrs) == MAX_ATTRS and attrs[CUT_ATTRS_KEY] == 9
    assert all(_is_cut(value, MAX_ATTR_STRING_LENGTH) for key, value in attrs.items() if key != CUT_ATTRS_KEY)
    assert _is_cut(lines[7]["error"], MAX_ERROR_LENGTH)
    assert _is_cut(lines[8]["agent"], MAX_AGENT_LENGTH)
    (key,) = lines[8]["attrs"]
    assert len(key) == MAX_ATTR_KEY_LENGTH and key.startswith("kkk")
    assert not collector.rejects()


def test_an_event_too_large_for_any_frame_is_refused_alone_counted_and_reported(collector: Any) -> None:
    """An event no frame can carry is refused by itself, counted, reported in its session; the next one goes."""
    client = collector.client()
    # Not a valid attribute value: nothing on the client can cut it.
    blob: dict[str, Any] = {"b": ["x" * 1_000] * 2_000}
    with pytest.raises(EventRejected) as caught:
        client.send(build_event(session_id="blob", action="sent", stage="READ", agent="agy", attrs=blob))
    assert caught.value.reason is RejectReason.FRAME_TOO_LARGE
    client.log(session_id="blob", action="logged", stage="READ", agent="agy", attrs=blob)
    assert client.send(build_event(session_id="blob", action="next", stage="READ", agent="agy")).seq > 0
    assert client.flush(timeout=20)
    stats = client.stats()
    client.close()
    assert stats.rejected == 2 and stats.dropped == 0
    assert "frame_too_large" in (stats.last_error or "")
    lines = collector.session_lines("blob")
    assert [line["action"] for line in lines if not line["action"].startswith("gz-ia.dropped")] == ["next"]
    notices = [line for line in lines if line["action"].startswith("gz-ia.dropped") and line["stage"] == "FINISH"]
    assert sum(line["attrs"]["dropped"] for line in notices) == 2
    assert all(line["attrs"]["reason"] == "frame_too_large" for line in notices)


CHILD = """
import gz_ia.client as gz
for name in ("first", "second"):
    with gz.session(name, agent="child") as scope:
        scope.log("work", "READ")
print(gz.get_client().stats().accepted if gz.get_client().flush(20) else "not flushed")
"""


def test_an_invalid_inherited_parent_is_reported_once_and_ignored(collector: Any) -> None:
    """A child process handed GZ_IA_PARENT_SESSION_ID='bad/id' warns once and delivers its sessions unparented."""
    environment = {**collector.env, "GZ_IA_PARENT_SESSION_ID": "bad/id"}
    result = subprocess.run(
        [sys.executable, "-c", CHILD], env=environment, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "2"
    assert result.stderr.count("GZ_IA_PARENT_SESSION_ID") == 1, result.stderr
    assert "'bad/id'" in result.stderr
    for name in ("first", "second"):
        (line,) = collector.session_lines(name)
        assert "parent_session_id" not in line
    assert not collector.rejects()


def test_the_sender_thread_refuses_an_oversized_event_that_reached_its_queue(collector: Any) -> None:
    """The frame builder's own defence: a body past the bound that got into the queue by any path is
    refused alone, and the events around it are delivered (white box: submit() lets none in)."""
    from gz_ia.client._queue import Item
    from gz_ia.client.protocol import MAX_EVENT_BYTES

    client = collector.client()
    client.log(session_id="inside", action="before", stage="READ", agent="agy")
    client._sender.inbox.append(Item(b"\x80" * (MAX_EVENT_BYTES + 1_000), "inside"))
    assert client.send(build_event(session_id="inside", action="after", stage="READ", agent="agy")).seq > 0
    assert client.flush(timeout=20)
    stats = client.stats()
    client.close()
    assert stats.rejected == 1 and "frame_too_large" in (stats.last_error or "")
    lines = collector.session_lines("inside")
    assert [line["action"] for line in lines][:2] == ["before", "after"]
    assert [line["attrs"] for line in lines if line["stage"] == "FINISH"] == [
        {"dropped": 1, "reason": "frame_too_large"}
    ]
