"""Work spread over forked processes: a question that must read every file uses every core.

Threads do not help here: the search between two reads holds the GIL, so a second thread only
overlaps the first one's system calls. Forked processes share nothing but what they inherit at the
fork (the open root, the listing, the compiled question) and each send back what they found.

Work is handed out in chunks through a pipe that every process reads four bytes at a time (a read
of at most ``PIPE_BUF`` bytes is atomic), so a process that drew small sessions takes more chunks.
A process forks only while it runs a single thread: a lock another thread held at the fork would
never be released in the child. Elsewhere, and for work too small to be worth a fork, the chunks
are read here, one after the other.
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

_DONE: Final = b"\x00"
"""The first byte of a child's payload when its marshalled results follow."""
_FAILED: Final = b"\x01"
"""The first byte of a child's payload when its pickled exception follows."""
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
        for pid, results_read in children:  # the caller failed or was interrupted: stop the rest
            _stop(pid, results_read)
    return [results[index] for index in range(len(chunks))]


def _claim_and_work(
    work: Callable[[Chunk], Result], chunks: Sequence[Chunk], claims: int
) -> Iterator[tuple[int, Result]]:
    while claim := os.read(claims, _CLAIM.size):
        (index,) = _CLAIM.unpack(claim)
        yield index, work(chunks[index])


def _fork(work: Callable[[Chunk], Result], chunks: Sequence[Chunk], claims: int) -> tuple[int, int]:
    results_read, results_write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(results_write)
        return pid, results_read
    # The child: never return into the caller's code, never run its exit handlers or flush its buffers.
    code = 1
    try:
        os.close(results_read)
        try:
            # Each result is marshalled as soon as it is made, while the caller still works: at the
            # end only their concatenation remains to send.
            done = [(index, _marshalled(result)) for index, result in _claim_and_work(work, chunks, claims)]
            payload = _DONE + marshal.dumps(done)
        except BaseException as exc:  # sent to the parent, which raises it
            import pickle

            payload = _FAILED + pickle.dumps(exc, pickle.HIGHEST_PROTOCOL)
        with open(results_write, "wb") as sink:
            sink.write(payload)
        code = 0
    finally:
        os._exit(code)


def _marshalled(result: Any) -> bytes:
    return marshal.dumps(result)  # ValueError for what it cannot write: the call fails, loudly


def _collect(pid: int, results_read: int) -> list[tuple[int, Result]]:
    try:
        with open(results_read, "rb") as source:
            payload = source.read()
        # Decoded while the child's exit is under way; kept only if it then ends well.
        done: list[tuple[int, Result]] | None = _results(payload)
    finally:
        _, status = os.waitpid(pid, 0)
    if payload.startswith(_FAILED):
        import pickle

        raise pickle.loads(payload[1:])  # noqa: S301 (our own child, over a private pipe)
    if os.waitstatus_to_exitcode(status) != 0 or done is None:
        raise WorkerFailed(f"a search process ended with status {os.waitstatus_to_exitcode(status)}")
    return done


def _results(payload: bytes) -> list[tuple[int, Any]] | None:
    """A child's results, or None when it sent none (it failed, or died while sending)."""
    if not payload.startswith(_DONE):
        return None
    try:
        sent: list[tuple[int, bytes]] = marshal.loads(payload[1:])  # noqa: S302 (our own child, over a private pipe)
        return [(index, marshal.loads(result)) for index, result in sent]  # noqa: S302
    except (EOFError, ValueError, TypeError):
        return None


def _stop(pid: int, results_read: int) -> None:
    os.close(results_read)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
