"""Work spread over forked processes: a question that must read every file uses every core.

Threads do not help here: the search between two reads holds the GIL, so a second thread only
overlaps the first one's system calls. Forked processes share nothing but what they inherit at the
fork (the open root, the listing, the compiled question) and each send back what they found.

Work is handed out in chunks through a pipe that every process reads four bytes at a time (a read
of at most ``PIPE_BUF`` bytes is atomic), so a process that drew small sessions takes more chunks.
A process forks only while it runs a single thread: a lock another thread held at the fork would
never be released in the child. Elsewhere, and for work too small to be worth a fork, the chunks
are read here, one after the other.

A child writes each result, as soon as it is made, into a file of its own in memory (``memfd``),
which never blocks it; the caller reads the file once the child has ended. Through a pipe, a child
that finished first waited for the caller to finish too, then both copied the results through the
pipe's few pages at a time: tens of megabytes for a question matching a quarter of the events.
"""

from __future__ import annotations

import marshal
import os
import select
import signal
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

from gz_ia.collector.errors import CollectorError

__all__ = ["MAX_CHUNKS", "MAX_PROCESSES", "WorkerFailed", "run"]

MAX_PROCESSES: Final = 4
_CLAIM: Final = struct.Struct("=I")
MAX_CHUNKS: Final = select.PIPE_BUF // _CLAIM.size
"""Every claim is written before any process reads: they must fit the smallest pipe the kernel makes
(one page, when the user has many pipes open); more chunks than this are read in the caller."""

_RESULT: Final = struct.Struct("=cIQ")
"""A result's header in a child's file: :data:`_ONE`, the chunk's index, the marshalled size."""
_ONE: Final = b"R"
_DONE: Final = b"D"
"""The last byte of a child's file when every result it took is in it."""
_FAILED: Final = b"F"
"""Ends a child's file with its pickled exception after it."""
Chunk = TypeVar("Chunk")
Result = TypeVar("Result")


class WorkerFailed(CollectorError, RuntimeError):
    """A forked process ended without sending its results (killed, or its error would not pickle)."""


def _processes() -> int:
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(MAX_PROCESSES, available)


def run(work: Callable[[Chunk], Result], chunks: Sequence[Chunk]) -> list[Result]:
    """Return ``[work(chunk) for chunk in chunks]``, computed by up to :data:`MAX_PROCESSES` processes.

    ``work`` runs in forked children and in the caller, which works too. A child's results come
    back through :mod:`marshal`, several times faster than :mod:`pickle` both ways: results must be
    built-in values (tuples, lists, dicts, strings, bytes, numbers, None). An exception ``work``
    raises in any process is raised here (a child's is pickled: exceptions are not built-in values).
    """
    processes = min(_processes(), len(chunks))
    if processes < 2 or not hasattr(os, "fork") or threading.active_count() > 1 or len(chunks) > MAX_CHUNKS:
        return [work(chunk) for chunk in chunks]
    claims_read, claims_write = os.pipe()
    try:
        os.write(claims_write, b"".join(_CLAIM.pack(index) for index in range(len(chunks))))
    finally:
        os.close(claims_write)
    children: list[tuple[int, int]] = []
    try:
        for _ in range(processes - 1):
            children.append(_fork(work, chunks, claims_read))
        results: dict[int, Result] = dict(_claim_and_work(work, chunks, claims_read))
        while children:
            results.update(_collect(*children.pop()))
    finally:
        os.close(claims_read)
        for pid, results_file in children:  # the caller failed or was interrupted: stop the rest
            _stop(pid, results_file)
    return [results[index] for index in range(len(chunks))]


def _claim_and_work(
    work: Callable[[Chunk], Result], chunks: Sequence[Chunk], claims: int
) -> Iterator[tuple[int, Result]]:
    while claim := os.read(claims, _CLAIM.size):
        (index,) = _CLAIM.unpack(claim)
        yield index, work(chunks[index])


def _fork(work: Callable[[Chunk], Result], chunks: Sequence[Chunk], claims: int) -> tuple[int, int]:
    results = _results_file()
    try:
        pid = os.fork()
    except BaseException:
        os.close(results)
        raise
    if pid:
        return pid, results
    # The child: never return into the caller's code, never run its exit handlers or flush its buffers.
    code = 1
    try:
        with open(results, "wb", closefd=False) as sink:
            try:
                for index, result in _claim_and_work(work, chunks, claims):
                    # Marshalled whole before any byte of it is written: one that cannot be leaves
                    # no half record.
                    blob = _marshalled(result)
                    sink.write(_RESULT.pack(_ONE, index, len(blob)))
                    sink.write(blob)
                sink.write(_DONE)
            except BaseException as exc:  # sent to the parent, which raises it
                import pickle

                sink.write(_FAILED + pickle.dumps(exc, pickle.HIGHEST_PROTOCOL))
        code = 0
    finally:
        os._exit(code)


def _marshalled(result: Any) -> bytes:
    return marshal.dumps(result)  # ValueError for what it cannot write: the call fails, loudly


def _results_file() -> int:
    """A file only this process and its children can reach, in memory where the system has ``memfd``."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("gz-ia-search", os.MFD_CLOEXEC)
    import tempfile  # not at the top: it imports shutil, which reading never needs where memfd is

    with tempfile.TemporaryFile() as unnamed:  # removed from its directory as it is made
        return os.dup(unnamed.fileno())


def _collect(pid: int, results: int) -> list[tuple[int, Result]]:
    """Wait for a child, then take its results from its file (a failure it sent is raised here)."""
    try:
        _, status = os.waitpid(pid, 0)
    except BaseException:
        _stop(pid, results)
        raise
    # The child wrote through the description it shares with this process: read from the start.
    with open(results, "rb") as source:
        source.seek(0)
        payload = source.read()
    done: list[tuple[int, Result]] | None = _results(payload)
    if os.waitstatus_to_exitcode(status) != 0 or done is None:
        raise WorkerFailed(f"a search process ended with status {os.waitstatus_to_exitcode(status)}")
    return done


def _results(payload: bytes) -> list[tuple[int, Any]] | None:
    """A child's results; None when its file does not end as a finished child's does (it died while
    writing). A failure it sent is raised."""
    done: list[tuple[int, Any]] = []
    offset = 0
    with memoryview(payload) as view:
        while offset < len(payload):
            tag = payload[offset : offset + 1]
            if tag == _DONE:
                return done if offset + 1 == len(payload) else None
            if tag == _FAILED:
                import pickle

                raise pickle.loads(view[offset + 1 :])  # noqa: S301 (our own child, through its own file)
            if tag != _ONE or offset + _RESULT.size > len(payload):
                return None
            _tag, index, size = _RESULT.unpack_from(payload, offset)
            offset += _RESULT.size
            if offset + size > len(payload):
                return None
            try:
                done.append((index, marshal.loads(view[offset : offset + size])))  # noqa: S302 (our own child)
            except (EOFError, ValueError, TypeError):
                return None
            offset += size
    return None


def _stop(pid: int, results: int) -> None:
    os.close(results)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
