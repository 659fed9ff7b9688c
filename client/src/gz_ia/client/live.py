"""Subscribing to what a running collector writes: replayable, and never ending in silence.

:class:`Subscriber` opens its own connection to the collector (the same socket as the events),
asks for a subscription (:class:`~.protocol.Subscribe`) and yields what comes: :class:`LiveEvent`
for each written event and :class:`Gap` where frames will not come (evicted before they were read,
or a collector restart, ``epoch_changed``). Keep :attr:`Subscriber.epoch` and the last
:attr:`LiveEvent.seq` to resume after a reconnect: what is still buffered is replayed.

Blocking and standard-library only, like the rest of the thin client (docs/protocol.md).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Final

import msgspec

from . import env, trust
from .errors import CollectorUnavailable, ProtocolError
from .protocol import (
    Cancel,
    Ended,
    Error,
    FrameReader,
    Frames,
    Lagged,
    RejectReason,
    Subscribe,
    Subscribed,
    encode_frame,
    live_message_decoder,
)

__all__ = ["Gap", "LiveEvent", "Subscriber", "SubscriptionRefused"]

_RECEIVE: Final = 1 << 18


class LiveEvent(msgspec.Struct, frozen=True):
    """One written event: its ``seq`` in the subscription's source and its stored JSON line."""

    seq: int
    line: bytes


class Gap(msgspec.Struct, frozen=True):
    """Frames ``from_seq`` to ``resume_seq - 1`` will not come; ``epoch_changed``: the collector
    restarted (or no epoch was given) and delivery starts again with what it has buffered."""

    from_seq: int
    resume_seq: int
    epoch_changed: bool = False


class SubscriptionRefused(ProtocolError):
    """The collector refused the subscription (the caller's: a ``since_seq`` past the newest
    frame, a bad ``FIELD=VALUE``, another user, a sharded collector). ``.reason``, ``.detail``."""

    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Subscriber:
    """One live subscription to the events of a session root.

    Args:
        root: the session root (``.harness`` directory); default: the one found like ``.git``.
        since_seq: replay the frames after this one (of ``epoch``) still buffered; None: live only.
        epoch: the epoch ``since_seq`` belongs to (:attr:`epoch` of an earlier subscriber).
        sessions: only these sessions (None: all).
        subtree: and the subagent sessions below them, as they appear.
        matches: ``FIELD=VALUE`` arguments, as ``gz-ia logs`` takes them.
        socket_path: the collector's socket (default: ``$GZ_IA_SOCKET`` or the per-user default).
        timeout: seconds to connect and to wait for the answer to the subscription.

    Raises:
        CollectorUnavailable: no collector answers on the socket.
        SubscriptionRefused: the collector refused the subscription.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        since_seq: int | None = None,
        epoch: str = "",
        sessions: Iterable[str] | None = None,
        subtree: bool = False,
        matches: Iterable[str] = (),
        socket_path: str | os.PathLike[str] | None = None,
        timeout: float = 5.0,
    ) -> None:
        path = os.fspath(socket_path) if socket_path is not None else str(env.default_socket_path())
        self.root = os.fspath(root) if root is not None else env.locate_root()
        self._reader = FrameReader()
        self._pending: list[bytes] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            trust.connect(self._sock, path)
            request = Subscribe(
                root=os.path.abspath(self.root),
                since_seq=since_seq,
                epoch=epoch,
                sessions=None if sessions is None else list(sessions),
                subtree=subtree,
                matches=list(matches),
            )
            try:
                self._sock.sendall(encode_frame(request))
            except (BrokenPipeError, ConnectionResetError):
                # A collector that refuses this process (another uid, too many connections) says why
                # and closes at once, perhaps before the request is even sent: read why.
                answer = self._said_before_closing()
            else:
                answer = self._next()
        except OSError as exc:
            self._sock.close()
            raise CollectorUnavailable(f"cannot subscribe on {path}: {exc}", socket_path=path) from exc
        except BaseException:
            self._sock.close()
            raise
        if isinstance(answer, Error):
            self._sock.close()
            raise SubscriptionRefused(answer.reason, answer.detail)
        if not isinstance(answer, Subscribed):
            self._sock.close()
            raise ProtocolError(f"expected a subscribed frame, got {type(answer).__name__}")
        self.id = answer.subscription
        self.epoch = answer.epoch
        """The collector's epoch: pass it back with a ``since_seq`` to resume."""
        self.newest_seq = answer.newest_seq
        """The source's newest seq when the subscription began."""
        self._sock.settimeout(None)
        self._path = path
        self._ended = False

    def _said_before_closing(self) -> Subscribed | Frames | Lagged | Ended | Error:
        """The collector's answer already received on a connection it closed (its refusal)."""
        try:
            return self._next()
        except (OSError, ProtocolError):
            raise BrokenPipeError("the collector closed the connection without saying why") from None

    def _next(self) -> Subscribed | Frames | Lagged | Ended | Error:
        while not self._pending:
            data = self._sock.recv(_RECEIVE)
            if not data:
                raise ConnectionResetError("the collector closed the subscription's connection")
            self._pending += self._reader.feed(data)
        try:
            return live_message_decoder.decode(self._pending.pop(0))
        except msgspec.DecodeError as exc:
            raise ProtocolError(f"undecodable frame from the collector: {exc}") from exc

    def fileno(self) -> int:
        """The connection's descriptor, for ``select`` (data may also wait in :meth:`ready`)."""
        return self._sock.fileno()

    def ready(self) -> bool:
        """Whether a message is already received and waits to be read."""
        return bool(self._pending)

    def settimeout(self, timeout: float | None) -> None:
        """Bound each wait for the next message (``TimeoutError`` past it); None: wait for ever."""
        self._sock.settimeout(timeout)

    def receive(self) -> list[LiveEvent | Gap]:
        """Wait for the next message and return what it carries ([] once the subscription ended).

        Raises:
            CollectorUnavailable: the collector went away (resume with :attr:`epoch` and the last seq).
            TimeoutError: nothing came within the timeout set by :meth:`settimeout`.
        """
        if self._ended:
            return []
        try:
            message = self._next()
        except OSError as exc:
            if isinstance(exc, TimeoutError):
                raise
            raise CollectorUnavailable(f"the subscription's connection failed: {exc}", socket_path=self._path) from exc
        match message:
            case Frames():
                return [LiveEvent(seq, line) for seq, line in zip(message.seqs, message.lines, strict=True)]
            case Lagged():
                return [Gap(message.from_seq, message.resume_seq, message.epoch_changed)]
            case Ended():
                self._ended = True
                return []
            case Error():
                raise SubscriptionRefused(message.reason, message.detail)
            case _:
                raise ProtocolError(f"unexpected {type(message).__name__} frame on a subscription")

    def __iter__(self) -> Iterator[LiveEvent | Gap]:
        while not self._ended:
            yield from self.receive()

    def cancel(self) -> None:
        """Ask the collector to end the subscription (iteration stops after its last frames)."""
        with contextlib.suppress(OSError):
            self._sock.sendall(encode_frame(Cancel(subscription=self.id)))

    def close(self) -> None:
        """Close the connection (which ends the subscription)."""
        self._ended = True
        self._sock.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
