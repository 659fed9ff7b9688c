"""The client agents hold: :class:`Client`, for threads and scripts (``AsyncClient`` wraps it for asyncio).

It owns one background :class:`~gz_ia.client._sender.Sender`. ``log()`` stamps the time and hands
the call over (the call is judged, built and encoded when the queue is next moved, in a batch);
``send()`` builds the event at once and waits for the collector's verdict.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from . import env
from ._delivery import SenderStats, Verdict
from .errors import CollectorUnavailable
from .limits import MAX_ATTR_INT, MIN_ATTR_INT
from .schema import (
    FAILED,
    MAX_ACTION_LENGTH,
    MAX_AGENT_LENGTH,
    MAX_ATTR_KEY_LENGTH,
    MAX_ATTR_STRING_LENGTH,
    MAX_ATTRS,
    MAX_ERROR_LENGTH,
    AttrValue,
    LogEvent,
    Stage,
    Status,
    fit_event,
    fit_fields,
    fits,
)

if TYPE_CHECKING:
    import concurrent.futures

    from ._sender import Sender

INBOX_EVENTS: Final = 128
"""The sender's (``gz_ia.client._sender.INBOX_EVENTS``): held here, where the sockets and threads the
sender imports are not loaded until a client is made; a test checks that the two agree."""

__all__ = ["Client", "build_event"]

_encoder: Final = msgspec.msgpack.Encoder()
_encode: Final = _encoder.encode
# Plain dict lookups: StrEnum(value) costs more than building the whole event.
_STAGES: Final[dict[object, Stage]] = {**{stage.value: stage for stage in Stage}, **{stage: stage for stage in Stage}}
_STATUSES: Final[dict[object, Status]] = {
    **{status.value: status for status in Status},
    **{status: status for status in Status},
}


_RECORD_FIELDS: Final = (
    "timestamp", "session_id", "action", "stage", "status", "agent",
    "parent_session_id", "role", "duration_ms", "error", "attrs", "cycle", "root_session_id",
)  # fmt: skip


def _positional_record() -> Callable[..., msgspec.Struct]:
    """A Struct with :class:`LogEvent`'s fields, the required ones first, that ``log()`` builds
    positionally and only encodes: a positional constructor costs half of LogEvent's keyword one,
    and the MessagePack map it encodes to is the same (field order aside), so the collector decodes
    it as a LogEvent. Derived from LogEvent, so the two cannot drift apart."""
    fields = msgspec.structs.fields(LogEvent)
    required: list[Any] = [(field.name, object) for field in fields if field.required]
    optional: list[Any] = [(field.name, object, field.default) for field in fields if not field.required]
    record = msgspec.defstruct("_LogRecord", [*required, *optional], omit_defaults=True, gc=False)
    if record.__struct_fields__ != _RECORD_FIELDS:  # log() passes them in this order
        raise RuntimeError(f"LogEvent's fields changed: {record.__struct_fields__}; update log()")
    return record


_LogRecord: Final = _positional_record()


LogCall = tuple[Any, ...]
"""The arguments of one ``log()`` call, its time in nanoseconds first, as :func:`_encode_call` takes them."""


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
time_ns: Final = time.time_ns
_pack_timestamp64: Final = struct.Struct(">Q").pack
_TimestampExt: Final = msgspec.msgpack.Ext
_TIMESTAMP_TYPE: Final = -1
"""MessagePack's timestamp extension, what msgspec writes for a datetime and reads back as one."""


def _timestamp(nanoseconds: int) -> msgspec.msgpack.Ext | datetime:
    """The UTC time of ``time.time_ns()`` cut to the microsecond, as ``datetime.now(UTC)`` gives it,
    ready to encode.

    The 8-byte MessagePack timestamp is made from the integers: building a datetime to have
    msgspec write those same bytes costs more (the sender runs this for every event, and a
    datetime's machinery is one more thing to bring back into cold caches). Outside 1970-2514,
    which that form cannot carry, it is a datetime.
    """
    microseconds = nanoseconds // 1000
    seconds, fraction = divmod(microseconds, 1_000_000)
    if 0 <= seconds < 1 << 34:
        return _TimestampExt(_TIMESTAMP_TYPE, _pack_timestamp64(fraction * 1000 << 34 | seconds))
    return _EPOCH + timedelta(microseconds=microseconds)


