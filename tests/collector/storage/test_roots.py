"""Which directories become a session root: a .harness, an empty directory, or one gz-ia already writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gz_ia.collector.storage.roots import LayoutError, open_root


def test_a_directory_of_other_files_never_becomes_a_root(tmp_path: Path) -> None:
    """A writer that names a directory holding other things (a home, /etc, a project) is refused, and
    nothing is written into it: not a layout file, not a sessions or state directory."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("mine\n")
    with pytest.raises(LayoutError, match="holds other files"):
        open_root(project, owner=None)
    assert sorted(path.name for path in project.iterdir()) == ["README.md"]


@pytest.mark.parametrize("name", [".harness", "empty"])
def test_a_harness_or_an_empty_directory_becomes_a_root(tmp_path: Path, name: str) -> None:
    """A .harness (as a client makes it, whatever it holds) and an empty directory become roots."""
    root = tmp_path / name
    root.mkdir()
    if name == ".harness":
        (root / "notes.txt").write_text("the user's own\n")
    with open_root(root, owner=None) as dirs:
        assert dirs.epoch
    assert (root / "layout.json").is_file() and (root / "sessions").is_dir() and (root / "state").is_dir()


def test_a_root_that_gz_ia_writes_keeps_being_one(tmp_path: Path) -> None:
    """Once a root (its layout file, or the sessions of a root made before layouts), always a root."""
    root = tmp_path / "old"
    (root / "sessions").mkdir(parents=True)
    (root / "sessions" / "s1.events.jsonl").write_text("")
    (root / "rejects.jsonl").write_text("")
    with open_root(root, owner=None):
        pass
    (root / "other.txt").write_text("added later\n")
    with open_root(root, owner=None):
        pass
