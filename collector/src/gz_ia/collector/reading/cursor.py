"""Cursors: positions in a session's stream of events, as opaque strings, found again after any rotation.

Inside, a cursor is a *boundary between two events*: the session, the ``seq`` of the event just
before the boundary, and a hint where it is (segment number and byte offset in the segment's
uncompressed content). Rotation renames a segment without changing its number or content and
compression keeps its content, so the hint stays right across any number of rotations. Before it is
used the hint is checked against ``seq`` (the line before the boundary must carry it, see
:func:`verify`); if the check fails the boundary is found again by ``seq`` (:func:`relocate`), which
the collector assigns per session without gaps. So a cursor never skips and never repeats an event.
Cursors of :func:`combine_cursors` hold one boundary per session and resume a multi-session follow.
A cursor carries its root's epoch, so a root rebuilt at the same path refuses the old one.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import msgspec

from gz_ia.client.schema import is_safe_session_id
from gz_ia.collector.errors import CollectorError
from gz_ia.collector.storage.roots import RootDirs
from gz_ia.collector.storage.segments import Segment

from .segments import (
    Missing,
    RootNotFound,
    SessionNotFound,
    SessionView,
    lines_backward,
    lines_forward,
    open_dirs,
    root_view,
    seq_of,
)

__all__ = [
    "InvalidCursor",
    "Position",
    "check_cursor",
    "check_epoch",
    "combine_cursors",
    "cursor_segment",
    "cursor_seq",
    "cursor_sessions",
    "decode_cursor",
    "decode_cursor_epoch",
    "end_cursor",
    "end_position",
    "relocate",
    "single_position",
    "verify",
]

_CURSOR_TAG: Final = "c1"
_MULTI_TAG: Final = "m1"
_EPOCH_CURSOR_TAG: Final = "c2"
_EPOCH_MULTI_TAG: Final = "m2"
"""Cursors of a root with an epoch carry it (``c1``/``m1``: of a root made before roots had one)."""
_encode: Final = msgspec.msgpack.Encoder().encode


class InvalidCursor(CollectorError, ValueError):
    """The cursor was not made by this reader, belongs to another session, or to another root.

    A root rebuilt at the same path has a new epoch, so a cursor of the old one is refused here
    rather than silently read as a position in unrelated events.
    """


class Position(msgspec.Struct, frozen=True):
    """A boundary: after event ``seq``, at ``offset`` bytes into segment ``segment``."""

    session_id: str
    segment: int
    offset: int
    seq: int

    def encode(self, epoch: str = "") -> str:
        """Return the cursor string; ``epoch`` is the root's (see :class:`RootDirs`)."""
        return encode_position(self.session_id, self.segment, self.offset, self.seq, epoch)


_URL_SAFE: Final = bytes.maketrans(b"+/", b"-_")


def encode_position(session_id: str, segment: int, offset: int, seq: int, epoch: str = "") -> str:
    """:meth:`Position.encode` without making a :class:`Position` (a search gives every match a cursor)."""
    raw = _encode(
        (_EPOCH_CURSOR_TAG, session_id, segment, offset, seq, epoch)
        if epoch
        else (_CURSOR_TAG, session_id, segment, offset, seq)
    )
    # base64.urlsafe_b64encode, unpadded, without its two Python calls.
    return binascii.b2a_base64(raw, newline=False).translate(_URL_SAFE).rstrip(b"=").decode()


def _unpack(cursor: str) -> object:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return msgspec.msgpack.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise InvalidCursor(f"{cursor!r} is not a gz-ia cursor") from exc


def _position_of(session_id: object, segment: object, offset: object, seq: object) -> Position:
    if not isinstance(session_id, str) or not is_safe_session_id(session_id):
        raise InvalidCursor("malformed cursor")
    numbers = [value for value in (segment, offset, seq) if isinstance(value, int) and not isinstance(value, bool)]
    if len(numbers) != 3 or numbers[0] < 1 or numbers[1] < 0 or numbers[2] < 0:
        raise InvalidCursor("malformed cursor")
    return Position(session_id, numbers[0], numbers[1], numbers[2])


