"""The collector remembers the roots it served, so that a restart can repair them before READY."""

from __future__ import annotations

from pathlib import Path

from gz_ia.collector.service.known_roots import KnownRoots


def test_roots_are_remembered_across_instances_and_forgotten_when_gone(tmp_path: Path) -> None:
    """add() persists at once; a new instance reads it back; discard() drops roots that no longer exist."""
    state = tmp_path / "state"
    roots = KnownRoots(state)
    roots.add(tmp_path / "a" / ".harness", 1000)
    roots.add(tmp_path / "b" / ".harness", 1000)
    roots.add(tmp_path / "a" / ".harness", 1000)
    again = KnownRoots(state)
    assert list(again) == [(tmp_path / "a" / ".harness", 1000, ""), (tmp_path / "b" / ".harness", 1000, "")]
    again.discard([(tmp_path / "a" / ".harness", 1000)])
    assert list(KnownRoots(state)) == [(tmp_path / "b" / ".harness", 1000, "")]


def test_each_collector_takes_the_roots_served_through_its_socket(tmp_path: Path) -> None:
    """The socket that served a root last is remembered; an entry of an earlier version names none,
    and counts as every collector's."""
    (tmp_path / "roots.json").write_text('[{"path": "/old/.harness", "uid": 1000}]')
    roots = KnownRoots(tmp_path)
    roots.add(Path("/a/.harness"), 1000, "/run/a.sock")
    roots.add(Path("/b/.harness"), 1000, "/run/b.sock")
    roots.add(Path("/b/.harness"), 1000, "/run/a.sock")  # served through a.sock since
    again = KnownRoots(tmp_path)
    assert again.served_through(["/run/a.sock"]) == [
        (Path("/old/.harness"), 1000),
        (Path("/a/.harness"), 1000),
        (Path("/b/.harness"), 1000),
    ]
    assert again.served_through(["/run/b.sock"]) == [(Path("/old/.harness"), 1000)]


def test_an_unreadable_file_is_ignored_not_fatal(tmp_path: Path) -> None:
    """A damaged roots.json never stops the collector: it starts with an empty memory."""
    (tmp_path / "roots.json").write_text("{not json")
    assert list(KnownRoots(tmp_path)) == []
