"""The base of every exception the gz-ia collector defines, and their tree.

Each exception lives beside the code that raises it; this module, the lowest floor of the
package, only holds the base. A second builtin base is kept where callers (and ``click``, and the
standard library) catch the builtin. Our exception hierarchy::

    CollectorError(Exception)
    ├── ConfigError                      config               unusable configuration (the operator's): names key, source
    ├── CredentialsUnusable(PermissionError) credentials      the key's file: someone else's, a link, open to others
    ├── LayoutError                      storage.roots        a root cannot be used: missing, a symlink, someone else's
    │   └── LayoutTooNew                 storage.roots        written by a newer gz-ia: .version
    ├── RootLocked                       storage.root_lock    another collector serves the root: .path, .holder
    ├── SegmentUnreadable                storage.segments     a segment exists but cannot be read (the disk's fault)
    ├── SessionNotFound(LookupError)     reading.segments     no such session under the root: the caller's
    │   └── RootNotFound                 reading.segments     no root at the path (a mistyped GZ_IA_ROOT)
    ├── CursorExpired(LookupError)       reading.follow       retention deleted what a follower missed: .session_id
    ├── InvalidCursor(ValueError)        reading.cursor       not this reader's, session's or root's: the caller's
    ├── WorkerFailed(RuntimeError)       query._fanout        a forked scan process died without its results
    ├── TypedEventError(ValueError)      oneshot.typed_event  typed input that makes no event (the caller's): .reason
    ├── MissingExtraError(RuntimeError)  otel.senders         the [otel] extra is not installed: the installation's
    ├── SettingsError                    integrations.*       a settings file we must not rewrite: left untouched
    ├── DropDamaged(ValueError)          integrations.*       a hook inbox drop that will never be whole: quarantined
    ├── ListenerError                    service.listener     the socket cannot be set up; the message says what to do
    │   └── AlreadyRunning               service.listener     another collector serves this socket path
    ├── NotNow                           service.adoption     a spool cannot be delivered now: retried later
    ├── Unadoptable                      service.adoption     a spool can never be delivered as it is: quarantined
    ├── StatusUnavailable                service.status       no collector answered the status query
    │   └── StatusRefused                service.status       one answered and refused it: .reason, .detail
    ├── ShareFailed                      sharding.shares      a share process did not start or answer
    ├── FleetUnavailable                 fleet.link           fleet.url set without the [fleet] extra: names it
    ├── SocketLost                       fleet.own_socket     the hub's connection to its own socket ended: comes again
    ├── TooLarge(ValueError)             http.messages        a request body beyond its route's limit: answered 413
    ├── PeerUnknown(PermissionError)     http.peer            the kernel cannot name a connection's owner: refused
    ├── OtlpUnavailable                  otlp.bodies          the [otlp] extra is not installed: answered 501
    ├── BodyUnreadable(ValueError)       otlp.bodies          an OTLP body that is not one (the exporter's): .reason
    ├── InvalidSince(ValueError)         live.hub             since_seq past the newest frame: the caller's
    ├── _Fallback                        query._scan          private: the fast scan hands over to the careful reader
    ├── _NoAnswer                        oneshot.ledger       private: the collector was reached, gave no verdict
    ├── _NoCollector                     cli._gc              private: nothing listens, gc runs in this process
    ├── _Refused                         fleet.hub            private: a message the hub refuses, counted by reason
    ├── _BodiesFull                      http.server          private: the bodies held at once are at the bound: 429
    └── _Closed                          http.server          private: the client closed, or went silent too long

The five private signals never leave their module. Wrong arguments are programming errors and get
the builtin ``ValueError`` / ``TypeError``. The client's exceptions have their own base,
:class:`gz_ia.client.errors.GzIaError`.
"""

from __future__ import annotations

__all__ = ["CollectorError"]


class CollectorError(Exception):
    """Base class of every exception the gz-ia collector defines; its subclass says whose fault it is."""