def decode_cursor_epoch(cursor: str) -> tuple[dict[str, Position], str]:
    """Return a cursor's boundaries and the epoch of the root it was made on ("" when it has none)."""
    value = _unpack(cursor)
    if not isinstance(value, list) or not value:
        raise InvalidCursor(f"{cursor!r} is not a gz-ia cursor")
    epoch = ""
    if value[0] in (_EPOCH_CURSOR_TAG, _EPOCH_MULTI_TAG):
        epoch = value.pop()
        if not isinstance(epoch, str) or not epoch:
            raise InvalidCursor("malformed cursor")
        value[0] = _CURSOR_TAG if value[0] == _EPOCH_CURSOR_TAG else _MULTI_TAG
    if len(value) == 5 and value[0] == _CURSOR_TAG:
        position = _position_of(*value[1:])
        return {position.session_id: position}, epoch
    if len(value) == 2 and value[0] == _MULTI_TAG and isinstance(value[1], dict):
        positions: dict[str, Position] = {}
        for session_id, parts in value[1].items():
            if not isinstance(parts, list) or len(parts) != 3:
                raise InvalidCursor("malformed cursor")
            positions[session_id] = _position_of(session_id, *parts)
        return positions, epoch
    raise InvalidCursor(f"{cursor!r} is not a gz-ia cursor")


def decode_cursor(cursor: str) -> dict[str, Position]:
    """Return a cursor's boundaries, one per session.

    Raises:
        InvalidCursor: not a cursor of this reader.
    """
    return decode_cursor_epoch(cursor)[0]


def check_epoch(epoch: str, dirs: RootDirs) -> None:
    """Refuse a cursor made on another root (or on this path before the root was rebuilt)."""
    if epoch and epoch != dirs.epoch:
        raise InvalidCursor(
            f"the cursor was made on another session root (epoch {epoch}, this root at {dirs.path} has "
            f"{dirs.epoch or 'none'}): the root was rebuilt or replaced, so its positions mean nothing here"
        )


def single_position(cursor: str, session_id: str, dirs: RootDirs | None = None) -> Position:
    """Return a cursor's boundary in ``session_id``, checked against the root of ``dirs`` when given.

    Raises:
        InvalidCursor: not a cursor of this reader, none for that session, or made on another root.
    """
    positions, epoch = decode_cursor_epoch(cursor)
    if dirs is not None:
        check_epoch(epoch, dirs)
    position = positions.get(session_id)
    if position is None:
        raise InvalidCursor(f"the cursor does not belong to session {session_id!r}")
    return position


def combine_cursors(cursors: Iterable[str]) -> str:
    """Return one cursor holding, per session, the last boundary among ``cursors`` (single or combined).

    Resume a multi-session :func:`follow` (``gz-ia logs -f --after-cursor``) from it.

    Raises:
        InvalidCursor: the cursors were made on different roots.
    """
    merged: dict[str, Position] = {}
    epochs: set[str] = set()
    for cursor in cursors:
        positions, epoch = decode_cursor_epoch(cursor)
        merged.update(positions)
        epochs.add(epoch)
    epochs.discard("")
    if len(epochs) > 1:
        raise InvalidCursor("the cursors were made on different session roots")
    table = {key: [value.segment, value.offset, value.seq] for key, value in sorted(merged.items())}
    epoch = next(iter(epochs), "")
    raw = msgspec.msgpack.encode([_EPOCH_MULTI_TAG, table, epoch] if epoch else [_MULTI_TAG, table])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_seq(cursor: str, session_id: str) -> int:
    """Return the ``seq`` of the event right before a cursor's boundary in ``session_id``.

    Raises:
        InvalidCursor: not a cursor of this reader, or none for that session.
    """
    return single_position(cursor, session_id).seq


def cursor_segment(cursor: str, session_id: str) -> int:
    """Return the segment number a cursor's boundary in ``session_id`` lies in (what follows is there or later).

    Raises:
        InvalidCursor: not a cursor of this reader, or none for that session.
    """
    return single_position(cursor, session_id).segment


