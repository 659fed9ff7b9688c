"""Collector configuration: precedence flag > environment > file > default, and clear errors."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gz_ia.collector.cli import collector_main
from gz_ia.collector.config import (
    CollectorConfig,
    ConfigError,
    config_keys,
    default_config_path,
    default_metrics_port,
    env_var,
    load_config,
)


@pytest.fixture(name="config_file")
def _config_file(tmp_path: Path) -> Path:
    """Where a test writes its TOML file."""
    return tmp_path / "collector.toml"


def test_defaults_without_file_env_or_flags(tmp_path: Path) -> None:
    """A missing default file, no variables and no flags give CollectorConfig's defaults."""
    config = load_config(environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert config == CollectorConfig()
    assert config.durability == "os"
    assert config.max_open_files == 65536
    assert config.metrics_enabled
    assert config.metrics_address == "auto"


def test_auto_metrics_address_is_a_loopback_port_per_uid() -> None:
    """``auto`` (the default) serves on 127.0.0.1 at 20000 + uid % 10000, so that users' collectors coexist."""
    assert [default_metrics_port(uid) for uid in (0, 1000, 1001, 12345, 65534)] == [20000, 21000, 21001, 22345, 25534]
    assert CollectorConfig().metrics_endpoint() == ("127.0.0.1", default_metrics_port(os.getuid()))
    assert CollectorConfig(metrics_address="[::1]:9477").metrics_endpoint() == ("::1", 9477)
    assert CollectorConfig(metrics_address="off").metrics_endpoint() is None


def test_default_path_follows_xdg_config_home_and_gz_ia_config(tmp_path: Path) -> None:
    """The default file is $XDG_CONFIG_HOME/gz-ia/collector.toml unless GZ_IA_CONFIG names one."""
    assert default_config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "gz-ia" / "collector.toml"
    assert default_config_path({"GZ_IA_CONFIG": "/x/y.toml", "XDG_CONFIG_HOME": str(tmp_path)}) == Path("/x/y.toml")


def test_default_file_is_read_from_xdg_config_home(tmp_path: Path) -> None:
    """Without --config the file under $XDG_CONFIG_HOME/gz-ia/ is used."""
    path = tmp_path / "gz-ia" / "collector.toml"
    path.parent.mkdir()
    path.write_text('durability = "fsync"\n')
    assert load_config(environ={"XDG_CONFIG_HOME": str(tmp_path)}).durability == "fsync"


def test_file_beats_default(config_file: Path) -> None:
    """A value in the file replaces the default, sections included."""
    config_file.write_text("max_open_files = 32\n[rotation]\nmax_bytes = 8192\n[retention]\nmax_archives = 3\n")
    config = load_config(config_file, environ={})
    assert (config.max_open_files, config.rotation.max_bytes, config.retention.max_archives) == (32, 8192, 3)
    assert config.rotation.compress is True  # untouched keys of a section keep their defaults


def test_environment_beats_file(config_file: Path) -> None:
    """GZ_IA_<KEY> and GZ_IA_<SECTION>_<KEY> override the file, converted to the key's type."""
    config_file.write_text("max_open_files = 32\n[rotation]\nmax_bytes = 8192\ndaily = false\n")
    environ = {
        "GZ_IA_MAX_OPEN_FILES": "64",
        "GZ_IA_ROTATION_MAX_BYTES": "16384",
        "GZ_IA_ROTATION_DAILY": "true",
        "GZ_IA_ALLOW_UIDS": "1001,1002",
    }
    config = load_config(config_file, environ=environ)
    assert (config.max_open_files, config.rotation.max_bytes, config.rotation.daily) == (64, 16384, True)
    assert config.allow_uids == [1001, 1002]


def test_flags_beat_environment(config_file: Path) -> None:
    """A flag overrides the variable and the file; a None flag (not given) does not."""
    config_file.write_text('durability = "os"\nmax_open_files = 32\n')
    environ = {"GZ_IA_DURABILITY": "os", "GZ_IA_MAX_OPEN_FILES": "64"}
    config = load_config(config_file, environ=environ, flags={"durability": "fsync", "max_open_files": None})
    assert (config.durability, config.max_open_files) == ("fsync", 64)


def test_gz_ia_config_names_the_file(config_file: Path) -> None:
    """GZ_IA_CONFIG selects the file when --config is not given."""
    config_file.write_text("max_open_actions = 7\n")
    assert load_config(environ={"GZ_IA_CONFIG": str(config_file)}).max_open_actions == 7


def test_every_key_has_an_environment_variable(config_file: Path) -> None:
    """Each documented key maps to GZ_IA_<SECTION>_<KEY>, and that variable is honoured."""
    assert env_var("rotation.max_bytes") == "GZ_IA_ROTATION_MAX_BYTES"
    assert env_var("log_level") == "GZ_IA_LOG_LEVEL"
    values = {
        "socket": "/tmp/x.sock",
        "durability": "fsync",
        "max_open_files": "9",
        "metrics_address": "off",
        "http_address": "127.0.0.1:9",
        "allow_uids": "5",
        "spool_dir": "/tmp/spool",
        "spool_adoption_interval": "2.5",
        "max_open_actions": "9",
        "max_open_actions_total": "99",
        "max_connections": "9",
        "max_connections_per_uid": "9",
        "max_backlog_batches": "9",
        "log_level": "debug",
        "shards": "3",
        "rotation.max_bytes": "9999",
        "rotation.max_events": "9",
        "rotation.daily": "true",
        "rotation.compress": "false",
        "retention.max_archives": "9",
        "retention.max_age_days": "9.5",
        "retention.max_root_bytes": "9",
        "retention.max_held_archives": "9",
        "redaction.enabled": "false",
        "redaction.patterns": "internal-id=itk_[0-9a-f]{32}\nticket=TCK-(?P<value>[0-9]{6})",
        "redaction.disable": "jwt, stripe-key",
        "alerts.hung_after": "9",
        "fleet.url": "nats://127.0.0.1:9",
        "fleet.host": "laptop",
        "fleet.hub": "true",
        "fleet.hub_root": "/tmp/hub",
        "fleet.consumer": "hub-a",
        "fleet.hosts": "laptop, runner",
        "fleet.credentials": "/tmp/x.creds",
        "fleet.nkey_seed": "/tmp/x.nk",
        "fleet.tls_ca": "/tmp/ca.pem",
        "fleet.tls_cert": "/tmp/cert.pem",
        "fleet.tls_key": "/tmp/key.pem",
        "fleet.stream": "TEAM",
        "fleet.replicas": "3",
        "fleet.duplicate_window": "300",
        "fleet.ack_wait": "9",
    }
    assert sorted(values) == sorted(key for key, _ in config_keys())
    config_file.write_text("")
    loaded = load_config(config_file, environ={env_var(key): value for key, value in values.items()})
    assert loaded.socket == "/tmp/x.sock"
    assert loaded.spool_dir == "/tmp/spool"
    assert loaded.metrics_enabled is False
    assert loaded.http_endpoint() == ("127.0.0.1", 9)
    assert loaded.allow_uids == [5]
    assert loaded.fleet.hosts == ["laptop", "runner"]
    assert (loaded.rotation.daily, loaded.rotation.compress, loaded.retention.max_age_days) == (True, False, 9.5)
    unchanged = [key for key, default in config_keys() if _get(loaded, key) == default]
    assert unchanged == []


def _get(config: CollectorConfig, key: str) -> object:
    value: object = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bogus = 1\n", "unknown key 'bogus'"),
        ("[rotation]\nmax_byte = 9000\n", "unknown key 'rotation.max_byte'"),
        ('durability = "sometimes"\n', "bad value for durability"),
        ('max_open_files = "many"\n', "bad value for max_open_files"),
        ("max_open_files = 1\n", "bad value for max_open_files"),
        ("[rotation]\nmax_bytes = 10\n", "bad value for rotation.max_bytes"),
        ("[retention]\nmax_age_days = -1\n", "bad value for retention.max_age_days"),
        ('metrics_address = "nowhere"\n', "bad value for metrics_address"),
        ('log_level = "loud"\n', "bad value for log_level"),
        ("shards = 0\n", "bad value for shards"),
        ("spool_adoption_interval = 0\n", "bad value for spool_adoption_interval"),
        ("shards = 65\n", "bad value for shards"),
        ("max_open_files = \n", "cannot read config file"),
        ('[fleet]\nurll = "nats://127.0.0.1:4222"\n', "unknown key 'fleet.urll' in config file"),
        ('[fleet]\nurll = "nats://127.0.0.1:4222"\n', "did you mean 'fleet.url'?"),
        ('[fleet]\nurl = "nats://127.0.0.1:4222"\nhost = "a.b"\n', "bad value for fleet.host"),
        ("[fleet]\nhub = true\n", "fleet.hub needs fleet.url"),
    ],
)
def test_bad_file_names_the_key(config_file: Path, text: str, expected: str) -> None:
    """An unknown key or a bad value is a ConfigError naming the key and the file."""
    config_file.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(config_file, environ={})
    assert expected in str(info.value)
    assert str(config_file) in str(info.value)


