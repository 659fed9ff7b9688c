"""The subscription hub's rules, each with an exact interleaving of producers and subscribers."""

from __future__ import annotations

import pytest

from gz_ia.collector.live import Frame, FrameSelection, Hub, InvalidSince, Lagged


def _lines(*numbers: int) -> list[bytes]:
    return [b'{"n":%d}' % n for n in numbers]


def _seqs(items: list[Frame | Lagged]) -> list[int | Lagged]:
    return [item if isinstance(item, Lagged) else item.seq for item in items]


def test_sequence_numbers_start_at_one_per_source() -> None:
    """Each source numbers its frames from 1, independently of the others."""
    hub = Hub(epoch="e1")
    assert hub.publish("/a", "s1", _lines(1, 2)) == 2
    assert hub.publish("/b", "s2", _lines(3)) == 1
    assert hub.publish("/a", "s1", _lines(4)) == 3
    assert [frame.seq for frame in hub.rings["/a"].frames] == [1, 2, 3]
    assert [frame.seq for frame in hub.rings["/b"].frames] == [1]


def test_each_hub_draws_its_own_epoch() -> None:
    """A collector start (a new hub) has a new random epoch."""
    assert Hub().epoch != Hub().epoch


def test_live_subscriber_gets_only_what_follows() -> None:
    """Without since_seq a subscription starts with the next frame written."""
    hub = Hub(epoch="e1")
    hub.publish("/a", "s1", _lines(1, 2))
    sub = hub.subscribe("/a")
    assert not sub.ready.is_set()
    assert sub.take() == []
    hub.publish("/a", "s1", _lines(3))
    assert sub.ready.is_set()
    assert _seqs(sub.take()) == [3]
    assert not sub.ready.is_set()


def test_replay_since_seq_then_live() -> None:
    """since_seq with the hub's epoch replays what is buffered after it, then goes on live."""
    hub = Hub(epoch="e1")
    hub.publish("/a", "s1", _lines(1, 2, 3, 4))
    sub = hub.subscribe("/a", since_seq=2, epoch="e1")
    assert sub.ready.is_set()
    assert _seqs(sub.take()) == [3, 4]
    hub.publish("/a", "s1", _lines(5))
    assert _seqs(sub.take()) == [5]


def test_replay_from_zero_is_everything_buffered() -> None:
    """since_seq 0 of this epoch is the whole ring."""
    hub = Hub(epoch="e1")
    hub.publish("/a", "s1", _lines(1, 2))
    assert _seqs(hub.subscribe("/a", since_seq=0, epoch="e1").take()) == [1, 2]


def test_since_seq_in_the_future_is_refused() -> None:
    """A since_seq past the newest frame of the same epoch is invalid, not a silent wait."""
    hub = Hub(epoch="e1")
    hub.publish("/a", "s1", _lines(1, 2))
    with pytest.raises(InvalidSince) as caught:
        hub.subscribe("/a", since_seq=3, epoch="e1")
    assert (caught.value.since_seq, caught.value.newest_seq) == (3, 2)
    assert hub.subscribe("/a", since_seq=2, epoch="e1").take() == []  # exactly the newest is fine


def test_restart_with_a_new_epoch_says_lagged_then_replays_all() -> None:
    """A since_seq from an earlier epoch (a restarted collector) gets epoch_changed, then every frame buffered."""
    before = Hub(epoch="old")
    before.publish("/a", "s1", _lines(1, 2, 3))
    after = Hub(epoch="new")  # the collector restarted: numbering starts again at 1
    after.publish("/a", "s1", _lines(4, 5))
    sub = after.subscribe("/a", since_seq=3, epoch=before.epoch)
    assert _seqs(sub.take()) == [Lagged(1, 1, epoch_changed=True), 1, 2]


def test_missing_epoch_with_since_seq_is_an_epoch_change() -> None:
    """A since_seq without an epoch cannot be trusted: it is answered like another epoch's."""
    hub = Hub(epoch="e1")
    hub.publish("/a", "s1", _lines(1, 2))
    assert _seqs(hub.subscribe("/a", since_seq=1).take()) == [Lagged(1, 1, epoch_changed=True), 1, 2]


def test_ring_frame_bound_evicts_oldest_and_a_slow_subscriber_gets_lagged() -> None:
    """A subscriber slower than the producer gets Lagged(from, resume) for what was evicted, then the rest."""
    hub = Hub(epoch="e1", ring_frames=4)
    sub = hub.subscribe("/a", since_seq=0, epoch="e1")
    hub.publish("/a", "s1", _lines(1, 2))
    assert _seqs(sub.take(limit=1)) == [1]  # reads one, then falls behind
    hub.publish("/a", "s1", _lines(3, 4, 5, 6, 7))  # the producer never waits: 2 and 3 are evicted
    assert [frame.seq for frame in hub.rings["/a"].frames] == [4, 5, 6, 7]
    assert _seqs(sub.take()) == [Lagged(2, 4)]  # the batch stops at the gap
    assert _seqs(sub.take()) == [4, 5, 6, 7]
    assert not sub.ready.is_set()


def test_replay_stops_at_a_gap() -> None:
    """A replay from an evicted seq starts with the gap notice, never with the frames after it."""
    hub = Hub(epoch="e1", ring_frames=3)
    hub.publish("/a", "s1", _lines(1, 2, 3, 4, 5))
    sub = hub.subscribe("/a", since_seq=1, epoch="e1")
    assert _seqs(sub.take()) == [Lagged(2, 3)]
    assert _seqs(sub.take()) == [3, 4, 5]