def _encode_call(call: LogCall) -> bytes:
    """Judge, build, cut to its limits and encode the event of one ``log()`` call.

    Raises:
        ValueError: ``stage`` or ``status`` is not a known value, or FAILED comes without ``error``.
        ValueError, TypeError, OverflowError: the event cannot be built (a value of the wrong type,
            an int past 64 bits outside ``attrs``).
    """
    (
        nanoseconds, session_id, action, stage, status, agent, parent_session_id, role, duration_ms, error, attrs,
        cycle, root_session_id,
    ) = call  # fmt: skip
    try:
        stage = _STAGES[stage]
        status = _STATUSES[status]
    except (KeyError, TypeError):
        stage, status = _stage(stage), _status(status)  # one raises the ValueError naming what is wrong
    if status is FAILED and not error:
        raise ValueError("status FAILED requires a non-empty error")
    record = _LogRecord(
        _timestamp(nanoseconds),
        session_id,
        action,
        stage,
        status,
        agent,
        parent_session_id,
        role,
        duration_ms,
        error,
        attrs,
        cycle,
        root_session_id,
    )
    for name, value in (("action", action), ("agent", agent)):
        if not isinstance(value, str):  # msgspec encodes what it is given; the schema wants text
            raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    try:
        body = _encode(record)
    except OverflowError:  # an int attribute past 64 bits: made storable below
        body = b""
        cut = True
    else:
        # Cut what is past its limit rather than lose the event. Cheap tests first: no attribute
        # value can be past its limit in a body shorter than that limit.
        cut = (
            len(action) > MAX_ACTION_LENGTH
            or len(agent) > MAX_AGENT_LENGTH
            or (role is not None and len(role) > MAX_AGENT_LENGTH)
            or (error is not None and len(error) > MAX_ERROR_LENGTH)
        )
    if isinstance(attrs, dict) and not cut:  # anything else: nothing to cut, the collector judges it
        cut = len(attrs) > MAX_ATTRS or len(body) > MAX_ATTR_STRING_LENGTH
        for key, value in attrs.items():
            # A long key, or a value JSON cannot carry as it is (storable() says how it is stored):
            # a NaN or an infinity, an int past 2^63 - 1.
            if (
                len(key) > MAX_ATTR_KEY_LENGTH
                or (isinstance(value, float) and value - value != 0.0)
                or (isinstance(value, int) and not MIN_ATTR_INT <= value <= MAX_ATTR_INT)
            ):
                cut = True
                break
    if cut and not fits(action, agent, role, error, attrs):
        action, agent, role, error, attrs = fit_fields(action, agent, role, error, attrs)
        record = msgspec.structs.replace(record, action=action, agent=agent, role=role, error=error, attrs=attrs)
        body = _encode(record)
    if not body:  # past 64 bits in another field than attrs: nothing can store it
        raise ValueError("an int field is outside the 64-bit range")
    return body


def _stage(value: Stage | str) -> Stage:
    try:
        return _STAGES[value]
    except (KeyError, TypeError):
        raise ValueError(f"stage must be READ, PENDING or FINISH, not {value!r}") from None


def _status(value: Status | str) -> Status:
    try:
        return _STATUSES[value]
    except (KeyError, TypeError):
        raise ValueError(f"status must be OK or FAILED, not {value!r}") from None


def build_event(
    *,
    session_id: str,
    action: str,
    stage: Stage | str,
    agent: str,
    status: Status | str = Status.OK,
    role: str | None = None,
    parent_session_id: str | None = None,
    duration_ms: int | None = None,
    error: str | None = None,
    attrs: dict[str, AttrValue] | None = None,
    timestamp: datetime | None = None,
    cycle: str | None = None,
    root_session_id: str | None = None,
) -> LogEvent:
    """Build a :class:`LogEvent`, stamping it now (UTC) unless ``timestamp`` is given.

    Free-text fields past their limits are cut and marked (:func:`~gz_ia.client.schema.fit_fields`).

    Raises:
        ValueError: ``stage`` or ``status`` is not a known value, or FAILED comes without ``error``.
    """
    return fit_event(
        LogEvent(
            timestamp=timestamp if timestamp is not None else datetime.now(UTC),
            session_id=session_id,
            parent_session_id=parent_session_id,
            action=action,
            stage=_stage(stage),
            status=_status(status),
            agent=agent,
            role=role,
            duration_ms=duration_ms,
            error=error,
            attrs=attrs,
            cycle=cycle,
            root_session_id=root_session_id,
        )
    )


