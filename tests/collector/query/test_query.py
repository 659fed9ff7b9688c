"""The query language of the reading commands: time expressions, field matches, --grep's smart case."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gz_ia.client.schema import Stage, Status, StoredEvent
from gz_ia.collector.query import (
    Selection,
    SessionQuery,
    compile_grep,
    parse_matches,
    parse_seq_range,
    parse_span,
    parse_time,
    select_sessions,
)
from gz_ia.collector.reading import SessionSummary

NOW = datetime(2026, 12, 1, 12, 30, 15, tzinfo=UTC)
PARIS = timezone(timedelta(hours=1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("today", datetime(2026, 12, 1, tzinfo=UTC)),
        ("yesterday", datetime(2026, 11, 30, tzinfo=UTC)),
        ("tomorrow", datetime(2026, 12, 2, tzinfo=UTC)),
        ("-1h", NOW - timedelta(hours=1)),
        ("-15min", NOW - timedelta(minutes=15)),
        ("+5min", NOW + timedelta(minutes=5)),
        ("1h 30min ago", NOW - timedelta(minutes=90)),
        ("2 days ago", NOW - timedelta(days=2)),
        ("10m", NOW - timedelta(minutes=10)),
        ("7d", NOW - timedelta(days=7)),
        ("2026-12-01 10:00", datetime(2026, 12, 1, 10, tzinfo=UTC)),
        ("2026-12-01 10:00:05", datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC)),
        ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),
        ("10:00", datetime(2026, 12, 1, 10, tzinfo=UTC)),
        ("2026-12-01T10:00:00Z", datetime(2026, 12, 1, 10, tzinfo=UTC)),
        ("2026-12-01T11:00:00+01:00", datetime(2026, 12, 1, 10, tzinfo=UTC)),
        ("2026-12-01 10:00 UTC", datetime(2026, 12, 1, 10, tzinfo=UTC)),
        ("@1764583200", datetime(2025, 12, 1, 10, tzinfo=UTC)),
        ("1764583200.5", datetime(2025, 12, 1, 10, 0, 0, 500_000, tzinfo=UTC)),
    ],
)
def test_parse_time_accepts_journalctl_forms(text: str, expected: datetime) -> None:
    """Each of journalctl's forms, the ages of earlier versions, epochs and RFC 3339 name the right instant."""
    assert parse_time(text, now=NOW, tz=UTC) == expected


def test_days_and_wall_clock_times_are_in_the_given_zone() -> None:
    """today, yesterday and times without an offset are wall-clock times of the zone; offsets win."""
    assert parse_time("today", now=NOW, tz=PARIS) == datetime(2026, 12, 1, tzinfo=PARIS)
    late = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)  # already 2 December in Paris
    assert parse_time("yesterday", now=late, tz=PARIS) == datetime(2026, 12, 1, tzinfo=PARIS)
    assert parse_time("2026-12-01 10:00", now=NOW, tz=PARIS) == datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert parse_time("2026-12-01 10:00 UTC", now=NOW, tz=PARIS) == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert parse_time("2026-12-01T10:00:00Z", now=NOW, tz=PARIS) == datetime(2026, 12, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize("text", ["", "yesterday-ish", "-1 fortnight", "+", "2026-13-01", "soon", "-h"])
def test_parse_time_rejects_other_text(text: str) -> None:
    """Anything else is a ValueError that lists the accepted forms."""
    with pytest.raises(ValueError, match="is not a time"):
        parse_time(text, now=NOW, tz=UTC)


@given(
    amount=st.integers(min_value=0, max_value=10**5),
    unit=st.sampled_from([("s", 1), ("sec", 1), ("min", 60), ("m", 60), ("h", 3600), ("hours", 3600), ("d", 86400)]),
    sign=st.sampled_from(["-", "+", ""]),
)
def test_relative_times_are_now_plus_or_minus_the_span(amount: int, unit: tuple[str, int], sign: str) -> None:
    """-N unit and a bare N unit are that long before now; +N unit is that long after."""
    expected = timedelta(seconds=amount * unit[1])
    moment = parse_time(f"{sign}{amount}{unit[0]}", now=NOW, tz=UTC)
    assert moment == (NOW + expected if sign == "+" else NOW - expected)


def test_times_outside_the_calendar_are_errors() -> None:
    """A span that reaches past year 9999 or before year 1 is a ValueError, not a crash."""
    for text in ("-739951d", "+10000y", "99999999999 weeks ago"):
        with pytest.raises(ValueError, match="outside the years"):
            parse_time(text, now=NOW, tz=UTC)


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)))
def test_rfc3339_and_epochs_round_trip(moment: datetime) -> None:
    """An RFC 3339 time and its epoch name the same instant, whatever the zone of offset-less times."""
    assert parse_time(moment.isoformat(), now=NOW, tz=PARIS) == moment
    epoch = parse_time(f"@{moment.timestamp()}", now=NOW, tz=PARIS)
    assert abs(epoch - moment) < timedelta(milliseconds=1)


