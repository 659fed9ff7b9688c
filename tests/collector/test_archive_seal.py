"""A compressed archive carries a seal that tells, without decompressing it, whether it was changed
since the collector wrote it; every gzip reader still reads it as plain gzip."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gz_ia.collector.storage.archive_seal import seal_holds, write_sealed
from gz_ia.collector.storage.names import session_archive
from gz_ia.collector.storage.rotation import compress_archive

_LINES = b"".join(b'{"seq":%d,"attrs":{"tool":"Bash","n":"%s"}}\n' % (seq, b"x" * (seq % 97)) for seq in range(1, 5000))


def _compressed(directory: Path) -> Path:
    """Archive segment 1 of session ``s`` as the collector does (plain file, then compressed in place)."""
    plain = directory / "s.events.000001.jsonl"
    plain.write_bytes(_LINES)
    os.utime(plain, ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    fd = os.open(directory, os.O_RDONLY)
    try:
        assert compress_archive(fd, session_archive("s", 1)) > 0
    finally:
        os.close(fd)
    assert not plain.exists()
    return directory / "s.events.000001.jsonl.gz"


def _holds(path: Path) -> bool | None:
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        return seal_holds(fd, path.name)
    finally:
        os.close(fd)


def test_a_sealed_archive_is_plain_gzip_to_every_reader_and_keeps_the_plain_mtime(tmp_path: Path) -> None:
    archive = _compressed(tmp_path)
    assert gzip.decompress(archive.read_bytes()) == _LINES
    gunzip = shutil.which("gzip")
    assert gunzip is not None
    checked = subprocess.run([gunzip, "-t", str(archive)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    assert subprocess.run([gunzip, "-dc", str(archive)], capture_output=True, check=True).stdout == _LINES
    assert archive.stat().st_mtime_ns == 1_700_000_000_123_456_789
    assert _holds(archive) is True


def _overwrite_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = b"\xa5" * 16
    path.write_bytes(bytes(data))


def _cut(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _append(path: Path) -> None:
    with path.open("ab") as file:
        file.write(b"\n")


def _garble_header(path: Path) -> None:
    with path.open("r+b") as file:
        file.write(b"garbage!")


def _cut_keeping_mtime(path: Path) -> None:
    before = path.stat()
    _cut(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize(
    "damage",
    [_overwrite_middle, _cut, _append, _garble_header, _cut_keeping_mtime],
    ids=["overwritten-in-the-middle", "cut", "appended-to", "header-garbled", "cut-mtime-set-back"],
)
def test_a_changed_archive_breaks_its_seal(tmp_path: Path, damage: Callable[[Path], None]) -> None:
    archive = _compressed(tmp_path)
    damage(archive)
    assert _holds(archive) is False


def test_an_archive_of_an_earlier_gz_ia_has_no_seal_and_a_missing_one_is_no_verdict(tmp_path: Path) -> None:
    archive = tmp_path / "s.events.000001.jsonl.gz"
    archive.write_bytes(gzip.compress(_LINES, mtime=0))
    assert _holds(archive) is None
    archive.unlink()
    assert _holds(archive) is None


def test_a_plain_archive_that_changes_length_while_compressed_is_an_error(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(_LINES)
    shorter = tmp_path / "shorter"
    shorter.write_bytes(_LINES[:100])
    source = os.open(plain, os.O_RDONLY)
    target = os.open(tmp_path / "out.gz", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="changed length"):
            write_sealed(source, target, os.stat(shorter))
    finally:
        os.close(source)
        os.close(target)