def cursor_sessions(cursor: str) -> list[str]:
    """Return the session ids a cursor holds a boundary for.

    Raises:
        InvalidCursor: not a cursor of this reader.
    """
    return sorted(decode_cursor(cursor))


def verify(view: SessionView, position: Position) -> bool:
    """Tell whether the boundary hint still sits right after event ``position.seq``."""
    segment = view.get(position.segment)
    if not isinstance(segment, Segment) or position.offset > segment.size:
        return False
    if position.offset > 0:
        if segment.read(position.offset - 1, 1) != b"\n":
            return False
        before = next(lines_backward(segment, position.offset), None)
        return before is not None and seq_of(before[3]) == position.seq
    after = next(lines_forward(segment, 0), None)
    return after is None or seq_of(after[3]) == position.seq + 1


def relocate(view: SessionView, seq: int) -> Position | None:
    """Find the boundary right after event ``seq`` by its number; None when it is no longer retained."""
    number = view.active_number
    while number >= 1:
        found = view.get(number)
        if isinstance(found, Missing) and number != view.active_number:
            break
        if isinstance(found, Segment):
            first = next((s for line in lines_forward(found, 0) if (s := seq_of(line[3])) is not None), None)
            if first is not None and first <= seq + 1:
                if first == seq + 1:
                    return Position(view.session_id, number, 0, seq)
                end = _end_of_seq(found, seq)
                return Position(view.session_id, number, end, seq) if end is not None else None
        view.release(number)
        number -= 1
    return None


_BLOCK: Final = 1 << 20


def _end_of_seq(segment: Segment, seq: int) -> int | None:
    """The offset right after the complete line of ``segment`` whose ``seq`` is ``seq``, or None.

    The line is found by its bytes, ``"seq":N`` as the collector writes it, each candidate checked
    by decoding its own ``seq`` (an attribute named ``seq``, or a greater number that starts with
    the same digits, is passed over): a scan that decoded every line before it took a second for a
    seq deep in a big segment.
    """
    needle = b'"seq":%d' % seq
    position = 0
    while position < segment.size:
        block = segment.read(position, _BLOCK)
        complete = block.rfind(b"\n") + 1
        if complete == 0:
            if len(block) < _BLOCK:
                return None  # a torn last line: not stored yet
            return _end_by_lines(segment, position, seq)  # a line longer than a block
        found = block.find(needle, 0, complete)
        while found >= 0:
            start = block.rfind(b"\n", 0, found) + 1
            end = block.index(b"\n", found)
            if seq_of(block[start:end]) == seq:
                return position + end + 1
            found = block.find(needle, found + 1, complete)
        position += complete
    return None


def _end_by_lines(segment: Segment, offset: int, seq: int) -> int | None:
    for _n, _start, end, raw in lines_forward(segment, offset):
        if seq_of(raw) == seq:
            return end
    return None


def check_cursor(root: Path, cursor: str) -> None:
    """Check that ``cursor`` was made by this reader on this root (not on a root since rebuilt).

    Raises:
        InvalidCursor: it was not.
        RootNotFound: nothing exists at ``root``.
    """
    _positions, epoch = decode_cursor_epoch(cursor)
    try:
        dirs = open_dirs(root)
    except RootNotFound:
        raise
    except SessionNotFound:
        if epoch:
            raise InvalidCursor("the cursor was made on another session root: nothing is stored here yet") from None
        return
    try:
        check_epoch(epoch, dirs)
    finally:
        dirs.close()


def end_cursor(root: Path, session_id: str) -> str:
    """Return the cursor right after the session's newest event (follow from it for new events only).

    Raises:
        SessionNotFound: nothing stored for the session.
    """
    with root_view(root, session_id) as view:
        return end_position(view).encode(view.dirs.epoch)


def end_position(view: SessionView) -> Position:
    """Return the boundary after the view's newest event (segment start when it has none)."""
    for number, _start, end, raw in view.backward(view.active_number, None):
        seq = seq_of(raw)
        if seq is not None:
            return Position(view.session_id, number, end, seq)
    return Position(view.session_id, view.active_number, 0, 0)
