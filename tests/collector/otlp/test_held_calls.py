"""The hooks' tool calls a session holds, read once from its file: appended lines only, a replaced
file from its last MiB again, a line being written read whole next time."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from gz_ia.collector.receivers import held_calls
from gz_ia.collector.receivers.held_calls import RECENT_BYTES, RecentCycles
from gz_ia.collector.storage.sessions import RootStore
from gz_ia.collector.storage.writer import Writer


def _root(tmp_path: Path) -> RootStore:
    path = tmp_path / ".harness"
    path.mkdir()
    return Writer().root(path, owner=os.getuid())


def _line(cycle: str) -> bytes:
    return b'{"action":"Bash","stage":"FINISH","cycle":' + msgspec.json.encode(cycle) + b',"seq":1}\n'


def _ids(found: dict[bytes, None]) -> list[str]:
    return [msgspec.json.decode(each) for each in found]


def test_appended_lines_are_read_and_nothing_twice(tmp_path: Path) -> None:
    root = _root(tmp_path)
    active = root.path / "sessions" / "s1.events.jsonl"
    recent = RecentCycles()
    assert recent.cycles(root, "s1") == {}  # no file yet
    active.write_bytes(_line("toolu_1") + _line('quote"d'))
    assert _ids(recent.cycles(root, "s1")) == ["toolu_1", 'quote"d']
    with active.open("ab") as file:
        file.write(_line("toolu_2") + _line("toolu_3")[:20])  # the last line half written
    assert _ids(recent.cycles(root, "s1")) == ["toolu_1", 'quote"d', "toolu_2"]
    with active.open("ab") as file:
        file.write(_line("toolu_3")[20:])
    assert _ids(recent.cycles(root, "s1")) == ["toolu_1", 'quote"d', "toolu_2", "toolu_3"]


def test_a_replaced_or_long_file_is_read_from_its_last_mib(tmp_path: Path) -> None:
    root = _root(tmp_path)
    active = root.path / "sessions" / "s1.events.jsonl"
    recent = RecentCycles()
    active.write_bytes(_line("old"))
    assert _ids(recent.cycles(root, "s1")) == ["old"]
    replaced = active.with_name("new.tmp")
    filler = b"x" * 200 + b"\n"
    replaced.write_bytes(_line("far") + filler * (RECENT_BYTES // len(filler) + 1) + _line("near"))
    os.replace(replaced, active)  # an editor's save, a rotation: another file under the name
    assert _ids(recent.cycles(root, "s1")) == ["near"]  # "far" is past the last MiB, "old" was another file


def test_what_is_remembered_is_bounded_by_the_ids_of_all_sessions(tmp_path: Path, monkeypatch: Any) -> None:
    """Past the bound on cycle ids held, the sessions looked up longest ago are forgotten (read again
    from their file if asked for), never the one just read."""
    monkeypatch.setattr(held_calls, "_IDS_KEPT", 3)
    root = _root(tmp_path)
    recent = RecentCycles()
    for session_id, count in (("s1", 2), ("s2", 2)):
        (root.path / "sessions" / f"{session_id}.events.jsonl").write_bytes(
            b"".join(_line(f"{session_id}-{n}") for n in range(count))
        )
    assert _ids(recent.cycles(root, "s1")) == ["s1-0", "s1-1"]
    assert _ids(recent.cycles(root, "s2")) == ["s2-0", "s2-1"]
    assert list(recent._seen) == [(str(root.path), "s2")] and recent._ids == 2
    assert _ids(recent.cycles(root, "s1")) == ["s1-0", "s1-1"]  # read again: nothing lost but memory
