"""Export holds: retention (``gz-ia gc`` and after a rotation) spares what an exporter still needs, up to a bound."""

from __future__ import annotations

from pathlib import Path

from gz_ia.collector.config import RetentionConfig
from gz_ia.collector.storage.export_holds import HOLDS_DIR, read_holds, write_hold
from gz_ia.collector.storage.names import archive_name
from gz_ia.collector.storage.retention import RetentionPolicy, apply_retention
from gz_ia.collector.storage.roots import open_root


def _root_with_archives(tmp_path: Path, session_id: str, count: int) -> Path:
    root = tmp_path / ".harness"
    root.mkdir(mode=0o700, exist_ok=True)
    open_root(root, owner=None).close()
    for number in range(1, count + 1):
        (root / "sessions" / archive_name(session_id, number, compressed=True)).write_bytes(b"x")
    return root


def _left(root: Path, session_id: str) -> list[int]:
    names = sorted(path.name for path in (root / "sessions").iterdir())
    return [number for number in range(1, 100) if archive_name(session_id, number, compressed=True) in names]


def test_gc_spares_held_archives_up_to_the_bound(tmp_path: Path) -> None:
    """Archives at or after the held segment survive max_archives, at most max_held_archives of them."""
    root = _root_with_archives(tmp_path, "s", 8)
    _root_with_archives(tmp_path, "free", 8)
    dirs = open_root(root, owner=None)
    try:
        write_hold(dirs, "exporter1", {"s": 3})
        write_hold(dirs, "exporter2", {"s": 5})  # the lowest need of all exporters wins
        assert read_holds(dirs) == {"s": 3}
        policy = RetentionPolicy(RetentionConfig(max_archives=2, max_held_archives=3))
        report = apply_retention(dirs, policy, now=0.0)
    finally:
        dirs.close()
    # Doomed by max_archives: 1-6; held from 3: 3-6, of which the newest 3 are spared.
    assert _left(root, "s") == [4, 5, 6, 7, 8]
    assert _left(root, "free") == [7, 8]  # a session no exporter holds
    assert {item.reason for item in report.deleted} == {"max_archives"}


def test_an_unreadable_hold_holds_nothing(tmp_path: Path) -> None:
    """A corrupt hold file (or one that is not a file) never stops retention."""
    root = _root_with_archives(tmp_path, "s", 4)
    (root / "state" / HOLDS_DIR).mkdir()
    (root / "state" / HOLDS_DIR / "broken.json").write_text("{not json")
    (root / "state" / HOLDS_DIR / "dir.json").mkdir()
    dirs = open_root(root, owner=None)
    try:
        assert read_holds(dirs) == {}
        apply_retention(dirs, RetentionPolicy(RetentionConfig(max_archives=1)), now=0.0)
    finally:
        dirs.close()
    assert _left(root, "s") == [4]
