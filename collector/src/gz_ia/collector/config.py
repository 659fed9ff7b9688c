"""Collector configuration: one TOML file, environment variables and flags.

Precedence: flag > environment > file > default. The file is
``$XDG_CONFIG_HOME/gz-ia/collector.toml`` (``~/.config/gz-ia/collector.toml``) unless ``--config``
or ``GZ_IA_CONFIG`` names another; a missing default file is fine, a missing named one is an error.
Every key of the file can also be given as ``GZ_IA_<SECTION>_<KEY>`` (``GZ_IA_DURABILITY``,
``GZ_IA_ROTATION_MAX_BYTES``...). Unknown keys and bad values are errors that name the key.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from gz_ia.client.redaction import DEFAULT_RULES, Redactor, Rule, checked_rule, parse_rules
from gz_ia.collector.errors import CollectorError

__all__ = [
    "AlertsConfig",
    "CollectorConfig",
    "ConfigError",
    "FleetConfig",
    "RedactionConfig",
    "RedactionPattern",
    "RetentionConfig",
    "RotationConfig",
    "config_keys",
    "default_config_path",
    "default_http_port",
    "default_metrics_port",
    "env_var",
    "is_loopback",
    "known_variables",
    "load_config",
    "unknown_variables",
]

ENV_PREFIX: Final = "GZ_IA_"
_MAX_SHARDS: Final = 64
METRICS_PORT_BASE: Final = 20000
"""First port of the per-user metrics range: ``auto`` serves on ``METRICS_PORT_BASE + uid % 10000``."""
_METRICS_PORT_SPAN: Final = 10000


def default_metrics_port(uid: int | None = None) -> int:
    """The loopback port ``metrics_address = "auto"`` serves on: one per uid, so that several users'
    collectors coexist on one machine (uid 1000: 21000), below the kernel's ephemeral range."""
    return METRICS_PORT_BASE + (os.getuid() if uid is None else uid) % _METRICS_PORT_SPAN


def default_http_port() -> int:
    """The loopback port ``http_address = "auto"`` serves on: drawn at random the first time and kept
    with the user's key (:mod:`.credentials`), so that nobody can compute it and take it first."""
    from gz_ia.client import env

    from .credentials import load_credentials

    return load_credentials(env.state_dir()).port


class ConfigError(CollectorError):
    """The configuration is unusable; the message names the key and the source."""


class RotationConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """When a session's active file becomes an archive segment."""

    max_bytes: int = msgspec.field(default=64 << 20)
    max_events: int = 0
    """0: no event-count limit."""
    daily: bool = False
    """Also rotate at UTC midnight."""
    compress: bool = True
    """gzip archives (the reader reads both)."""

    def __post_init__(self) -> None:
        if self.max_bytes < 4096:
            raise ValueError("rotation.max_bytes must be at least 4096")
        if self.max_events < 0:
            raise ValueError("rotation.max_events must be >= 0")


class RetentionConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What old data is deleted; applied after each rotation and on demand (``gz-ia gc``)."""

    max_archives: int = 50
    """Archived segments kept per session (0: no limit)."""
    max_age_days: float = 0
    """Archives older than this are deleted (0: no limit)."""
    max_root_bytes: int = 0
    """Disk budget for a whole root (0: no limit); least recently active sessions lose their oldest
    segments first."""
    max_held_archives: int = 100
    """Archives per session kept past ``max_archives`` / ``max_age_days`` because an exporter has
    not sent them yet (0: exporters hold nothing); ``max_root_bytes`` still applies."""

    def __post_init__(self) -> None:
        for key in ("max_archives", "max_age_days", "max_root_bytes", "max_held_archives"):
            if getattr(self, key) < 0:
                raise ValueError(f"retention.{key} must be >= 0")


class RedactionPattern(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One rule of the user's own: its name (the mark and the metric label) and its expression."""

    name: str
    pattern: str
    """A Python regular expression; a group named ``value`` is the part replaced, else the whole match."""


class RedactionConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What is masked in every event before it is stored (docs/user-guide.md, "Secrets")."""

    enabled: bool = True
    patterns: list[RedactionPattern] = []
    """Rules of the user's own, searched with the defaults (a default names the mark when both start together)."""
    disable: list[str] = []
    """Default rules to leave out, by name."""

    def __post_init__(self) -> None:
        for pattern in self.patterns:
            try:
                checked_rule(pattern.name, pattern.pattern)
            except ValueError as exc:
                raise ValueError(f"redaction.patterns: {exc}") from exc
        unknown = sorted(set(self.disable) - set(DEFAULT_RULES))
        if unknown:
            raise ValueError(
                f"redaction.disable names no default rule: {', '.join(unknown)} (known: {', '.join(DEFAULT_RULES)})"
            )

    def redactor(self, on_redacted: Callable[[str], None] | None = None) -> Redactor | None:
        """The redactor these settings make, counting through ``on_redacted``; None when disabled."""
        if not self.enabled:
            return None
        rules = [Rule(pattern.name, pattern.pattern) for pattern in self.patterns]
        return Redactor(rules, disable=self.disable, on_redacted=on_redacted)


class AlertsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the collector's gauges count as a problem (the rules in deploy/prometheus/ alert on them)."""

    hung_after: float = 300.0
    """Seconds an action cycle stays open (READ or PENDING without FINISH) before ``gzia_hung_actions``
    counts it."""

    def __post_init__(self) -> None:
        if not self.hung_after > 0:
            raise ValueError("alerts.hung_after must be > 0 seconds")


FLEET_HOST_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A fleet host name: one NATS subject token (no dots, no wildcards) and part of a session id."""


class FleetConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Shipping this machine's sessions to a NATS JetStream stream, or consuming it as a hub
    (docs/operations.md, "Many machines"). Off while ``url`` is empty."""

    url: str = ""
    """One or more ``nats://host:port`` (``tls://`` for TLS), comma-separated; empty: no fleet."""
    host: str = ""
    """This machine's name in the fleet (letters, digits, ``_``, ``-``); empty: the hostname's first label."""
    hub: bool = False
    """Also consume the stream and write every machine's sessions under ``hub_root``."""
    hub_root: str = ""
    """The hub's session root; empty: ``$XDG_STATE_HOME/gz-ia/fleet/.harness``."""
    consumer: str = ""
    """The hub's durable consumer; empty: ``hub-<host>``. Hubs with distinct names each keep a full copy."""
    hosts: list[str] = []
    """On a hub: only these machines' subjects (partitioning by host across hubs); empty: every host."""
    credentials: str = ""
    """A NATS credentials file (JWT and NKEY seed)."""
    nkey_seed: str = ""
    """A file holding this machine's NKEY seed (``SU...``), where the servers know users by their NKEY
    (unused with ``credentials``, which holds a seed of its own)."""
    tls_ca: str = ""
    """CA file to verify the servers with (``tls://`` URLs)."""
    tls_cert: str = ""
    """Client certificate, where the servers ask for one."""
    tls_key: str = ""
    """The client certificate's key."""
    stream: str = "GZIA"
    """The JetStream stream (created if absent, over ``gzia.events.>``)."""
    replicas: int = 1
    """``num_replicas`` of a stream this collector creates (3 on a three-server cluster)."""
    duplicate_window: float = 120.0
    """Seconds the stream remembers a message id: a re-publish within it is stored once."""
    ack_wait: float = 30.0
    """Seconds a hub's consumer (when it creates it) waits for an acknowledgement before delivering again:
    after a hub's crash, what it had taken and not acknowledged comes again after this."""

    def __post_init__(self) -> None:
        if self.host and not FLEET_HOST_PATTERN.fullmatch(self.host):
            raise ValueError(f"fleet.host {self.host!r} is not 1-64 of letters, digits, '_', '-'")
        for name in self.hosts:
            if not FLEET_HOST_PATTERN.fullmatch(name):
                raise ValueError(f"fleet.hosts: {name!r} is not 1-64 of letters, digits, '_', '-'")
        if self.hub and not self.url:
            raise ValueError("fleet.hub needs fleet.url (the NATS servers to consume from)")
        if not 1 <= self.replicas <= 5:
            raise ValueError("fleet.replicas must be between 1 and 5")
        if not self.ack_wait > 0:
            raise ValueError("fleet.ack_wait must be > 0 seconds")
        if not self.duplicate_window > 0:
            raise ValueError("fleet.duplicate_window must be > 0 seconds")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.stream):
            raise ValueError(f"fleet.stream {self.stream!r} is not 1-64 of letters, digits, '_', '-'")
        if self.consumer and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.consumer):
            raise ValueError(f"fleet.consumer {self.consumer!r} is not 1-64 of letters, digits, '_', '-'")

    @property
    def enabled(self) -> bool:
        """Whether this collector takes part in a fleet."""
        return bool(self.url)

    def shown_url(self) -> str:
        """``url`` with any password in it masked, for the status and the log."""
        return re.sub(r"(://[^:/@,]*):[^@/,]*@", r"\1:***@", self.url)

    def servers(self) -> list[str]:
        """The server URLs of ``url``."""
        return [part.strip() for part in self.url.split(",") if part.strip()]

    def machine(self) -> str:
        """This machine's fleet name: ``host``, else the hostname's first label made a subject token."""
        if self.host:
            return self.host
        import socket

        name = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname().split(".", 1)[0])[:64]
        return name or "localhost"


class CollectorConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every setting of the collector, with its default."""

    socket: str = ""
    """Socket path; empty: ``$GZ_IA_SOCKET`` or ``$XDG_RUNTIME_DIR/gz-ia/collector.sock``."""
    durability: Literal["os", "fsync"] = "os"
    """``os``: acknowledge once written to the OS; ``fsync``: after a grouped fdatasync."""
    max_open_files: int = 65536
    """Session files kept open at once; lowered at start to what the descriptor limit allows."""
    metrics_address: str = "auto"
    """``host:port`` of the Prometheus endpoint; ``auto``: ``127.0.0.1`` on the user's own port
    (:func:`default_metrics_port`); empty or ``off`` disables it."""
    http_address: str = "auto"
    """``host:port`` of the loopback HTTP side (hooks over HTTP, OTLP, the live view); ``auto``:
    ``127.0.0.1`` on the user's own port, drawn once (:func:`default_http_port`); empty or ``off``
    disables it.
    Loopback only: the peer's uid is checked on every connection, which only the local kernel knows."""
    allow_uids: list[int] = []
    """Other uids allowed to connect (the collector's own uid always is)."""
    spool_dir: str = ""
    """Where clients spill events (adopted at start and every ``spool_adoption_interval`` seconds when
    their process died); empty: ``$GZ_IA_SPOOL_DIR`` or ``$XDG_STATE_HOME/gz-ia/spool``."""
    spool_adoption_interval: float = 30.0
    """Seconds between looks for the spools of clients that died (each look lists the spool directory)."""
    max_open_actions: int = 10_000
    """Open (unfinished) actions per session."""
    max_open_actions_total: int = 1_000_000
    """Open actions of all sessions in memory (about 100 bytes each); a sharded collector gives each
    share its part."""
    max_connections: int = 0
    """Client connections held at once; past it new ones are refused ``busy``. 0: derived from the
    descriptor limit (see docs/operations.md)."""
    max_connections_per_uid: int = 0
    """Client connections one uid may hold at once. 0: ``max_connections``, or half of it when
    ``allow_uids`` lets other users in."""
    max_backlog_batches: int = 64
    """Batches awaiting their verdict per connection before the collector stops reading it."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    shards: int = 1
    """Processes the sessions are divided between. 1: one process does everything. n > 1: a front
    process takes the connections and n share processes each write their part of the sessions, for
    many sessions on several cores (see docs/architecture.md)."""
    rotation: RotationConfig = RotationConfig()
    retention: RetentionConfig = RetentionConfig()
    redaction: RedactionConfig = RedactionConfig()
    alerts: AlertsConfig = AlertsConfig()
    fleet: FleetConfig = FleetConfig()

    def __post_init__(self) -> None:
        if self.max_open_files < 4:
            raise ValueError("max_open_files must be at least 4")
        if self.max_open_actions < 1:
            raise ValueError("max_open_actions must be at least 1")
        if self.max_open_actions_total < 1:
            raise ValueError("max_open_actions_total must be at least 1")
        if not 1 <= self.shards <= _MAX_SHARDS:
            raise ValueError(f"shards must be between 1 and {_MAX_SHARDS}")
        for key in ("max_connections", "max_connections_per_uid"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key} must be >= 0 (0: derived from the descriptor limit)")
        if self.max_backlog_batches < 1:
            raise ValueError("max_backlog_batches must be at least 1")
        if not self.spool_adoption_interval > 0:
            raise ValueError("spool_adoption_interval must be > 0 seconds")
        if self.metrics_address not in ("", "off", "auto"):
            host, _, port = self.metrics_address.rpartition(":")
            if not host or not port.isdigit() or int(port) > 65535:
                raise ValueError(f"metrics_address {self.metrics_address!r} is not host:port")
        if self.http_address not in ("", "off", "auto"):
            host, _, port = self.http_address.rpartition(":")
            if not host or not port.isdigit() or int(port) > 65535:
                raise ValueError(f"http_address {self.http_address!r} is not host:port")
            if not is_loopback(host.strip("[]")):
                raise ValueError(
                    f"http_address {self.http_address!r} is not a loopback address (127.0.0.1, ::1 or localhost): "
                    "the collector hears only its own user's processes, whose uid only this machine's kernel knows"
                )

    def http_endpoint(self) -> tuple[str, int] | None:
        """The ``(host, port)`` the HTTP side binds (``auto`` resolved); None when off."""
        if self.http_address in ("", "off"):
            return None
        if self.http_address == "auto":
            return "127.0.0.1", default_http_port()
        host, _, port = self.http_address.rpartition(":")
        host = host.strip("[]")
        return ("127.0.0.1" if host == "localhost" else host), int(port)

    @property
    def metrics_enabled(self) -> bool:
        """Whether the Prometheus endpoint is on."""
        return self.metrics_address not in ("", "off")

    def metrics_endpoint(self) -> tuple[str, int] | None:
        """The ``(host, port)`` the Prometheus endpoint binds (``auto`` resolved); None when off."""
        if not self.metrics_enabled:
            return None
        if self.metrics_address == "auto":
            return "127.0.0.1", default_metrics_port()
        host, _, port = self.metrics_address.rpartition(":")
        return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (``localhost`` or an address) stays on this machine; any other name may not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Return ``$GZ_IA_CONFIG``, else ``$XDG_CONFIG_HOME/gz-ia/collector.toml`` (read at call time)."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("GZ_IA_CONFIG")
    if explicit:
        return Path(explicit)
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gz-ia" / "collector.toml"


_SECTIONS: Final[dict[str, type[msgspec.Struct]]] = {
    "rotation": RotationConfig,
    "retention": RetentionConfig,
    "redaction": RedactionConfig,
    "alerts": AlertsConfig,
    "fleet": FleetConfig,
}


def env_var(key: str) -> str:
    """Return the environment variable of a dotted config key: ``rotation.max_bytes`` → ``GZ_IA_ROTATION_MAX_BYTES``."""
    return ENV_PREFIX + key.replace(".", "_").upper()


def config_keys() -> list[tuple[str, object]]:
    """Return every dotted config key with its default, in declaration order (for docs and tests)."""
    keys: list[tuple[str, object]] = []
    defaults = CollectorConfig()
    for field in msgspec.structs.fields(CollectorConfig):
        if field.name in _SECTIONS:
            section = getattr(defaults, field.name)
            keys.extend(
                (f"{field.name}.{sub.name}", getattr(section, sub.name)) for sub in msgspec.structs.fields(section)
            )
        else:
            keys.append((field.name, getattr(defaults, field.name)))
    return keys


def known_variables() -> set[str]:
    """Every ``GZ_IA_*`` variable gz-ia reads: the clients' (:mod:`gz_ia.client.env`), ``GZ_IA_CONFIG``
    and one per configuration key."""
    from gz_ia.client import env

    names = {getattr(env, name) for name in env.__all__ if name.startswith(ENV_PREFIX)}
    return names | {"GZ_IA_CONFIG"} | {env_var(key) for key, _default in config_keys()}


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """The ``GZ_IA_*`` variables of ``environ`` that gz-ia does not read, each with the known name it
    most resembles (None when none is close): a misspelled key in the file is an error, and the same
    typo in the environment must not pass unnoticed either."""
    known = sorted(known_variables())
    unknown = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            unknown.append((name, close[0] if close else None))
    return unknown


def _env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, _default in config_keys():
        name = env_var(key)
        if name not in environ:
            continue
        raw = environ[name]
        section, _, sub = key.rpartition(".")
        if key == "allow_uids":
            try:
                values[key] = [int(x) for x in raw.split(",") if x.strip()]
            except ValueError as exc:
                raise ConfigError(
                    f"bad value for allow_uids (from {name}): {raw!r} is not a comma-separated list of uids"
                ) from exc
        elif key == "redaction.patterns":
            try:
                rules = parse_rules(raw)
            except ValueError as exc:
                raise ConfigError(f"bad value for {key} (from {name}): {exc}") from exc
            values.setdefault(section, {})[sub] = [{"name": rule.name, "pattern": rule.pattern} for rule in rules]
        elif key in ("redaction.disable", "fleet.hosts"):
            values.setdefault(section, {})[sub] = [part.strip() for part in raw.split(",") if part.strip()]
        elif section:
            values.setdefault(section, {})[sub] = raw
        else:
            values[key] = raw
    return values


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _holds(layer: Mapping[str, Any], parts: list[str]) -> bool:
    node: Any = layer
    for part in parts:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


_AT: Final = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_UNKNOWN: Final = re.compile(r"unknown field `(?P<field>[^`]+)`")


def _explain(exc: msgspec.ValidationError, path: Path, layers: list[tuple[str, Mapping[str, Any]]]) -> str:
    """Turn msgspec's message into one naming the key and where its bad value came from."""
    match = _AT.match(str(exc))
    assert match is not None  # the pattern matches any string
    message, where = match["message"], (match["path"] or "").lstrip(".")
    unknown = _UNKNOWN.search(message)
    if unknown:
        key = f"{where}.{unknown['field']}" if where else unknown["field"]
        names = [name for name, _ in config_keys()]
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown key {key!r} in config file {path}{hint} (known keys: {', '.join(names)})"
    # Checks in __post_init__ start their message with the key they refuse.
    first = message.split(" ", 1)[0]
    key = first if first in dict(config_keys()) else where
    parts = [part for part in key.split(".") if part]
    if not parts:
        return f"bad configuration ({path}, GZ_IA_* variables, flags): {message}"
    source = next((origin for origin, layer in layers if _holds(layer, parts)), None)
    if source == "flag":
        flag = "-".join(parts) if parts[0] == "fleet" else parts[-1]
        source = f"flag --{flag.replace('_', '-')}"
    elif source == "env":
        source = env_var(key)
    elif source == "file":
        source = f"config file {path}"
    return f"bad value for {key}{f' (from {source})' if source else ''}: {message}"


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> CollectorConfig:
    """Build the configuration: flags over environment over file over defaults.

    Args:
        path: config file; None means :func:`default_config_path`, which may be missing.
        environ: environment to read (default ``os.environ``).
        flags: command-line values, already named like the config keys; None values are ignored.

    Raises:
        ConfigError: unreadable file, unknown key or bad value; the message names the key.
    """
    environ = os.environ if environ is None else environ
    explicit = path is not None or bool(environ.get("GZ_IA_CONFIG"))
    path = path if path is not None else default_config_path(environ)
    file_layer: dict[str, Any] = {}
    try:
        file_layer = msgspec.toml.decode(path.read_bytes())
    except FileNotFoundError as exc:
        if explicit:
            raise ConfigError(f"config file {path} does not exist") from exc
    except (OSError, msgspec.DecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    env_layer = _env_values(environ)
    flag_layer = {key: value for key, value in (flags or {}).items() if value is not None}
    merged = _merge(_merge(file_layer, env_layer), flag_layer)
    try:
        return msgspec.convert(merged, CollectorConfig, strict=False)
    except msgspec.ValidationError as exc:
        layers: list[tuple[str, Mapping[str, Any]]] = [
            ("flag", flag_layer),
            ("env", env_layer),
            ("file", file_layer),
        ]
        raise ConfigError(_explain(exc, path, layers)) from exc
