"""Collector configuration: one TOML file, environment variables and flags.

Precedence: flag > environment > file > default. The file is
``$XDG_CONFIG_HOME/gz-ia/collector.toml`` (``~/.config/gz-ia/collector.toml``) unless ``--config``
or ``GZ_IA_CONFIG`` names another; a missing default file is fine, a missing named one is an error.
Every key of the file can also be given as ``GZ_IA_<SECTION>_<KEY>`` (``GZ_IA_DURABILITY``,
``GZ_IA_ROTATION_MAX_BYTES``...). Unknown keys and bad values are errors that name the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

__all__ = [
    "CollectorConfig",
    "ConfigError",
    "RetentionConfig",
    "RotationConfig",
    "default_config_path",
    "load_config",
]

ENV_PREFIX: Final = "GZ_IA_"


class ConfigError(Exception):
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

    def __post_init__(self) -> None:
        if self.max_archives < 0 or self.max_age_days < 0 or self.max_root_bytes < 0:
            raise ValueError("retention limits must be >= 0")


class CollectorConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every setting of the collector, with its default."""

    socket: str = ""
    """Socket path; empty: ``$GZ_IA_SOCKET`` or ``$XDG_RUNTIME_DIR/gz-ia/collector.sock``."""
    durability: Literal["os", "fsync"] = "os"
    """``os``: acknowledge once written to the OS; ``fsync``: after a grouped fdatasync."""
    max_open_files: int = 256
    metrics_address: str = "127.0.0.1:9477"
    """``host:port`` of the Prometheus endpoint; empty or ``off`` disables it."""
    allow_uids: list[int] = []
    """Other uids allowed to connect (the collector's own uid always is)."""
    max_open_actions: int = 10_000
    max_backlog_batches: int = 64
    """Batches awaiting their verdict per connection before the collector stops reading it."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    rotation: RotationConfig = RotationConfig()
    retention: RetentionConfig = RetentionConfig()

    def __post_init__(self) -> None:
        if self.max_open_files < 4:
            raise ValueError("max_open_files must be at least 4")
        if self.max_open_actions < 1 or self.max_backlog_batches < 1:
            raise ValueError("max_open_actions and max_backlog_batches must be positive")
        if self.metrics_address not in ("", "off"):
            host, _, port = self.metrics_address.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"metrics_address {self.metrics_address!r} is not host:port")

    @property
    def metrics_enabled(self) -> bool:
        """Whether the Prometheus endpoint is on."""
        return self.metrics_address not in ("", "off")


def default_config_path() -> Path:
    """Return ``$GZ_IA_CONFIG``, else ``$XDG_CONFIG_HOME/gz-ia/collector.toml``."""
    explicit = os.environ.get("GZ_IA_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gz-ia" / "collector.toml"


def _env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    sections: dict[str, type[msgspec.Struct]] = {"rotation": RotationConfig, "retention": RetentionConfig}
    for field in msgspec.structs.fields(CollectorConfig):
        if field.name in sections:
            for sub in msgspec.structs.fields(sections[field.name]):
                key = f"{ENV_PREFIX}{field.name}_{sub.name}".upper()
                if key in environ:
                    values.setdefault(field.name, {})[sub.name] = environ[key]
            continue
        key = f"{ENV_PREFIX}{field.name}".upper()
        if key in environ:
            raw = environ[key]
            values[field.name] = [int(x) for x in raw.split(",") if x.strip()] if field.name == "allow_uids" else raw
    return values


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


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
        ConfigError: unreadable file, unknown key or bad value.
    """
    environ = os.environ if environ is None else environ
    explicit = path is not None or bool(environ.get("GZ_IA_CONFIG"))
    path = path if path is not None else default_config_path()
    layers: dict[str, Any] = {}
    try:
        layers = msgspec.toml.decode(path.read_bytes())
    except FileNotFoundError as exc:
        if explicit:
            raise ConfigError(f"config file {path} does not exist") from exc
    except (OSError, msgspec.DecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        env_layer = _env_values(environ)
    except ValueError as exc:
        raise ConfigError(f"bad GZ_IA_ALLOW_UIDS: {exc}") from exc
    layers = _merge(layers, env_layer)
    layers = _merge(layers, {key: value for key, value in (flags or {}).items() if value is not None})
    try:
        return msgspec.convert(layers, CollectorConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid configuration ({path}, GZ_IA_* variables, flags): {exc}") from exc
