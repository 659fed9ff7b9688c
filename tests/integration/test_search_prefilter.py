"""The root-wide search finds lines by their bytes before decoding them: it must find exactly what
the careful reader finds, event by event, through every way a text can be spelt in the stored JSON.

A real collector writes the sessions (rotating every few events, so most lines are in gzip
archives); each question is answered by :func:`gz_ia.collector.query.search` and by the reader
session by session (every line decoded, the selection tested on each event), and both answers, their
cursors and the gaps they name must be the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gz_ia.client import build_event
from gz_ia.collector import reading
from gz_ia.collector.query import Selection, compile_grep, parse_matches, search

TEXTS = [
    "tests failed",
    "Tests FAILED in CI",
    'she said "tests failed"',
    "path C:\\tmp\\tests failed",
    "line one\nline two",
    "tab\there",
    "café crème",
    "CAFÉ CRÈME",
    "te\u017fts failed",  # long s: a case-insensitive "s" matches it
    "\u212aelvin",  # Kelvin sign: a case-insensitive "k" matches it
    "control \x1f char",
    "emoji \U0001f600 done",
    "WebFetch",
    "webfetch",
    "nothing here",
]
TOOLS = ["Bash", "Read", "WebFetch", 'Quote"d', "Back\\slash", "Ünïcode"]

QUESTIONS: list[tuple[str | None, list[str]]] = [
    ("tests failed", []),
    ("TESTS", []),
    ("Tests FAILED", []),
    ('"tests', []),  # the needle starts inside a JSON escape
    ('d "t', []),
    ("\\\\tmp", []),  # a regex for a backslash: "\\" in JSON
    ("one\ntwo", []),
    ("one\\ntwo", []),  # the regex escape for a newline
    ("\t", []),
    ("café", []),
    ("CAFÉ", []),
    ("crème", []),
    ("kelvin", []),
    ("\x1f", []),
    ("\U0001f600", []),
    ("webfetch", []),
    ("WebFetch", []),
    ("web.etch", []),
    ("fail(ed|ure)", []),
    ("a|b", []),
    ("(?i)TESTS F", []),
    (None, ["attrs.tool=Bash"]),
    (None, ["attrs.tool=WebFetch"]),
    (None, ['attrs.tool=Quote"d']),
    (None, ["attrs.tool=Back\\slash"]),
    (None, ["attrs.tool=Ünïcode"]),
    ("failed", ["attrs.tool=Bash"]),
    ("FAILED", ["attrs.tool=Read", "attrs.tool=WebFetch"]),
]


def _careful(root: Path, selection: Selection, gaps: list[reading.Gap]) -> list[tuple[str, str]]:
    found = []
    for summary in reading.list_sessions(root):
        for entry in reading.iter_events(root, summary.session_id, on_gap=gaps.append):
            if selection.test(entry.event):
                found.append((entry.cursor, entry.line))
    return sorted(found)


@pytest.fixture(name="root", scope="module")
def _root(make_module_collector: Any) -> Path:
    collector = make_module_collector()
    collector.write_config("[rotation]\nmax_events = 4\n")
    collector.restart()
    client = collector.client()
    for number in range(4):
        for index, text in enumerate(TEXTS):
            tool = TOOLS[(index + number) % len(TOOLS)]
            client.send(
                build_event(
                    session_id=f"s{number}",
                    action=f"step {index}",
                    stage="READ",
                    agent="claude",
                    attrs={"tool": tool, "output": text, "n": index},
                )
            )
    client.close()
    collector.stop()
    archives = sorted((collector.root / "sessions").glob("s3.*.gz"))
    assert len(archives) > 2, archives  # it rotated into gzip archives
    archives[1].write_bytes(b"not gzip")  # damage: s3 is read the careful way, and its gap named
    return Path(collector.root)


@pytest.mark.parametrize(("grep", "fields"), QUESTIONS)
def test_the_search_finds_what_the_reader_finds(root: Path, grep: str | None, fields: list[str]) -> None:
    """Same lines, same cursors, same gaps as decoding every line, whatever the needle's spelling."""
    selection = Selection(parse_matches(fields), compile_grep(grep) if grep is not None else None)
    expected_gaps: list[reading.Gap] = []
    expected = _careful(root, selection, expected_gaps)
    gaps: list[reading.Gap] = []
    answer = search(root, reading.Filters(), selection, on_gap=gaps.append)
    found = sorted((entry.cursor, entry.line) for entry in answer)
    assert found == expected
    assert {gap.session_id for gap in expected_gaps} == {"s3"}  # the damage
    assert [(gap.session_id, gap.first, gap.last) for gap in gaps] == [
        (gap.session_id, gap.first, gap.last) for gap in expected_gaps
    ]


def test_seq_is_found_by_its_bytes_as_the_reader_finds_it(make_collector: Any) -> None:
    """``--seq N`` finds its line by ``"seq":N`` in the bytes: an attribute named ``seq`` holding N,
    and a greater seq starting with N's digits (``"seq":70`` for 7), are passed over, in archives
    and in the active file alike."""
    collector = make_collector()
    collector.write_config("[rotation]\nmax_events = 25\n")
    collector.restart()
    client = collector.client()
    for index in range(80):
        attrs: dict[str, bool | int | float | str] = {"seq": (index + 5) % 80 + 1, "text": f'"seq":{index % 9}'}
        client.send(build_event(session_id="q", action=f"a{index}", stage="READ", agent="claude", attrs=attrs))
    client.close()
    root = Path(collector.root)
    assert len(list((root / "sessions").glob("q.*.gz"))) >= 2
    cursors = {entry.event.seq: entry.cursor for entry in reading.iter_events(root, "q")}
    for seq in [2, 7, 8, 9, 24, 26, 27, 50, 70, 79, 80, 81]:
        cursor = reading.cursor_before(root, "q", seq)
        after = [entry.event.seq for entry in reading.iter_events(root, "q", cursor=cursor)]
        assert after == list(range(seq, 81)), seq
        if seq not in (26, 51, 76):  # the first of a segment: its start, not the end of the one before
            assert cursor == cursors[seq - 1], seq
    assert reading.cursor_before(root, "q", 1) is None
