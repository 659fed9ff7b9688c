"""A question that reads every file is shared among forked processes: every chunk once, each result
back in order, a child's failure raised in the caller, and no fork from a process running threads.

The forking cases run in a fresh interpreter: the test runner's own worker may run threads, and then
(rightly) nothing forks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from gz_ia.collector.query import _fanout

from .test_query import _empty_root, _write_session

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="sharing work among processes needs two CPUs")


def _run_script(body: str) -> dict[str, object]:
    """Run ``body`` in a fresh interpreter (one thread); it prints one JSON object, returned here."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


def test_every_chunk_is_worked_once_by_several_processes_and_comes_back_in_order() -> None:
    answer = _run_script(
        """
        import json, os, time
        from gz_ia.collector.query import _fanout

        def work(chunk):
            time.sleep(0.005)  # long enough that the child claims some before the caller has them all
            return [chunk, os.getpid()]

        before = sorted(os.listdir("/proc/self/fd"))
        results = _fanout.run(work, list(range(60)))
        after = sorted(os.listdir("/proc/self/fd"))
        print(json.dumps({"results": results, "caller": os.getpid(), "fds": [before, after]}))
        """
    )
    fds = answer["fds"]
    assert isinstance(fds, list)
    assert fds[1] == fds[0]  # each child's results file is closed once read
    results = answer["results"]
    assert isinstance(results, list)
    assert [chunk for chunk, _pid in results] == list(range(60))
    pids = {pid for _chunk, pid in results}
    assert answer["caller"] in pids
    assert len(pids) >= 2


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        ("raise ValueError('bad chunk')", "ValueError: bad chunk"),
        ("os.kill(os.getpid(), signal.SIGKILL)", "WorkerFailed: a search process ended with status -9"),
        ("return object()", "ValueError: unmarshallable object"),
    ],
    ids=["raises", "is-killed", "sends-what-cannot-be-sent"],
)
def test_a_child_that_fails_makes_the_call_fail_not_answer_short(failure: str, expected: str) -> None:
    answer = _run_script(
        f"""
        import json, os, signal, time
        from gz_ia.collector.query import _fanout

        caller = os.getpid()

        def work(chunk):
            if os.getpid() != caller:
                {failure}
            time.sleep(0.005)
            return chunk

        try:
            _fanout.run(work, list(range(60)))
        except Exception as exc:
            print(json.dumps({{"error": f"{{type(exc).__name__}}: {{exc}}"}}))
        else:
            print(json.dumps({{"error": None}}))
        """
    )
    assert answer["error"] == expected


def test_a_caller_running_threads_does_the_work_itself() -> None:
    """A lock another thread holds at a fork stays held forever in the child: no fork then."""
    done = threading.Event()
    thread = threading.Thread(target=done.wait)
    thread.start()
    try:
        results = _fanout.run(lambda chunk: (chunk, os.getpid()), list(range(20)))
    finally:
        done.set()
        thread.join()
    assert results == [(chunk, os.getpid()) for chunk in range(20)]


def test_a_search_over_many_sessions_forks_and_finds_every_match_once(tmp_path: Path) -> None:
    """Hundreds of sessions (several chunks, however many a pipe may hold) read by several processes:
    every match once, in time order, and a damaged session met by a child still reaches the careful
    reader, which reports it."""
    _empty_root(tmp_path)
    expected: list[str] = []
    for number in range(600):
        tools = ["Bash", "WebFetch", "Read"] if number % 3 == 0 else ["Bash", "Read"]
        lines = _write_session(tmp_path, f"s-{number:04d}", tools)
        expected += [line for line in lines if "WebFetch" in line]
    damaged = tmp_path / "sessions" / "s-0300.events.jsonl"
    good = damaged.read_bytes().split(b"\n")
    damaged.write_bytes(b"\n".join([good[0], b'{"attrs":{"tool":"WebFetch"},"garbled', *good[2:]]))
    expected.remove(next(line for line in expected if '"s-0300"' in line))
    answer = _run_script(
        f"""
        import json, os
        from pathlib import Path
        from gz_ia.collector.query import Selection, _fanout, parse_matches, search
        from gz_ia.collector.reading import Filters

        forks = []
        real_fork = os.fork

        def counted_fork():
            pid = real_fork()
            if pid:
                forks.append(pid)
            return pid

        os.fork = counted_fork
        _fanout.MAX_CHUNKS = 3  # as a root of 3 x 128 x 1024 sessions has it: fewer, larger chunks
        gaps = []
        found = list(search(
            Path({str(tmp_path)!r}),
            Filters(),
            Selection(matches=parse_matches(["attrs.tool=WebFetch"])),
            on_gap=lambda gap: gaps.append(gap.session_id),
        ))
        lines = [entry.line for entry in found]
        events = [[entry.event.session_id, entry.event.seq] for entry in found]
        print(json.dumps({{"lines": lines, "events": events, "forks": len(forks), "gaps": gaps}}))
        """
    )
    assert answer["forks"]
    assert answer["gaps"] == ["s-0300"]
    found = answer["lines"]
    assert isinstance(found, list)
    assert sorted(found) == sorted(expected)
    times = [json.loads(line)["timestamp"] for line in found]
    assert times == sorted(times)
    # A child sends lines without their events: each entry's event is its own line's.
    assert answer["events"] == [[json.loads(line)["session_id"], json.loads(line)["seq"]] for line in found]


def test_more_chunks_than_the_smallest_pipe_holds_are_read_in_the_caller() -> None:
    """Every claim is written before any process reads; past what one pipe page holds, no fork."""
    answer = _run_script(
        """
        import json, os
        from gz_ia.collector.query import _fanout

        chunks = list(range(_fanout.MAX_CHUNKS + 1))
        results = _fanout.run(lambda chunk: [chunk, os.getpid()], chunks)
        print(json.dumps({"results": results, "caller": os.getpid()}))
        """
    )
    results = answer["results"]
    assert isinstance(results, list)
    assert [chunk for chunk, _pid in results] == list(range(len(results)))
    assert {pid for _chunk, pid in results} == {answer["caller"]}