def test_parse_span_adds_parts() -> None:
    """A span may combine units; a bare number is seconds."""
    assert parse_span("1h 30min") == 5400
    assert parse_span("2h30m") == 9000
    assert parse_span("90") == 90
    with pytest.raises(ValueError, match="unknown unit"):
        parse_span("3 parsecs")


def _event(**fields: object) -> StoredEvent:
    base: dict[str, object] = {
        "timestamp": NOW,
        "session_id": "s1",
        "action": "Deploy service",
        "stage": Stage.FINISH,
        "status": Status.OK,
        "agent": "claude",
        "seq": 3,
    }
    base.update(fields)
    return StoredEvent(**base)  # type: ignore[arg-type]


def test_field_matches_or_one_field_and_different_fields() -> None:
    """Values of one field are ORed, fields ANDed; attrs.* compares strings, numbers and booleans."""
    matches = parse_matches(["stage=FINISH", "stage=READ", "attrs.tool=Bash"])
    assert matches.test(_event(attrs={"tool": "Bash"}))
    assert matches.test(_event(stage=Stage.READ, attrs={"tool": "Bash"}))
    assert not matches.test(_event(stage=Stage.PENDING, attrs={"tool": "Bash"}))
    assert not matches.test(_event(attrs={"tool": "Read"}))
    assert not matches.test(_event())
    assert parse_matches(["attrs.exit=2"]).test(_event(attrs={"exit": 2}))
    assert parse_matches(["attrs.ok=true"]).test(_event(attrs={"ok": True}))
    assert parse_matches(["seq=3", "status=failed"]).test(_event(status=Status.FAILED, error="x"))
    assert parse_matches(["role="]).test(_event())
    assert not parse_matches(["role="]).test(_event(role="coder"))


def test_needles_are_in_every_matching_line() -> None:
    """A string match yields the compact JSON key:value that a stored line must contain."""
    event = _event(attrs={"tool": 'Ba"sh'}, role="coder")
    import msgspec

    raw = msgspec.json.encode(event)
    for needles in parse_matches(['attrs.tool=Ba"sh', "role=coder", "stage=finish"]).needles():
        assert any(needle in raw for needle in needles)
    assert parse_matches(["attrs.exit=2"]).needles() == []


def test_unknown_field_names_the_known_ones() -> None:
    """An unknown field is an error that lists the stored fields and attrs.KEY."""
    with pytest.raises(ValueError, match=r"unknown field 'tool'.*action.*attrs\.KEY"):
        parse_matches(["tool=Bash"])
    with pytest.raises(ValueError, match="is not FIELD=VALUE"):
        parse_matches(["Bash"])
    with pytest.raises(ValueError, match="seq is a number"):
        parse_matches(["seq=x"])


def test_grep_is_smart_about_case() -> None:
    """An all-lower-case pattern ignores case, one with upper case does not, unless forced."""
    assert compile_grep("deploy").search("Deploy")
    assert not compile_grep("DEPLOY").search("Deploy")
    assert not compile_grep("deploy", case_sensitive=True).search("Deploy")
    assert compile_grep("DEPLOY", case_sensitive=False).search("Deploy")
    assert compile_grep(r"\Wservice").flags & re.IGNORECASE  # escapes are not upper-case letters
    with pytest.raises(ValueError, match="not a valid regular expression"):
        compile_grep("(")


