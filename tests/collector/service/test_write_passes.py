"""Which write passes run on the event loop and which in the worker thread.

A worker thread pays for every ``write(2)`` with a wait for the GIL, which the busy loop holds for
up to the switch interval, so the same pass takes far longer there than on the loop. So appends to
files already open are written on the loop (in parts, see ``test_write_failures.py`` beside this
file), and only passes that create files or close rotated-out descriptors go to the thread, where
their waits overlap the loop.
"""

from __future__ import annotations

from gz_ia.collector.service.write_passes import _INLINE_OPENS, _plain
from gz_ia.collector.storage.open_files import AppendFile
from gz_ia.collector.storage.writer import FlushJob


def _job(opened: int, unopened: int, *, retired: int = 0) -> FlushJob:
    items = []
    for index in range(opened + unopened):
        target = AppendFile(-1, f"f{index}")
        target.fd = 1000 + index if index < opened else None
        items.append((target, b"{}\n"))
    return FlushJob(items, list(range(retired)), 0.0, [], {})


def test_appends_to_open_files_run_on_the_loop_however_many() -> None:
    assert _plain(_job(1, 0))
    assert _plain(_job(10_000, 0))


def test_a_pass_with_files_to_create_goes_to_the_thread_beyond_a_couple() -> None:
    assert _plain(_job(10, _INLINE_OPENS))  # a new session at a moderate rate: no hand-over
    assert not _plain(_job(10, _INLINE_OPENS + 1))


def test_a_pass_with_retired_descriptors_goes_to_the_thread() -> None:
    """Rotated-out descriptors are closed (and synced when durable) by the pass."""
    assert not _plain(_job(1, 0, retired=1))
