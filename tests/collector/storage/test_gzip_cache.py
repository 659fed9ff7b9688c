"""Archives read in place: any offset gives the bytes the whole decompressed archive has there, while
the reader holds the decompressor's states and one span, not the archive."""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest

from gz_ia.collector.storage import gzip_cache
from gz_ia.collector.storage.names import session_archive
from gz_ia.collector.storage.rotation import compress_archive
from gz_ia.collector.storage.segments import SegmentUnreadable, open_archive

_LINES = b"".join(
    b'{"seq":%d,"attrs":{"tool":"Bash","n":"%s"}}\n' % (seq, random.Random(seq).randbytes(40).hex().encode())
    for seq in range(1, 8000)
)


def _archive(directory: Path) -> Path:
    """Segment 1 of session ``s``, archived as the collector archives it."""
    (directory / "s.events.000001.jsonl").write_bytes(_LINES)
    fd = os.open(directory, os.O_RDONLY)
    try:
        assert compress_archive(fd, session_archive("s", 1)) > 0
    finally:
        os.close(fd)
    return directory / "s.events.000001.jsonl.gz"


def _open(path: Path) -> gzip_cache.Archive:
    fd = os.open(path, os.O_RDONLY)
    try:
        return gzip_cache.Archive(fd, os.fstat(fd), path.name)
    finally:
        os.close(fd)


def test_any_read_gives_the_decompressed_bytes_holding_one_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gzip_cache, "SPAN", 4096)  # many spans in a small archive
    archive = _open(_archive(tmp_path))
    assert len(archive) == len(_LINES)
    rng = random.Random(3)
    reads = [(0, 10), (len(_LINES) - 5, 100), (len(_LINES), 10), (4090, 20)]
    reads += [(rng.randrange(len(_LINES)), rng.randrange(1, 20_000)) for _ in range(200)]
    forward = [(offset, 3000) for offset in range(0, len(_LINES), 3000)]
    backward = list(reversed(forward))
    for offset, length in [*reads, *forward, *backward]:
        assert archive.read(offset, length) == _LINES[offset : offset + length]
        assert archive[offset : offset + length] == _LINES[offset : offset + length]
        assert len(archive._span_data) <= gzip_cache.SPAN  # one span held, never the archive
    assert len(archive._points) <= gzip_cache.POINTS  # a state every few spans, however many spans


def test_damage_inside_an_archive_is_an_unreadable_segment_at_its_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gzip_cache, "SPAN", 4096)
    path = _archive(tmp_path)
    data = bytearray(path.read_bytes())
    del data[len(data) // 2 :]  # cut in the middle: the trailer's size is gone with the rest
    data += (len(_LINES)).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        segment = open_archive(fd, session_archive("s", 1), 1)
    finally:
        os.close(fd)
    assert segment.read(0, 100) == _LINES[:100]  # what comes before the damage reads
    with pytest.raises(SegmentUnreadable, match=r"s\.events\.000001\.jsonl\.gz"):
        segment.read(0, len(_LINES))
    (tmp_path / "plain.gz").write_bytes(b"not gzip at all, plainly")
    with pytest.raises(gzip.BadGzipFile):
        _open(tmp_path / "plain.gz")
