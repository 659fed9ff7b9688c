"""Scopes: attribution set once (session, agent, role), never repeated at call sites.

A :class:`SessionScope` names a session and its agent; an :class:`ActionScope` inside it emits READ
on entry, PENDING when the code says so, and FINISH on exit (OK with the measured ``duration_ms``, or
FAILED with the exception as ``error``, which is re-raised). ``subagent()`` opens a child session that
names its parent, and the root of the tree when that is another session. The current session
travels through :mod:`contextvars` in-process, and through ``GZ_IA_PARENT_SESSION_ID`` (with
``GZ_IA_ROOT_SESSION_ID``) to child processes, which pick it up without code changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import os
import threading
import time
from contextvars import ContextVar
from types import TracebackType
from typing import Final, Protocol

from . import env
from ._client import INBOX_EVENTS, Client, time_ns
from ._null import NullClient
from .schema import (
    MAX_ACTION_LENGTH,
    MAX_AGENT_LENGTH,
    MAX_ERROR_LENGTH,
    MAX_SESSION_ID_LENGTH,
    AttrValue,
    Stage,
    Status,
    cut_text,
    is_safe_session_id,
)
from .usage import MODEL, usage_attrs

__all__ = [
    "ActionScope",
    "EventSink",
    "SessionScope",
    "action",
    "configure",
    "current_session",
    "get_client",
    "new_session_id",
    "session",
]


class EventSink(Protocol):
    """What a scope needs from a client: :class:`Client` and :class:`NullClient` both fit."""

    @property
    def enabled(self) -> bool: ...

    def log(
        self,
        *,
        session_id: str,
        action: str,
        stage: Stage | str,
        agent: str,
        status: Status | str = ...,
        role: str | None = ...,
        parent_session_id: str | None = ...,
        duration_ms: int | None = ...,
        error: str | None = ...,
        attrs: dict[str, AttrValue] | None = ...,
        cycle: str | None = ...,
        root_session_id: str | None = ...,
    ) -> None: ...


_current: ContextVar[SessionScope | None] = ContextVar("gz_ia_session", default=None)


class _EnvironmentExport:
    """What ``GZ_IA_PARENT_SESSION_ID`` (and ``GZ_IA_ROOT_SESSION_ID``) tell child processes: the
    newest session scope still open (and the root of its tree).

    The environment is process-wide while scopes nest per thread and task, so the open sessions are
    kept in entry order; when the last one closes, whatever this process inherited is restored.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[SessionScope] = []
        self._inherited: tuple[str | None, str | None, str | None] = (None, None, None)

    def enter(self, scope: SessionScope) -> None:
        with self._lock:
            if not self._open:
                parent, pid, root = (os.environ.get(name) for name in _EXPORTED)
                self._inherited = (parent, pid, root)
            self._open.append(scope)
            self._export(scope.session_id, str(os.getpid()), scope.tree_root)

    def exit(self, scope: SessionScope) -> None:
        with self._lock:
            with contextlib.suppress(ValueError):
                self._open.remove(scope)
            if self._open:
                newest = self._open[-1]
                self._export(newest.session_id, str(os.getpid()), newest.tree_root)
            else:
                self._export(*self._inherited)

    @staticmethod
    def _export(session_id: str | None, pid: str | None, root: str | None) -> None:
        for name, value in zip(_EXPORTED, (session_id, pid, root), strict=True):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_EXPORTED: Final = (env.GZ_IA_PARENT_SESSION_ID, env.GZ_IA_PARENT_PID, env.GZ_IA_ROOT_SESSION_ID)
_exports = _EnvironmentExport()
_default_client: EventSink | None = None
_default_lock = threading.Lock()


def get_client() -> EventSink:
    """Return the process-wide client, creating it from the environment on first use.

    With ``GZ_IA_DISABLED=1`` it is a :class:`NullClient`.
    """
    global _default_client  # noqa: PLW0603 - the one process-wide default, set under a lock
    with _default_lock:
        if _default_client is None:
            _default_client = NullClient() if env.tracing_disabled() else Client()
        return _default_client


def configure(client: EventSink | None = None, *, enabled: bool = True) -> EventSink:
    """Replace the process-wide client (``enabled=False`` installs the null client)."""
    global _default_client  # noqa: PLW0603
    with _default_lock:
        _default_client = client if client is not None else (Client() if enabled else NullClient())
        return _default_client


def new_session_id() -> str:
    """Return a fresh, file-name-safe session id (12 hex digits)."""
    return os.urandom(6).hex()  # what secrets.token_hex does, without importing hmac and hashlib