def test_seq_ranges() -> None:
    """--seq N and N..M are inclusive; anything else is an error."""
    assert parse_seq_range("7") == (7, 7)
    assert parse_seq_range("3..9") == (3, 9)
    for bad in ("0", "9..3", "x", "1..", "-2"):
        with pytest.raises(ValueError, match="seq"):
            parse_seq_range(bad)


def _summary(session_id: str, last_hours_ago: float, **fields: object) -> SessionSummary:
    values: dict[str, object] = {
        "session_id": session_id,
        "parent_session_id": None,
        "agent": "claude",
        "first_time": NOW - timedelta(hours=last_hours_ago + 1),
        "last_time": NOW - timedelta(hours=last_hours_ago),
        "events": 10,
        "open_actions": 0,
        "failures": 0,
        "segments": 1,
    }
    values.update(fields)
    return SessionSummary(**values)  # type: ignore[arg-type]


def test_select_sessions_filters_and_orders_by_last_activity() -> None:
    """Sessions are ordered by last activity; -n keeps the most recent; filters AND."""
    rows = [
        _summary("old", 30),
        _summary("recent-failed", 0.5, failures=2),
        _summary("running", 2, open_actions=1, agent="codex"),
        _summary("mid", 5),
    ]
    roles = {"mid": "planner"}
    ids = [row.session_id for row in select_sessions(rows, SessionQuery(), roles.get)]
    assert ids == ["old", "mid", "running", "recent-failed"]
    assert [r.session_id for r in select_sessions(rows, SessionQuery(limit=2), roles.get)] == [
        "running",
        "recent-failed",
    ]
    since = SessionQuery(since=NOW - timedelta(hours=3))
    assert [r.session_id for r in select_sessions(rows, since, roles.get)] == ["running", "recent-failed"]
    until = SessionQuery(until=NOW - timedelta(hours=5.5))
    assert [r.session_id for r in select_sessions(rows, until, roles.get)] == ["old", "mid"]
    assert [r.session_id for r in select_sessions(rows, SessionQuery(failed=True), roles.get)] == ["recent-failed"]
    assert [r.session_id for r in select_sessions(rows, SessionQuery(open=True), roles.get)] == ["running"]
    codex = SessionQuery(agents=frozenset({"codex"}))
    assert [r.session_id for r in select_sessions(rows, codex, roles.get)] == ["running"]
    planner = SessionQuery(roles=frozenset({"planner"}))
    assert [r.session_id for r in select_sessions(rows, planner, roles.get)] == ["mid"]


def test_replay_keeps_the_greatest_timestamp_and_an_unknown_one_unknown() -> None:
    """Recovery folds the greatest timestamp, not the last; a checkpoint without one leaves it unknown."""
    from gz_ia.collector.storage.checkpoints import Checkpoint
    from gz_ia.collector.storage.replay import SessionFold, Trace

    fold = SessionFold()
    for seq, stamp in enumerate(["2026-12-01T10:00:00Z", "2026-12-01T12:00:00.5Z", "2026-12-01T11:00:00Z"], 1):
        fold.apply(Trace(action="a", stage=Stage.READ, seq=seq, timestamp=stamp))
    assert fold.newest_time == "2026-12-01T12:00:00.5Z"
    assert fold.last_time == "2026-12-01T11:00:00Z"
    legacy = SessionFold(Checkpoint(seq=3, last_time="2026-12-01T11:00:00Z"))
    legacy.apply(Trace(action="a", stage=Stage.READ, seq=4, timestamp="2026-12-01T13:00:00Z"))
    assert legacy.newest_time is None