def test_ring_byte_bound_evicts() -> None:
    """A ring keeps at most ring_bytes (the newest frame always stays)."""
    hub = Hub(epoch="e1", ring_bytes=3 * (6 + 96))
    hub.publish("/a", "s1", [b"x" * 6] * 5)
    assert [frame.seq for frame in hub.rings["/a"].frames] == [3, 4, 5]
    hub.publish("/a", "s1", [b"y" * 10_000])
    assert [frame.seq for frame in hub.rings["/a"].frames] == [6]


def test_global_budget_evicts_the_oldest_frame_of_all_rings() -> None:
    """Past the shared budget the oldest frame of any ring goes, and its subscriber is told."""
    size = 4 + 96
    hub = Hub(epoch="e1", total_bytes=5 * size)
    sub_a = hub.subscribe("/a", since_seq=0, epoch="e1")
    hub.publish("/a", "s1", [b"a001", b"a002"])  # global order: a1 a2
    hub.publish("/b", "s2", [b"b001", b"b002"])  # a1 a2 b1 b2
    hub.publish("/a", "s1", [b"a003"])  # a1 a2 b1 b2 a3: at the budget
    assert hub.bytes == 5 * size
    hub.publish("/b", "s2", [b"b003", b"b004"])  # over by two: a1 and a2 (the oldest of all) go
    assert [frame.seq for frame in hub.rings["/a"].frames] == [3]
    assert [frame.seq for frame in hub.rings["/b"].frames] == [1, 2, 3, 4]
    assert sub_a.ready.is_set()
    assert _seqs(sub_a.take()) == [Lagged(1, 3)]
    assert _seqs(sub_a.take()) == [3]
    hub.publish("/a", "s1", [b"a004"])  # over by one: b1 is now the oldest of all
    assert [frame.seq for frame in hub.rings["/b"].frames] == [2, 3, 4]
    assert hub.bytes == 5 * size


def test_every_frame_is_delivered_or_reported() -> None:
    """Whatever the interleaving, a subscriber sees each seq once, as a frame or inside a Lagged range."""
    hub = Hub(epoch="e1", ring_frames=8, total_bytes=20 * (8 + 96))
    sub = hub.subscribe("/a", since_seq=0, epoch="e1")
    seen: list[int] = []
    for step in range(200):
        hub.publish("/a" if step % 3 else "/b", "s", [b"%08d" % step] * (step % 7))
        if step % 5 == 0:
            for item in sub.take(limit=step % 4 + 1):
                if isinstance(item, Lagged):
                    seen.extend(range(item.from_seq, item.resume_seq))
                else:
                    seen.append(item.seq)
    while sub.ready.is_set():
        for item in sub.take():
            seen.extend(range(item.from_seq, item.resume_seq) if isinstance(item, Lagged) else [item.seq])
    assert seen == list(range(1, hub.rings["/a"].newest_seq + 1))


def test_before_the_first_subscription_frames_are_numbered_not_kept() -> None:
    """Until someone subscribes, the feed only counts (skip); a replay from before that is a gap."""
    hub = Hub(epoch="e1")
    assert not hub.buffering
    hub.skip("/a", 3)
    sub = hub.subscribe("/a", since_seq=0, epoch="e1")
    assert hub.buffering
    assert _seqs(sub.take()) == [Lagged(1, 4)]
    hub.publish("/a", "s1", _lines(4))
    assert _seqs(sub.take()) == [4]


def test_cancel_forgets_the_subscriber() -> None:
    """A cancelled subscription is no longer woken by the producer."""
    hub = Hub(epoch="e1")
    sub = hub.subscribe("/a")
    sub.cancel()
    assert sub.closed and sub not in hub.rings["/a"].subscribers
    hub.publish("/a", "s1", _lines(1))
    assert sub.ready.is_set()  # woken once by the cancel, so its reader ends


def test_selection_keeps_a_session_and_its_subtree() -> None:
    """A session's filter takes in subagents that name it as parent or root, as they appear."""
    hub = Hub(epoch="e1")
    sub = hub.subscribe("/a", since_seq=0, epoch="e1", accept=FrameSelection(["top"], subtree=True))

    def line(session: str, parent: str | None = None, action: str = "x") -> bytes:
        parent_field = f',"parent_session_id":"{parent}"' if parent else ""
        return (
            f'{{"timestamp":"2026-01-01T00:00:00Z","session_id":"{session}"{parent_field},'
            f'"action":"{action}","stage":"READ","status":"OK","agent":"t","seq":1}}'
        ).encode()

    hub.publish("/a", "top", [line("top")])
    hub.publish("/a", "other", [line("other")])
    hub.publish("/a", "child", [line("child", "top")])
    hub.publish("/a", "grandchild", [line("grandchild", "child")])
    assert [frame.session_id for frame in sub.take()] == ["top", "child", "grandchild"]  # type: ignore[union-attr]
    only_y = hub.subscribe("/a", since_seq=0, epoch="e1", accept=FrameSelection(matches=["session_id=other"]))
    assert [frame.session_id for frame in only_y.take()] == ["other"]  # type: ignore[union-attr]
