"""The root-wide search finds lines by their bytes before decoding them: it must find exactly what
the careful reader finds, event by event, through every way a text can be spelt in the stored JSON.

A real collector writes the sessions (rotating every few events, so most lines are in gzip
archives); each question is answered by :func:`gz_ia.collector.query.search` and by the reader
session by session (every line decoded, the selection tested on each event), and both answers, their
cursors and the gaps they name must be the same. What ``--json`` prints (:func:`search_lines`: the
stored bytes, no entry made) must be those lines in the answer's order, byte for byte: by time, at
equal times by session id then seq, also where sessions interleave, tie, or store a time out of order.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_for

from gz_ia.client import build_event
from gz_ia.collector import reading
from gz_ia.collector.query import Selection, compile_grep, parse_matches, search, search_lines

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
    "token ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8 leaked",  # stored redacted
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
    ("REDACTED", []),
    ("ghp_A1b2C3d4E5f6", []),  # the secret itself was never stored
    (None, ["attrs.n=3"]),
    (None, ["attrs.tool=Bash", "stage=READ"]),
    (None, ["session_id=i1", "attrs.tool=Bash"]),
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
    # Two sessions written in turn: their times interleave, tie in pairs, and one goes backwards.
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for step in range(12):
        for name in ("i1", "i0"):
            moment = start + timedelta(seconds=step // 2)
            if name == "i0" and step == 7:
                moment = start - timedelta(seconds=1)
            attrs: dict[str, bool | int | float | str] = {"tool": TOOLS[step % 2], "output": TEXTS[step], "n": step}
            client.send(
                build_event(
                    session_id=name, action=f"turn {step}", stage="READ", agent="claude", attrs=attrs, timestamp=moment
                )
            )
    client.close()
    collector.stop()
    archives = sorted((collector.root / "sessions").glob("s3.*.gz"))
    assert len(archives) > 2, archives  # it rotated into gzip archives
    archives[1].write_bytes(b"not gzip")  # damage: s3 is read the careful way, and its gap named
    return Path(collector.root)


def _damaged(fields: list[str]) -> set[str]:
    """The damaged session, when the question may read it (``session_id=`` names the others)."""
    return set() if any(field.startswith("session_id=") for field in fields) else {"s3"}


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
        (gap.session_id, gap.first, gap.last) for gap in expected_gaps if gap.session_id in _damaged(fields)
    ]


@pytest.fixture(name="stored", scope="module")
def _stored(root: Path) -> dict[str, list[reading.Entry]]:
    """Every session's events read the careful way, in seq order (read once for every question)."""
    return {
        summary.session_id: list(reading.iter_events(root, summary.session_id))
        for summary in reading.list_sessions(root)
    }


def _in_order(stored: dict[str, list[reading.Entry]], selection: Selection, count: int | None) -> list[str]:
    """The careful answer: every session in id order, its matches in seq order (its ``count``
    newest), all sorted by time (stable), then the last ``count``."""
    found: list[reading.Entry] = []
    for session_id in sorted(stored):
        matches = [entry for entry in stored[session_id] if selection.test(entry.event)]
        found.extend(matches if count is None else matches[-count:] if count else [])
    found.sort(key=lambda entry: entry.event.timestamp)
    if count is not None:
        found = found[-count:] if count else []
    return [entry.line for entry in found]


@pytest.mark.parametrize(("grep", "fields"), QUESTIONS)
def test_json_prints_the_stored_lines_in_the_answers_order(
    root: Path, stored: dict[str, list[reading.Entry]], grep: str | None, fields: list[str]
) -> None:
    """The lines written as bytes are the careful answer's, in its order, and gaps are still named."""
    selection = Selection(parse_matches(fields), compile_grep(grep) if grep is not None else None)
    for count, reverse in [(None, False), (None, True), (3, False), (2, True), (0, False)]:
        expected = _in_order(stored, selection, count)
        if reverse:
            expected.reverse()
        gaps: list[reading.Gap] = []
        printed = b"".join(
            search_lines(root, reading.Filters(), selection, count=count, reverse=reverse, on_gap=gaps.append)
        )
        assert printed == "".join(line + "\n" for line in expected).encode(), (count, reverse)
        assert {gap.session_id for gap in gaps} == _damaged(fields)
        entries = search(root, reading.Filters(), selection, count=count, reverse=reverse)
        assert [entry.line for entry in entries] == expected, (count, reverse)


def test_gz_ia_logs_json_prints_them_and_names_the_gap(root: Path, stored: dict[str, list[reading.Entry]]) -> None:
    """Through the command line: the same bytes, the gap said on stderr, exit 3."""
    command = [sys.executable, "-c", "from gz_ia.collector.entry import main; main()", "--root", str(root), "logs"]
    for question in (["attrs.tool=Bash"], ["-g", "failed"]):
        done = subprocess.run([*command, *question, "--json"], capture_output=True, timeout=60, check=False)
        selection = selection_of(question)
        assert done.stdout == "".join(line + "\n" for line in _in_order(stored, selection, None)).encode()
        assert done.returncode == 3, done.stderr
        assert b"s3" in done.stderr


def selection_of(question: list[str]) -> Selection:
    if question[0] == "-g":
        return Selection(grep=compile_grep(question[1]))
    return Selection(parse_matches(question))


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
    # Archives are compressed after the rotation that makes them, off the write path.
    wait_for(lambda: len(list((root / "sessions").glob("q.*.gz"))) >= 2, message="two compressed archives")
    cursors = {entry.event.seq: entry.cursor for entry in reading.iter_events(root, "q")}
    for seq in [2, 7, 8, 9, 24, 26, 27, 50, 70, 79, 80, 81]:
        cursor = reading.cursor_before(root, "q", seq)
        after = [entry.event.seq for entry in reading.iter_events(root, "q", cursor=cursor)]
        assert after == list(range(seq, 81)), seq
        if seq not in (26, 51, 76):  # the first of a segment: its start, not the end of the one before
            assert cursor == cursors[seq - 1], seq
    assert reading.cursor_before(root, "q", 1) is None