@given(
    lines=st.lists(st.text(alphabet='ab":WFx{}', max_size=30), min_size=1, max_size=40),
    needles=st.lists(st.text(alphabet='ab":WF', min_size=1, max_size=5), min_size=1, max_size=3),
    sample_size=st.sampled_from([0, 16, 1 << 16]),
)
def test_finder_finds_exactly_the_lines_holding_a_needle(
    lines: list[str], needles: list[str], sample_size: int
) -> None:
    """The byte search returns every line that contains one of the needles, once, whichever byte it picks."""
    from gz_ia.collector.query import _finder

    data = "".join(line + "\n" for line in lines).encode()
    group = tuple(needle.encode() for needle in needles)
    finder = _finder.Finder([group])
    finder._learn(data[:sample_size])
    starts, offset = [], 0
    for line in lines:
        if any(needle in line for needle in needles):
            starts.append(offset)
        offset += len(line.encode()) + 1
    assert finder.starts(data) == starts


def _stored_line(session_id: str, seq: int, attrs: dict[str, str]) -> str:
    """One stored event line as the collector writes it, ``seq`` seconds after ``NOW``."""
    record = {
        "timestamp": msgspec.json.encode(NOW + timedelta(seconds=seq)).decode()[1:-1],
        "session_id": session_id,
        "action": f"task-{seq}",
        "stage": "READ",
        "status": "OK",
        "agent": "claude",
        "attrs": attrs,
        "seq": seq,
    }
    return msgspec.json.encode(record).decode()


def _empty_root(root: Path) -> None:
    """Lay out an empty session root as the collector creates it."""
    from gz_ia.collector.storage.names import LAYOUT_FILE, LAYOUT_VERSION

    (root / "sessions").mkdir()
    (root / "state").mkdir()
    (root / LAYOUT_FILE).write_text(json.dumps({"layout": LAYOUT_VERSION}) + "\n")


def _write_session(root: Path, session_id: str, tools: list[str], *, torn: bytes = b"") -> list[str]:
    """Write an active segment as the collector would, one event per tool (padded to make it long); return its lines."""
    lines = [_stored_line(session_id, seq, {"tool": tool, "padding": "x" * 200}) for seq, tool in enumerate(tools, 1)]
    path = root / "sessions" / f"{session_id}.events.jsonl"
    path.write_bytes("".join(line + "\n" for line in lines).encode() + torn)
    return lines


def test_search_reads_each_session_alone_though_one_buffer_holds_them_in_turn(tmp_path: Path) -> None:
    """The search reads sessions one after another into one buffer that keeps the bytes of a longer
    one read before: a shorter session read next must not show them as its own lines, nor complete its
    torn last line (being written) with them; a session longer than the buffer makes it grow."""
    from gz_ia.collector.query import search
    from gz_ia.collector.reading import Filters

    _empty_root(tmp_path)
    # Sessions are read in id order: the long one first, with its matches near its end, past the
    # shorter ones' lengths; then a short one, then one whose torn last line holds the needle too.
    long_tools = ["Bash"] * 6000 + ["WebFetch", "Bash", "WebFetch"]
    long_lines = _write_session(tmp_path, "a-long", long_tools)
    assert len("\n".join(long_lines)) > 1 << 20  # more than the buffer it starts with
    short_lines = _write_session(tmp_path, "b-short", ["Read", "WebFetch", "Read"])
    torn = b'{"timestamp":"2026-12-01T12:40:00Z","session_id":"c-torn","attrs":{"tool":"WebFetch"'
    torn_lines = _write_session(tmp_path, "c-torn", ["WebFetch", "Read"], torn=torn)
    match = Selection(matches=parse_matches(["attrs.tool=WebFetch"]))
    found = [entry.line for entry in search(tmp_path, Filters(), match)]
    assert sorted(found) == sorted([long_lines[6000], long_lines[6002], short_lines[1], torn_lines[0]])
    everything = [
        entry.line for entry in search(tmp_path, Filters(), Selection(matches=parse_matches(["agent=claude"])))
    ]
    assert sorted(everything) == sorted(long_lines + short_lines + torn_lines)