class Client:
    """Send stage events to the collector without ever blocking or crashing the agent.

    Args:
        socket_path: collector socket; default :func:`gz_ia.client.env.default_socket_path`.
        root: session root; default :func:`gz_ia.client.env.find_root`.
        max_events: events kept while the collector is away (oldest dropped first, counted).
        max_bytes: bound on the encoded size of those events.
        spool: spill events to disk (``$GZ_IA_SPOOL_DIR``, default
            ``$XDG_STATE_HOME/gz-ia/spool``) rather than drop them once the memory bounds are reached.
        max_spool_bytes: bound on the spool; past it the oldest events are dropped and reported.
        raise_on_error: raise ``ValueError`` from :meth:`log` for an event that cannot be built,
            instead of counting it in ``stats().invalid``.
        linger: seconds an event logged alone may wait for the next ones to share its frame
            (``$GZ_IA_LINGER_MS``, 0.25 s by default; 0 sends each event at once). :meth:`send`,
            :meth:`flush` and :meth:`close` never wait for it.
    """

    enabled: Final = True

    def __init__(
        self,
        *,
        socket_path: str | Path | None = None,
        root: str | Path | None = None,
        max_events: int = 10_000,
        max_bytes: int = 8 << 20,
        connect_timeout: float = 1.0,
        spool: bool = True,
        max_spool_bytes: int = 64 << 20,
        raise_on_error: bool = False,
        linger: float | None = None,
    ) -> None:
        # Here, not at the top: a process that imports the package but makes no client (the
        # NullClient, a hook that only builds events) never imports sockets, selectors or the spool.
        from ._sender import Sender

        if root is None:
            passed_over: list[str] = []
            root = env.find_root(passed_over=passed_over)
            if passed_over:
                _say(env.passed_over_warning(passed_over, str(root)))
        self._sender: Sender = Sender(
            Path(socket_path) if socket_path is not None else env.default_socket_path(),
            Path(root).absolute(),
            max_events=max_events,
            max_bytes=max_bytes,
            connect_timeout=connect_timeout,
            spool_dir=env.default_spool_dir() if spool else None,
            max_spool_bytes=max_spool_bytes,
            linger=env.linger() if linger is None else linger,
            encode_call=_encode_call,
        )
        self._raise_on_error = raise_on_error
        self._defers = not raise_on_error
        """Whether log() may leave a call to be judged and encoded later (see :meth:`log_fields`)."""

    def deferring_sender(self) -> Sender | None:
        """The sender whose inbox session scopes may leave calls in themselves, as :meth:`log_fields`
        does, if this client defers calls (it does unless it raises on errors); else None."""
        return self._sender if self._defers else None

    @property
    def socket_path(self) -> Path:
        """The socket this client sends to."""
        return self._sender.socket_path

    @property
    def root(self) -> Path:
        """The session root named in the handshake."""
        return self._sender.root

    def emit(self, event: LogEvent) -> None:
        """Queue a built event for delivery (free-text fields cut to their limits); returns at once."""
        self._sender.submit(_encode(fit_event(event)), event.session_id)

    def log(
        self,
        *,
        session_id: str,
        action: str,
        stage: Stage | str,
        agent: str,
        status: Status | str = Status.OK,
        role: str | None = None,
        parent_session_id: str | None = None,
        duration_ms: int | None = None,
        error: str | None = None,
        attrs: dict[str, AttrValue] | None = None,
        cycle: str | None = None,
        root_session_id: str | None = None,
    ) -> None:
        """Queue one event for delivery; returns at once and never raises because of delivery.

        Free-text fields past their limits are cut and marked (:func:`~gz_ia.client.schema.fit_fields`).
        ``cycle`` names one run of ``action`` (action scopes set it), so that runs open at once
        keep their own outcomes. ``root_session_id`` names the top of the session's tree when that
        is not its parent (session scopes set it), so that readers find the tree from its root even
        when the sessions between never log.
        """
        self.log_fields(
            session_id, action, stage, agent, status, role, parent_session_id, duration_ms, error, attrs, cycle,
            root_session_id,
        )  # fmt: skip

    def log_fields(
        self,
        session_id: str,
        action: str,
        stage: Stage | str,
        agent: str,
        status: Status | str,
        role: str | None,
        parent_session_id: str | None,
        duration_ms: int | None,
        error: str | None,
        attrs: dict[str, AttrValue] | None,
        cycle: str | None,
        root_session_id: str | None,
    ) -> None:
        """:meth:`log` with every field given, by position: what scopes call.

        With the CPU's caches cold (an agent that logs every few milliseconds sleeps in between),
        matching a dozen keywords costs more than all the rest of the call; a call by position to a
        function without keyword-only parameters is also the one the interpreter runs without a
        frame of its own in C.
        """
        # The hot path of every agent: only the time is taken here. The call is judged (stage,
        # status, an error for FAILED), built, cut to its limits and encoded by whichever thread
        # next moves the queue (_encode_call), in a batch; one that cannot be built is counted in
        # stats().invalid then, which stats() sees, since it moves the queue first. An event with
        # an error, attrs or a long action is judged and encoded here: its size must count against
        # the queue's byte bound at once, and a caller may change its attrs map afterwards. So is
        # every event of a client that raises on errors, which must raise here.
        call = (
            time_ns(), session_id, action, stage, status, agent, parent_session_id, role, duration_ms, error, attrs,
            cycle, root_session_id,
        )  # fmt: skip
        try:
            deferred = error is None and attrs is None and self._defers and len(action) <= MAX_ACTION_LENGTH
        except TypeError:  # an action without a length: judged below
            deferred = False
        if deferred:
            # The sender's fast path for a call (see Sender): an append and two tests. SessionScope.log
            # makes the same hand-over itself: a change here is a change there.
            sender = self._sender
            inbox = sender.inbox
            inbox.append(call)
            if not (sender.ready and len(inbox) < INBOX_EVENTS):
                sender.take_inbox()
            return
        try:
            body = _encode_call(call)
        except (ValueError, TypeError, OverflowError) as exc:
            if self._raise_on_error:
                raise
            self._sender.count_invalid(exc)
            return
        self._sender.submit(body, session_id)

    def send_future(self, event: LogEvent) -> concurrent.futures.Future[Verdict]:
        """Queue ``event`` and return a future of the collector's verdict."""
        import concurrent.futures  # here: an agent that only logs never pays for importing it

        future: concurrent.futures.Future[Verdict] = concurrent.futures.Future()
        self._sender.submit(_encode(fit_event(event)), event.session_id, future)
        return future

    def send(self, event: LogEvent, *, timeout: float = 5.0) -> Verdict:
        """Deliver ``event`` and wait for the collector's verdict.

        Raises:
            EventRejected: the collector refused the event (``.reason``, ``.detail``).
            CollectorUnavailable: no collector answered within ``timeout`` seconds; the event stays
                queued and is delivered if the collector comes back while this client lives.
        """
        future = self.send_future(event)
        try:
            return future.result(timeout)
        except TimeoutError as exc:  # concurrent.futures.TimeoutError is TimeoutError
            raise CollectorUnavailable(
                f"no verdict from the collector within {timeout:g} s", socket_path=str(self.socket_path)
            ) from exc

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Wait until every queued event has a verdict; False if ``timeout`` ran out first."""
        return self._sender.flush(timeout)

    def close(self, timeout: float | None = 2.0) -> None:
        """Flush for at most ``timeout`` seconds and stop the background thread."""
        self._sender.close(timeout)

    def stats(self) -> SenderStats:
        """Counters: queued, unacknowledged, accepted, rejected, dropped, invalid, reconnects."""
        return self._sender.stats()


def _say(sentence: str) -> None:
    """One line on stderr, for what the user should know and the agent must not fail over."""
    import contextlib
    import sys

    with contextlib.suppress(Exception):  # a closed or broken stderr must not fail the agent
        sys.stderr.write(sentence + "\n")
        sys.stderr.flush()