def test_bad_environment_value_names_the_variable(config_file: Path) -> None:
    """A bad GZ_IA_* value is reported under that variable's name."""
    config_file.write_text("")
    with pytest.raises(ConfigError, match=r"rotation\.max_bytes \(from GZ_IA_ROTATION_MAX_BYTES\)"):
        load_config(config_file, environ={"GZ_IA_ROTATION_MAX_BYTES": "big"})
    with pytest.raises(ConfigError, match="GZ_IA_ALLOW_UIDS"):
        load_config(config_file, environ={"GZ_IA_ALLOW_UIDS": "me"})


def test_bad_flag_names_the_flag(config_file: Path) -> None:
    """A bad flag value is reported under the flag's name."""
    config_file.write_text("")
    with pytest.raises(ConfigError, match=r"max_open_files \(from flag --max-open-files\)"):
        load_config(config_file, environ={}, flags={"max_open_files": 2})


def test_missing_named_file_is_an_error(tmp_path: Path) -> None:
    """A file named by --config or GZ_IA_CONFIG must exist; only the default one may be missing."""
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", environ={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(environ={"GZ_IA_CONFIG": str(tmp_path / "nope.toml")})


def test_cli_exits_2_naming_the_unknown_key(config_file: Path, tmp_path: Path) -> None:
    """gz-ia-collector with an unknown key in its file exits 2 before starting, naming the key."""
    config_file.write_text("[retention]\nmax_archive = 3\n")
    result = CliRunner().invoke(collector_main, ["--config", str(config_file)], env={"XDG_RUNTIME_DIR": str(tmp_path)})
    assert result.exit_code == 2
    assert "unknown key 'retention.max_archive'" in result.output