def current_session() -> SessionScope | None:
    """Return the innermost session scope of this thread or task, if any."""
    return _current.get()


def _inherited_parent() -> str | None:
    # Our own export is for children, not for us: a sibling session here is not a subagent.
    if os.environ.get(env.GZ_IA_PARENT_PID) == str(os.getpid()):
        return None
    return env.parent_session()


def _check_session_id(value: object, what: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    if not is_safe_session_id(value):
        raise ValueError(
            f"invalid {what} {value!r}: 1 to {MAX_SESSION_ID_LENGTH} letters, digits, '_', '-' or '.', "
            "not starting with '.'"
        )


def _check_name(value: object, what: str, *, required: bool) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    if len(value) > MAX_AGENT_LENGTH or (required and not value):
        raise ValueError(f"invalid {what} {value[:40]!r}: 1 to {MAX_AGENT_LENGTH} characters")


class SessionScope:
    """A session of one agent: every event logged through it carries its id, agent and role.

    ``root_session_id`` is the top of the session's tree when that is not its parent (a subagent of a
    subagent); it is dropped when it names the parent or the session itself, or when there is no parent.

    Raises:
        ValueError: the session, parent or root id is not a valid session id, the agent is empty or
            either the agent or the role is longer than 128 characters.
        TypeError: one of them is not a string.
    """

    __slots__ = (
        "_sender",
        "_token",
        "agent",
        "client",
        "parent_session_id",
        "role",
        "root_session_id",
        "session_id",
    )

    def __init__(
        self,
        session_id: str,
        *,
        agent: str,
        role: str | None,
        parent_session_id: str | None,
        client: EventSink,
        root_session_id: str | None = None,
    ) -> None:
        # Checked here, where the caller sees it: the collector would refuse every event of the scope.
        _check_session_id(session_id, "session id")
        if parent_session_id is not None:
            _check_session_id(parent_session_id, "parent session id")
        if root_session_id is not None:
            _check_session_id(root_session_id, "root session id")
            if parent_session_id is None or root_session_id in (parent_session_id, session_id):
                root_session_id = None  # the parent is the root, or there is no tree above
        _check_name(agent, "agent", required=True)
        _check_name(role, "role", required=False)
        self.session_id = session_id
        self.agent = agent
        self.role = role
        self.parent_session_id = parent_session_id
        self.root_session_id = root_session_id
        self.client = client
        self._sender = client.deferring_sender() if type(client) is Client else None
        """Where :meth:`log` leaves a call itself (see there): gz-ia's own client's sender, if it defers calls."""
        self._token: contextvars.Token[SessionScope | None] | None = None

    def log(
        self,
        action: str,
        stage: Stage | str,
        status: Status | str = Status.OK,
        *,
        duration_ms: int | None = None,
        error: str | None = None,
        role: str | None = None,
        attrs: dict[str, AttrValue] | None = None,
        cycle: str | None = None,
    ) -> None:
        """Log one event in this session; returns at once (``cycle``: see :meth:`Client.log`)."""
        sender = self._sender
        if (
            sender is not None
            and error is None
            and attrs is None
            and type(action) is str
            and len(action) <= MAX_ACTION_LENGTH
        ):
            # Client.log_fields's hand-over of a call to be judged and encoded later, written out
            # here: an agent that logs every few milliseconds runs this with cold caches, where the
            # call to log_fields and what it looks up cost as much as the hand-over itself.
            call = (
                time_ns(), self.session_id, action, stage, status, self.agent, self.parent_session_id,
                role if role is not None else self.role, duration_ms, None, None, cycle, self.root_session_id,
            )  # fmt: skip
            inbox = sender.inbox
            inbox.append(call)
            if not (sender.ready and len(inbox) < INBOX_EVENTS):
                sender.take_inbox()
            return
        self._log(action, stage, status, duration_ms, error, role, attrs, cycle)

    def _log(
        self,
        action: str,
        stage: Stage | str,
        status: Status | str,
        duration_ms: int | None,
        error: str | None,
        role: str | None,
        attrs: dict[str, AttrValue] | None,
        cycle: str | None,
    ) -> None:
        # Every field by position, to gz-ia's own client: with cold caches, matching a dozen
        # keywords costs more than the rest of log() (see Client.log_fields).
        client = self.client
        if type(client) is Client:
            client.log_fields(
                self.session_id, action, stage, self.agent, status, role if role is not None else self.role,
                self.parent_session_id, duration_ms, error, attrs, cycle, self.root_session_id,
            )  # fmt: skip
        elif client.enabled:
            # Any other sink (a test's CapturingClient, one of the agent's own) gets the public call.
            client.log(
                session_id=self.session_id,
                parent_session_id=self.parent_session_id,
                agent=self.agent,
                role=role if role is not None else self.role,
                action=action,
                stage=stage,
                status=status,
                duration_ms=duration_ms,
                error=error,
                attrs=attrs,
                cycle=cycle,
                root_session_id=self.root_session_id,
            )

    @property
    def tree_root(self) -> str:
        """The top of this session's tree: its root, else its parent, else itself."""
        return self.root_session_id or self.parent_session_id or self.session_id

    def action(self, name: str, *, start: Stage = Stage.READ, role: str | None = None) -> ActionScope:
        """Return a scope for one task: ``start`` (READ or PENDING) on entry, FINISH on exit."""
        return ActionScope(self, name, start=start, role=role)

    def subagent(
        self, agent: str | None = None, *, role: str | None = None, session_id: str | None = None
    ) -> SessionScope:
        """Return a child session whose events name this one as ``parent_session_id`` (and the top
        of this one's tree as ``root_session_id``)."""
        return SessionScope(
            new_session_id() if session_id is None else session_id,
            agent=self.agent if agent is None else agent,
            role=role,
            parent_session_id=self.session_id,
            client=self.client,
            root_session_id=self.tree_root,
        )

    def child_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Return an environment for a child process whose sessions become this one's subagents
        (``GZ_IA_PARENT_SESSION_ID``), in this one's tree (``GZ_IA_ROOT_SESSION_ID``)."""
        child = dict(os.environ if base is None else base)
        child[env.GZ_IA_PARENT_SESSION_ID] = self.session_id
        child[env.GZ_IA_ROOT_SESSION_ID] = self.tree_root
        child.pop(env.GZ_IA_PARENT_PID, None)
        return child

    def __enter__(self) -> SessionScope:
        self._token = _current.set(self)
        _exports.enter(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        _exports.exit(self)

    async def __aenter__(self) -> SessionScope:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def session(
    session_id: str | None = None,
    *,
    agent: str,
    role: str | None = None,
    parent_session_id: str | None = None,
    client: EventSink | None = None,
    root_session_id: str | None = None,
) -> SessionScope:
    """Open a session scope (use it with ``with`` or ``async with``).

    Without ``parent_session_id`` the parent is the enclosing session scope, else the session that
    spawned this process (``GZ_IA_PARENT_SESSION_ID``; an invalid value is reported once and
    ignored), else none. Without ``root_session_id`` the root is that parent's: the enclosing
    scope's tree root, or ``GZ_IA_ROOT_SESSION_ID`` for the parent the environment names.

    Raises:
        ValueError, TypeError: an invalid session, parent or root id, agent or role (see :class:`SessionScope`).
    """
    enclosing = _current.get()
    if parent_session_id is None:
        parent_session_id = enclosing.session_id if enclosing is not None else _inherited_parent()
    if session_id is None:
        session_id = new_session_id()
    if root_session_id is None and parent_session_id is not None:
        if enclosing is not None and parent_session_id == enclosing.session_id:
            root_session_id = enclosing.tree_root
        elif isinstance(session_id, str):
            root_session_id = env.inherited_root(session_id, parent_session_id)
    return SessionScope(
        session_id,
        agent=agent,
        role=role,
        parent_session_id=parent_session_id,
        client=client if client is not None else (enclosing.client if enclosing else get_client()),
        root_session_id=root_session_id,
    )


def action(name: str, *, start: Stage = Stage.READ, role: str | None = None) -> ActionScope:
    """Open an action scope in the current session.

    Raises:
        RuntimeError: no session scope is active (a programming error, raised at once).
    """
    scope = _current.get()
    if scope is None:
        raise RuntimeError("no gz-ia session is active: wrap the code in `with session(agent=...)`")
    return scope.action(name, start=start, role=role)


_FINISH: Final = Stage.FINISH
"""Globals: on Python 3.11 every lookup on an enum class goes through ``EnumType.__getattr__``."""
_OK: Final = Status.OK
_FAILED: Final = Status.FAILED
NULL_CYCLE: Final = "0" * 10
"""The ``cycle`` of every action scope of a disabled client (nothing is sent, so no id is drawn)."""


_cycle_prefix = ""
"""40 random bits drawn once per process (again in a forked child): what tells this process's
cycles from another's that logs into the same session."""
_cycle_numbers = itertools.count(1)


def _new_cycle() -> str:
    """Return an id for one action scope: the process's random prefix and a number of its own.

    Two runs of one action open at once in a session never share an id, in this process (the
    numbers) or between processes (the prefix, in practice); and no scope pays for a system call
    (``os.urandom``) of its own.
    """
    global _cycle_prefix  # noqa: PLW0603 - one prefix per process, reset after fork
    if not _cycle_prefix:
        _cycle_prefix = os.urandom(5).hex()
    return f"{_cycle_prefix}{next(_cycle_numbers):x}"


def _forget_cycle_prefix() -> None:
    global _cycle_prefix  # noqa: PLW0603
    _cycle_prefix = ""


os.register_at_fork(after_in_child=_forget_cycle_prefix)


def describe_exception(exc: BaseException) -> str:
    """The ``error`` of a FAILED event for ``exc``: its type and message, cut to the field's limit."""
    text = str(exc)
    described = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return cut_text(described, MAX_ERROR_LENGTH)


class ActionScope:
    """One task's cycle: READ (or PENDING) on entry, PENDING on :meth:`pending`, FINISH on exit.

    Each scope sends its own ``cycle`` id with its events, so that scopes of the same action name
    open at once (parallel tool calls, retries in tasks or threads) are separate cycles for the
    collector and each keeps its own outcome.
    """

    __slots__ = ("_attrs", "_enabled", "_failure", "_started", "cycle", "name", "role", "session", "start")

    def __init__(self, session: SessionScope, name: str, *, start: Stage, role: str | None) -> None:
        if start is _FINISH:
            raise ValueError("an action starts with READ or PENDING")
        self.session = session
        self.name = name
        self.start = start
        self.role = role
        # With tracing off nothing is logged, so nothing is drawn, measured or built: the null path
        # makes no system call (os.urandom is one) and costs well under a microsecond.
        self._enabled = enabled = session.client.enabled
        self.cycle = _new_cycle() if enabled else NULL_CYCLE
        self._started = 0
        self._failure: str | None = None
        self._attrs: dict[str, AttrValue] | None = None

    def _elapsed_ms(self) -> int:
        return (time.monotonic_ns() - self._started) // 1_000_000

    def pending(self, **attrs: AttrValue) -> None:
        """Mark the move from reading to changing things (PENDING), with optional measurements."""
        if not self._enabled:
            return
        self.session._log(
            self.name, Stage.PENDING, Status.OK, self._elapsed_ms(), None, self.role, attrs or None, self.cycle
        )

    def fail(self, error: str) -> None:
        """Make the FINISH at exit a FAILED one with ``error``, without raising."""
        self._failure = error or "failed"

    def set(self, **attrs: AttrValue) -> None:
        """Attach measurements (token counts, exit codes, bytes) to the FINISH event."""
        if not self._enabled:
            return
        self._attrs = {**(self._attrs or {}), **attrs}

    def usage(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_read_tokens: int | None = None,
        cache_creation_tokens: int | None = None,
        cost_usd: float | None = None,
        model: str | None = None,
    ) -> None:
        """Record the tokens, cost and model of the model call this action made, on its FINISH.

        Stored as the reserved ``attrs`` keys of :mod:`gz_ia.client.usage` and added to the
        session's totals; a second call adds its counts to the first's (one action, several calls).

        Raises:
            TypeError, ValueError: a count is not a non-negative int, the cost not a number >= 0.
        """
        recorded = usage_attrs(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_creation_tokens=cache_creation_tokens,
            cost_usd=cost_usd,
            model=model,
        )
        if not self._enabled:
            return
        held = self._attrs or {}
        for key, value in recorded.items():
            before = held.get(key)
            if key != MODEL and isinstance(before, int | float) and not isinstance(before, bool):
                value = before + value  # type: ignore[operator]  # both counts, or both costs
            held[key] = value
        self._attrs = held

    def __enter__(self) -> ActionScope:
        if self._enabled:
            self._started = time.monotonic_ns()
            self.session._log(self.name, self.start, _OK, None, None, self.role, None, self.cycle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._enabled:
            return
        error = describe_exception(exc) if exc is not None else self._failure
        self.session._log(
            self.name, _FINISH, _FAILED if error else _OK, self._elapsed_ms(), error, self.role, self._attrs, self.cycle
        )

    async def __aenter__(self) -> ActionScope:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)
