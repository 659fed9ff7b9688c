"""Exceptions raised by the gz-ia client.

Hierarchy::

    GzIaError(Exception)
    ├── CollectorUnavailable                    no collector answered on the socket; __cause__ is the OSError
    ├── ProtocolError                           the peer broke the wire protocol (bad frame, oversize, version)
    │   └── SubscriptionRefused                 live: the collector refused a subscription: .reason, .detail
    ├── EventRejected                           the collector refused an event: .reason, .detail
    ├── FrameTooLarge(ValueError)               protocol: a frame body over MAX_FRAME (the sender's): .size
    └── UntrustedSocket(PermissionError)        trust: the socket's directory or peer is not the user's

``FrameTooLarge`` and ``UntrustedSocket`` live beside the code that raises them
(:mod:`gz_ia.client.protocol`, :mod:`gz_ia.client.trust`) and keep their builtin base: callers'
``except ValueError`` / ``except OSError`` keep catching them.

Wrong arguments are programming errors and get the builtin ``ValueError`` / ``TypeError``: an
invalid session id, agent or role raises in the scope constructor (``session()``, ``subagent()``).
``log()`` never raises any of these: only the waiting calls (``send``, ``flush``) do.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: the one-shot path imports this module (through trust) without typing
if TYPE_CHECKING:
    from .reasons import RejectReason

__all__ = ["CollectorUnavailable", "EventRejected", "GzIaError", "ProtocolError"]


class GzIaError(Exception):
    """Base class of every error the gz-ia client raises on purpose."""


class CollectorUnavailable(GzIaError):
    """No collector could be reached in time: not running, wrong socket, or not answering.

    Nobody's fault in the event: the environment lacks a collector. ``socket_path`` says where the
    client looked.
    """

    def __init__(self, message: str, *, socket_path: str) -> None:
        super().__init__(message)
        self.socket_path = socket_path


class ProtocolError(GzIaError):
    """A frame broke the wire protocol: the peer's fault (or a version mismatch between the two)."""

    def __init__(self, message: str, *, reason: str = "protocol") -> None:
        super().__init__(message)
        self.reason = reason


class EventRejected(GzIaError):
    """The collector validated the event and refused it: the sender's fault.

    ``reason`` is a machine-readable :class:`~gz_ia.client.protocol.RejectReason`; ``detail`` is a
    sentence for people.
    """

    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