def _segmented_root(root: Path, session_id: str, segments: list[list[str]]) -> list[str]:
    """Write a root holding one session as the collector leaves it: every segment but the last
    archived (plain), the last active, and a checkpoint covering it all; return every line."""
    from gz_ia.collector.storage.checkpoints import Checkpoint, encode_checkpoint
    from gz_ia.collector.storage.names import archive_name

    _empty_root(root)
    lines: list[str] = []
    seq = 0
    for number, tools in enumerate(segments, 1):
        segment_seq = seq
        part = []
        for tool in tools:
            seq += 1
            part.append(_stored_line(session_id, seq, {"tool": tool}))
        lines += part
        data = "".join(line + "\n" for line in part).encode()
        last = number == len(segments)
        name = f"{session_id}.events.jsonl" if last else archive_name(session_id, number)
        (root / "sessions" / name).write_bytes(data)
    checkpoint = Checkpoint(segment=len(segments), offset=len(data), seq=seq, segment_seq=segment_seq)
    (root / "state" / f"{session_id}.session.json").write_bytes(encode_checkpoint(checkpoint))
    return lines


@pytest.mark.parametrize(
    "after",
    ["written", "empty", "earlier-retired"],
    ids=["new-active-written", "new-active-empty", "no-archive-listed"],
)
@pytest.mark.parametrize("question", ["field-match", "since"])
def test_search_never_misses_a_segment_archived_after_the_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str, question: str
) -> None:
    """A session that rotates between the root's listing and the open of its active file: the listing
    names segment 3 as the active file, which is archive 3 by the time it is opened, and the active file
    then opened is segment 4 (with events, or still empty; with or without older archives listed).
    The search must still show archive 3's events (by proving continuity of seq, or reading carefully).

    The listing is made stale deterministically: the search's listing is taken, then archive 3 is
    dropped from it, as a listing taken just before the rotation has it (a real race is too rare to test)."""
    from gz_ia.collector.query import _scan, search
    from gz_ia.collector.reading import Filters
    from gz_ia.collector.reading.sessions import Listing

    tools = [["Bash", "WebFetch"], ["Bash", "WebFetch"], ["WebFetch", "Bash"], ["Read", "WebFetch"]]
    if after == "empty":
        tools[3] = []
    lines = _segmented_root(tmp_path, "rot", tools)
    if after == "earlier-retired":  # retention deleted archives 1 and 2 before the listing
        for number in (1, 2):
            (tmp_path / "sessions" / f"rot.events.{number:06d}.jsonl").unlink()
        lines = lines[4:]

    class _BeforeTheRotation(Listing):
        def __init__(self, dirs: object, **options: bool) -> None:
            super().__init__(dirs, **options)  # type: ignore[arg-type]
            self.archives["rot"].discard(3)
            if not self.archives["rot"]:
                del self.archives["rot"]
                del self.newest_archive["rot"]
            else:
                self.newest_archive["rot"] = max(self.archives["rot"])

    monkeypatch.setattr(_scan, "Listing", _BeforeTheRotation)
    if question == "field-match":
        filters, selection = Filters(), Selection(matches=parse_matches(["attrs.tool=WebFetch"]))
        expected = [line for line in lines if "WebFetch" in line]
    else:
        filters, selection = Filters(since=NOW), Selection()
        expected = lines
    found = [entry.line for entry in search(tmp_path, filters, selection)]
    assert found == expected


@pytest.mark.parametrize("retired", [0, 2], ids=["all-archives", "earlier-retired"])
def test_search_proves_an_intact_session_complete_without_the_careful_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retired: int
) -> None:
    """The proof of completeness holds for a session as the collector leaves it, archives retired or
    not: the fast path answers alone (the careful reader, much slower, is kept for what it must report)."""
    from gz_ia.collector import reading
    from gz_ia.collector.query import search
    from gz_ia.collector.reading import Filters

    lines = _segmented_root(tmp_path, "rot", [["Bash", "WebFetch"], ["Bash", "WebFetch"], ["WebFetch", "Bash"]])
    for number in range(1, retired + 1):
        (tmp_path / "sessions" / f"rot.events.{number:06d}.jsonl").unlink()

    def careful(*args: object, **kwargs: object) -> None:
        raise AssertionError("the careful reader was asked")

    monkeypatch.setattr(reading, "iter_events", careful)
    found = [
        entry.line for entry in search(tmp_path, Filters(), Selection(matches=parse_matches(["attrs.tool=WebFetch"])))
    ]
    assert found == [line for line in lines[2 * retired :] if "WebFetch" in line]