def test_cli_exits_2_naming_the_bad_variable(tmp_path: Path) -> None:
    """gz-ia-collector with a bad GZ_IA_* value exits 2 naming the variable."""
    result = CliRunner().invoke(
        collector_main,
        ["serve"],
        env={"XDG_CONFIG_HOME": str(tmp_path), "GZ_IA_MAX_BACKLOG_BATCHES": "0", "GZ_IA_CONFIG": None},
    )
    assert result.exit_code == 2
    assert "max_backlog_batches (from GZ_IA_MAX_BACKLOG_BATCHES)" in result.output


def test_every_key_is_documented() -> None:
    """docs/operations.md lists every config key with its default and its environment variable."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in docs.splitlines() if line.startswith("| `")}
    for key, default in config_keys():
        row = rows.get(f"`{key}`")
        assert row is not None, f"{key} is missing from the configuration table"
        assert f"`{env_var(key)}`" in row
        shown = {True: "`true`", False: "`false`"}.get(default) if isinstance(default, bool) else None
        expected = shown or (f'`"{default}"`' if isinstance(default, str) else f"`{default}`")
        assert expected in row, (key, expected, row)


def test_the_fleet_flags_are_the_fleet_keys_and_a_bad_one_is_named(config_file: Path) -> None:
    """--fleet-url/--fleet-host/--fleet-hub over GZ_IA_FLEET_* over [fleet]; a bad flag names its flag."""
    config_file.write_text('[fleet]\nurl = "nats://file:1"\nhost = "file-host"\n')
    environ = {"GZ_IA_FLEET_HOST": "env-host"}
    loaded = load_config(config_file, environ=environ, flags={"fleet": {"url": "nats://flag:2", "hub": True}})
    assert (loaded.fleet.url, loaded.fleet.host, loaded.fleet.hub) == ("nats://flag:2", "env-host", True)
    assert loaded.fleet.machine() == "env-host"
    with pytest.raises(ConfigError, match="from flag --fleet-host"):
        load_config(config_file, environ={}, flags={"fleet": {"host": "a.b"}})


def test_redaction_rules_from_the_file_and_refusals_naming_the_key(config_file: Path) -> None:
    """[redaction] takes named patterns and default rules to disable; a bad one stops the start, named."""
    config_file.write_text(
        '[redaction]\npatterns = [{name = "internal-id", pattern = "itk_[0-9a-f]{8}"}]\ndisable = ["jwt"]\n'
    )
    loaded = load_config(config_file, environ={})
    redactor = loaded.redaction.redactor()
    assert redactor is not None
    assert redactor.text("id itk_0123abcd") == "id [REDACTED:internal-id]"
    assert redactor.text("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmN").startswith("eyJhbGci")
    for text, expected in (
        ('[redaction]\ndisable = ["nope"]\n', "redaction.disable names no default rule: nope"),
        ('[redaction]\npatterns = [{name = "x", pattern = "("}]\n', "is not a regular expression"),
        ('[redaction]\npatterns = [{name = "x", pattern = "a*"}]\n', "matches the empty text"),
        ('[redaction]\npatterns = [{name = "Bad Name", pattern = "a"}]\n', "must be 1-40 of a-z"),
    ):
        config_file.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(expected)):
            load_config(config_file, environ={})
    config_file.write_text("")
    with pytest.raises(ConfigError, match="GZ_IA_REDACTION_PATTERNS"):
        load_config(config_file, environ={"GZ_IA_REDACTION_PATTERNS": "no name here"})
    assert load_config(config_file, environ={"GZ_IA_REDACTION_ENABLED": "false"}).redaction.redactor() is None
