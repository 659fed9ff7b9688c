"""A search decodes a candidate line only as far as the question reads it: the part must judge every
line exactly as the full event does, and refuse exactly what it refuses among the fields it holds.

The lines are written by hand: they are the shapes a collector no longer writes (``attrs`` as
``null``, an attribute ``null``) or never writes (FAILED without an error, a field of the wrong type),
which a real run cannot produce.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from gz_ia.client.schema import StoredEvent
from gz_ia.collector.query import Selection, parse_matches
from gz_ia.collector.query._fields import question_for
from gz_ia.collector.reading import Filters

_HEAD = '{"timestamp":"2026-12-01T12:00:00.5Z","session_id":"s","action":"a","stage":"READ","agent":"claude"'
LINES = [
    _HEAD + ',"status":"OK","attrs":{"tool":"Bash","n":3},"seq":1}',
    _HEAD + ',"status":"OK","attrs":{"tool":"Read"},"seq":2}',
    _HEAD + ',"status":"OK","attrs":null,"seq":3}',
    _HEAD + ',"status":"OK","attrs":{},"seq":4}',
    _HEAD + ',"status":"OK","attrs":{"tool":null,"flag":true,"n":3.0},"seq":5}',
    _HEAD + ',"status":"OK","attrs":{"x\\"tool":"Bash","flag":false},"seq":6}',
    _HEAD + ',"status":"OK","tool":"Bash","seq":7}',  # a field this reader does not know
    _HEAD + ',"status":"OK","role":"coder","attrs":{"gz-ia.cut_attrs":2},"seq":8}',
    _HEAD + ',"status":"FAILED","seq":9}',  # FAILED without an error: refused
    _HEAD + ',"status":"FAILED","error":"boom","seq":10}',
    _HEAD + ',"status":"OK","attrs":{"n":"3"},"seq":"eleven"}',  # seq of the wrong type: refused
    '{"timestamp":"2026-12-01T12:00:00","session_id":"s","action":"a","stage":"READ","agent":"c","status":"OK","seq":12}',
]
QUESTIONS = [
    ["attrs.tool=Bash"],
    ["attrs.tool=Bash", "attrs.tool=Read"],
    ["attrs.tool="],
    ["attrs.flag=true"],
    ["attrs.flag=False"],
    ["attrs.n=3"],
    ['attrs.x"tool=Bash'],
    ["attrs.gz-ia.cut_attrs=2"],
    ["attrs.tool=Bash", "attrs.n=3"],
    ["role=coder"],
    ["role="],
    ["status=failed"],
    ["stage=read", "attrs.tool=Read"],
    ["attrs=", "attrs.tool=Bash"],
    ["attrs="],
]


def _judged(decode: Callable[[bytes], Any], test: Callable[[Any], bool] | None, line: str) -> bool | str:
    try:
        event = decode(line.encode())
    except msgspec.DecodeError:
        return "refused"
    return test is None or test(event)


@pytest.mark.parametrize("fields", QUESTIONS)
def test_a_part_judges_every_line_as_the_full_event(fields: list[str]) -> None:
    selection = Selection(parse_matches(fields))
    decode, test = question_for(Filters(), selection)
    full = msgspec.json.Decoder(StoredEvent).decode
    for line in LINES:
        assert _judged(decode, test, line) == _judged(full, selection.test, line), (fields, line)


def test_a_part_holds_only_what_is_asked() -> None:
    decode, _test = question_for(Filters(), Selection(parse_matches(["attrs.tool=Bash"])))
    part = decode(LINES[0].encode())
    assert set(part.__struct_fields__) == {"timestamp", "status", "error", "attrs", "seq"}
    assert part.attrs.__struct_fields__ == ("a0",)