def test_a_found_event_has_the_cursor_the_reader_gives_it(tmp_path: Path) -> None:
    """Resuming after an event found by the search is resuming after it in the session: the same
    cursor, carrying the root's epoch (a cursor of a rebuilt root is refused, not misread)."""
    from gz_ia.collector import reading
    from gz_ia.collector.query import search
    from gz_ia.collector.reading import Filters
    from gz_ia.collector.storage.names import LAYOUT_FILE, LAYOUT_VERSION

    lines = _segmented_root(tmp_path, "rot", [["Bash", "WebFetch"], ["WebFetch", "Read"]])
    (tmp_path / LAYOUT_FILE).write_text(json.dumps({"layout": LAYOUT_VERSION, "epoch": "0123456789abcdef"}) + "\n")
    selection = Selection(matches=parse_matches(["attrs.tool=WebFetch"]))
    found = list(search(tmp_path, Filters(), selection))
    assert [entry.line for entry in found] == [line for line in lines if "WebFetch" in line]
    read = {entry.event.seq: entry.cursor for entry in reading.iter_events(tmp_path, "rot")}
    assert [entry.cursor for entry in found] == [read[entry.event.seq] for entry in found]


def test_only_a_question_the_search_can_narrow_goes_to_it() -> None:
    """The search holds its matches in memory; a question that selects nearly everything (no byte
    needle, no checkpoint to skip a session by) is read as a stream instead."""
    from gz_ia.collector.query import narrows
    from gz_ia.collector.reading import Filters

    assert not narrows(Filters(), Selection())
    assert narrows(Filters(), Selection(grep=compile_grep("timeout")))  # a literal every match holds
    assert narrows(Filters(), Selection(grep=compile_grep("Timeout")))
    assert not narrows(Filters(), Selection(grep=compile_grep("time|out")))
    assert not narrows(Filters(), Selection(matches=parse_matches(["duration_ms=5"])))
    assert narrows(Filters(), Selection(matches=parse_matches(["attrs.tool=WebFetch"])))
    assert narrows(Filters(statuses=frozenset({Status.FAILED})), Selection())
    assert narrows(Filters(since=NOW), Selection())
    assert narrows(Filters(agents=frozenset({"claude"})), Selection())


def test_the_last_n_found_are_each_sessions_newest_by_seq_then_the_newest_by_time(tmp_path: Path) -> None:
    """As documented for -n (and as the streaming reader does): a session whose clock went back
    gives its newest events by seq, not its newest timestamps; the search keeps no more than those."""
    from gz_ia.collector.query import search
    from gz_ia.collector.reading import Filters

    _empty_root(tmp_path)
    timed = {"a": [(1, 10), (2, 1)], "b": [(1, 5)]}  # session: (seq, seconds after NOW); a's clock went back
    for session_id, events in timed.items():
        lines = []
        for seq, seconds in events:
            record = json.loads(_stored_line(session_id, seq, {"tool": "X"}))
            record["timestamp"] = msgspec.json.encode(NOW + timedelta(seconds=seconds)).decode()[1:-1]
            lines.append(json.dumps(record, separators=(",", ":")) + "\n")
        (tmp_path / "sessions" / f"{session_id}.events.jsonl").write_text("".join(lines))
    selection = Selection(matches=parse_matches(["attrs.tool=X"]))

    def last(count: int) -> list[tuple[str, int]]:
        return [
            (entry.event.session_id, entry.event.seq) for entry in search(tmp_path, Filters(), selection, count=count)
        ]

    assert last(1) == [("b", 1)]  # a's newest by seq is stamped 1 s after NOW, b's 5 s
    assert last(2) == [("b", 1), ("a", 1)]  # a's two newest by seq, b's one: the two newest by time
    assert last(3) == [("a", 2), ("b", 1), ("a", 1)]


