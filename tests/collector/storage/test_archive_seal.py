"""A compressed archive carries a seal that tells, without decompressing it, whether it was changed
since the collector wrote it; every gzip reader still reads it as plain gzip."""

from __future__ import annotations

import gzip
import os
import shutil
import struct
import subprocess
import zlib
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


def _flip_trailer(path: Path) -> None:
    with path.open("r+b") as file:
        file.seek(-6, os.SEEK_END)
        byte = file.read(1)
        file.seek(-6, os.SEEK_END)
        file.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize(
    "damage",
    [_cut, _append, _garble_header, _cut_keeping_mtime, _flip_trailer],
    ids=["cut", "appended-to", "header-garbled", "cut-mtime-set-back", "trailer-flipped"],
)
def test_a_changed_archive_breaks_its_seal(tmp_path: Path, damage: Callable[[Path], None]) -> None:
    archive = _compressed(tmp_path)
    damage(archive)
    assert _holds(archive) is False


def _touch(path: Path) -> None:
    os.utime(path)


def _set_back(path: Path) -> None:
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))


def _copy_without_times(path: Path) -> None:
    copy = path.with_name("copy")
    shutil.copyfile(path, copy)
    os.replace(copy, path)


@pytest.mark.parametrize(
    "change", [_touch, _set_back, _copy_without_times], ids=["touched", "mtime-set-back", "copied-without-times"]
)
def test_an_archive_whose_times_changed_keeps_its_seal(tmp_path: Path, change: Callable[[Path], None]) -> None:
    archive = _compressed(tmp_path)
    change(archive)
    assert archive.stat().st_mtime_ns != 1_700_000_000_123_456_789
    assert _holds(archive) is True


def test_bytes_overwritten_in_the_middle_keep_the_seal_and_fail_decompression(tmp_path: Path) -> None:
    """What the seal cannot see without decompressing, decompressing does (gz-ia sessions --verify)."""
    archive = _compressed(tmp_path)
    _overwrite_middle(archive)
    assert _holds(archive) is True
    with pytest.raises((OSError, EOFError, zlib.error)):
        gzip.decompress(archive.read_bytes())


def test_an_earlier_gz_ias_seal_is_checked_by_its_length_not_its_mtime(tmp_path: Path) -> None:
    body = gzip.compress(_LINES, mtime=0)
    seal = struct.pack("<qQ", 1_700_000_000_123_456_789, len(_LINES))
    header = b"\x1f\x8b\x08\x04" + bytes(4) + b"\x00\xff" + struct.pack("<H", 4 + len(seal)) + b"gZ"
    archive = tmp_path / "s.events.000001.jsonl.gz"
    archive.write_bytes(header + struct.pack("<H", len(seal)) + seal + body[10:])
    assert gzip.decompress(archive.read_bytes()) == _LINES
    assert _holds(archive) is True
    _cut(archive)
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
