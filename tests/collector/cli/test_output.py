"""The reading commands' output: blocks of lines into a pipe even when Python runs unbuffered."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from gz_ia.collector.cli._output import Output


class _CountingFile(io.FileIO):
    """A raw file that counts its writes: each one is a system call."""

    calls = 0

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.calls += 1
        return super().write(data)


class _Pipe(NamedTuple):
    raw: _CountingFile
    read_end: int
    stream: io.TextIOWrapper


@pytest.fixture
def unbuffered_pipe() -> Iterator[_Pipe]:
    """A pipe opened as ``python -u`` (``PYTHONUNBUFFERED``) opens stdout: text written straight
    through to the raw file. (A test points ``sys.stdout`` at it itself: pytest's capture resets
    ``sys.stdout`` after fixtures run.)"""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    raw = _CountingFile(write_end, "wb")
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    yield _Pipe(raw, read_end, stream)
    stream.close()


def _drain(read_end: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(read_end, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    return b"".join(chunks)


LINES = [f'{{"seq":{number},"action":"{"x" * 40}"}}' for number in range(300)]


def test_lines_into_a_pipe_go_out_in_blocks_though_python_runs_unbuffered(
    unbuffered_pipe: _Pipe, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw, read_end, stream = unbuffered_pipe
    monkeypatch.setattr(sys, "stdout", stream)
    out = Output(flush_each=False)
    for line in LINES:
        out.line(line)
    out.flush()
    assert raw.calls <= len("\n".join(LINES)) // 8192 + 2  # not one per line
    assert _drain(read_end).decode().splitlines() == LINES


def test_a_follower_still_sends_each_line_at_once(unbuffered_pipe: _Pipe, monkeypatch: pytest.MonkeyPatch) -> None:
    raw, read_end, stream = unbuffered_pipe
    monkeypatch.setattr(sys, "stdout", stream)
    out = Output(flush_each=True)
    for number, line in enumerate(LINES[:20], start=1):
        out.line(line)
        assert raw.calls == number
    assert _drain(read_end).decode().splitlines() == LINES[:20]