def test_found_events_are_merged_by_the_instant_whatever_offset_their_times_carry(tmp_path: Path) -> None:
    """Times written with different UTC offsets, a microsecond apart, come out in the order of the
    instants they name; equal instants in session id order."""
    from gz_ia.collector.query import search
    from gz_ia.collector.reading import Filters

    _empty_root(tmp_path)
    stamps = {
        "a": "2026-12-01T10:00:00.000002Z",
        "b": "2026-12-01T11:00:00.000001+01:00",  # 10:00:00.000001 UTC: first
        "c": "2026-12-01T09:00:00.000002-01:00",  # the same instant as a's: after it
        "d": "2026-12-01T10:00:00Z",  # no fraction at all: before every other
    }
    for session_id, stamp in stamps.items():
        record = json.loads(_stored_line(session_id, 1, {"tool": "X"}))
        record["timestamp"] = stamp
        (tmp_path / "sessions" / f"{session_id}.events.jsonl").write_text(
            json.dumps(record, separators=(",", ":")) + "\n"
        )
    selection = Selection(matches=parse_matches(["attrs.tool=X"]))

    found = list(search(tmp_path, Filters(), selection))

    assert [entry.event.session_id for entry in found] == ["d", "b", "a", "c"]
    assert [json.loads(entry.line)["timestamp"] for entry in found] == [stamps[key] for key in "dbac"]


def test_a_needle_found_in_many_lines_of_the_root_is_streamed_not_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search would hold every match in memory: a FIELD=VALUE that a sample of the root says
    matches more lines than the search may hold is read as a stream instead."""
    from gz_ia.collector.query import _scan, narrows
    from gz_ia.collector.reading import Filters

    monkeypatch.setattr(_scan, "_MATCH_BUDGET", 50)  # as for a root of millions of events

    _empty_root(tmp_path)
    for number in range(3):
        _write_session(tmp_path, f"s{number}", ["Bash", "Read", "Edit"] * 30 + ["WebFetch"])
    broad = Selection(matches=parse_matches(["attrs.tool=Bash"]))
    rare = Selection(matches=parse_matches(["attrs.tool=WebFetch"]))
    assert narrows(Filters(), broad)  # without a root to sample, a needle narrows
    assert not narrows(Filters(), broad, tmp_path)
    assert narrows(Filters(), rare, tmp_path)
    assert narrows(Filters(since=NOW), broad, tmp_path)  # the checkpoints can skip whole sessions


def test_a_roots_archives_count_in_what_a_byte_match_is_expected_to_find(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate samples active files only, but the archives hold events too: a compressed one
    counts at several times its size, so a root heavy with archives is not taken for a small one."""
    import os

    from gz_ia.collector.query import _scan, narrows
    from gz_ia.collector.reading import Filters

    monkeypatch.setattr(_scan, "_MATCH_BUDGET", 200)
    _empty_root(tmp_path)
    for number in range(3):
        _write_session(tmp_path, f"s{number}", ["Bash", "Read", "Edit"] * 30)
    broad = Selection(matches=parse_matches(["attrs.tool=Bash"]))
    assert narrows(Filters(), broad, tmp_path)  # about 90 matches expected
    (tmp_path / "sessions" / "s0.events.000001.jsonl.gz").write_bytes(os.urandom(30_000))
    assert not narrows(Filters(), broad, tmp_path)  # and as many again, several times over


def test_sampling_the_root_never_follows_a_symlink_nor_waits_on_a_fifo(tmp_path: Path) -> None:
    """Something put in an active file's place (a FIFO, a symlink to one) is not read: the sample
    would otherwise block for ever before the search, which reports it, ever runs."""
    import os

    from gz_ia.collector.query import narrows
    from gz_ia.collector.reading import Filters

    _empty_root(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "sessions" / "a.events.jsonl").symlink_to(tmp_path / "fifo")
    os.mkfifo(tmp_path / "sessions" / "b.events.jsonl")
    _write_session(tmp_path, "c", ["Bash"])
    assert narrows(Filters(), Selection(matches=parse_matches(["attrs.tool=Bash"])), tmp_path)
