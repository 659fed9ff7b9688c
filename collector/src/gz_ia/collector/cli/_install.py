"""``gz-ia-collector install --user``: write the systemd user units for this installation.

Two sockets start the one service: ``gz-ia-collector.socket`` (the event socket, fd name ``events``)
and ``gz-ia-collector-http.socket`` (the loopback HTTP port that hooks post to, fd name ``http``).
Holding the HTTP port in the service manager is what lets an ``http`` hook reach a collector that is
restarting: the kernel queues the connection until the new process accepts it. The HTTP unit is
written for the configured ``http_address`` and left out where it is off or asks for any port (0).

The unit texts below are the one source of truth: ``systemd/`` in the repository holds the same
files with the ``ExecStart`` of a ``uv tool``/``pipx`` install (``%h/.local/bin``), and a test keeps
the two identical apart from that line. The same holds for the sandbox drop-in and its copy in
``deploy/systemd/``, which is installed only where this user can make a user namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import click

from gz_ia.client import env

__all__ = [
    "DEFAULT_EXEC_START",
    "DEFAULT_HTTP_LISTEN",
    "HTTP_SOCKET_NAME",
    "SANDBOX_DROP_IN",
    "SANDBOX_PATH",
    "SERVICE_NAME",
    "SOCKET_NAME",
    "USERNS_PROBE",
    "SandboxChoice",
    "choose_sandbox",
    "command_line",
    "exec_start",
    "install_command",
    "probe_user_namespaces",
    "render_units",
    "user_unit_dir",
]

SOCKET_NAME: Final = "gz-ia-collector.socket"
SERVICE_NAME: Final = "gz-ia-collector.service"
HTTP_SOCKET_NAME: Final = "gz-ia-collector-http.socket"
DEFAULT_HTTP_LISTEN: Final = "127.0.0.1:11000"
"""``ListenStream=`` of the HTTP unit shipped in ``systemd/``: uid 1000's ``http_address = "auto"``
(install writes the address of the user who runs it)."""
DEFAULT_EXEC_START: Final = "%h/.local/bin/gz-ia-collector serve"
"""``ExecStart`` of the units shipped in ``systemd/``: where ``uv tool install``/``pipx`` put the script."""

_SOCKET_UNIT: Final = """\
# gz-ia collector socket (systemd user unit). Installed by `gz-ia-collector install --user`;
# see docs/operations.md. The listening socket is passed to the service as fd 3, named "events".
[Unit]
Description=gz-ia collector socket

[Socket]
ListenStream=%t/gz-ia/collector.sock
SocketMode=0600
DirectoryMode=0700
FileDescriptorName=events
Backlog=1024

[Install]
WantedBy=sockets.target
"""

_HTTP_SOCKET_UNIT: Final = """\
# gz-ia collector HTTP port (systemd user unit): Claude Code's http hooks post here. Installed by
# `gz-ia-collector install --user` for the configured http_address; see docs/operations.md. Held by
# the service manager, the port accepts connections while the collector restarts; passed to the
# service as the fd named "http".
[Unit]
Description=gz-ia collector HTTP port (hooks)

[Socket]
ListenStream={listen}
NoDelay=yes
FileDescriptorName=http
Backlog=1024
Service=gz-ia-collector.service

[Install]
WantedBy=sockets.target
"""

_SERVICE_UNIT: Final = """\
# gz-ia collector (systemd user unit), started on the first connection to gz-ia-collector.socket
# (or to gz-ia-collector-http.socket, where installed). Installed by `gz-ia-collector install --user`,
# which points ExecStart at the current installation; see docs/operations.md.
[Unit]
Description=gz-ia collector: agent stage events to JSON Lines
Requires=gz-ia-collector.socket
After=gz-ia-collector.socket{http_after}

[Service]
Type=notify
NotifyAccess=main
# The fleet flags (--fleet-url, --fleet-host, --fleet-hub) are the [fleet] keys of the config file and
# GZ_IA_FLEET_* variables: set them there, or in a drop-in (`systemctl --user edit gz-ia-collector`:
# [Service] Environment=GZ_IA_FLEET_URL=nats://nats.example:4222 GZ_IA_FLEET_HOST=laptop).
ExecStart={exec_start}
ExecReload=/bin/kill -HUP $MAINPID
WatchdogSec=30
Restart=on-failure
RestartSec=1
TimeoutStopSec=20
LimitNOFILE=65536
UMask=0077
# Hardening a user manager applies without privileges: prctl flags and seccomp filters. What needs
# a user namespace is in the drop-in gz-ia-collector.service.d/sandbox.conf (docs/operations.md).
NoNewPrivileges=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictNamespaces=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
SystemCallErrorNumber=EPERM
# AF_NETLINK: the HTTP side asks the kernel's socket table (NETLINK_SOCK_DIAG) whose each connection is.
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
KeyringMode=private

[Install]
Also=gz-ia-collector.socket{http_also}
"""

SANDBOX_PATH: Final = Path("gz-ia-collector.service.d") / "sandbox.conf"
"""Where the sandbox drop-in goes, relative to the unit directory."""

SANDBOX_DROP_IN: Final = """\
# Sandbox for the gz-ia collector's user service: a private user namespace, inside which the user
# manager can also make mounts read-only and drop capabilities. `gz-ia-collector install --user`
# writes it where this user can make a user namespace and the configuration sets no allow_uids;
# `--sandbox no` removes it. See docs/operations.md ("Hardening"):
# - it needs unprivileged user namespaces; where they are off (user.max_user_namespaces=0) or
#   restricted (Ubuntu 23.10 and later: kernel.apparmor_restrict_unprivileged_userns=1) the service
#   fails to start;
# - other users appear as `nobody` inside it, so `allow_uids` cannot work (the collector logs an
#   error naming each unmapped uid).
[Service]
PrivateUsers=yes
PrivateMounts=yes
PrivateDevices=yes
ProtectSystem=full
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
"""

USERNS_PROBE: Final = ("unshare", "--user", "--map-root-user", "true")
"""What ``--sandbox auto`` runs: it succeeds where this user may make a user namespace and map
itself into it, which is what ``PrivateUsers=yes`` asks of the user manager."""


@dataclass(frozen=True)
class SandboxChoice:
    """Whether ``install`` writes the sandbox drop-in, and the sentence that says why."""

    install: bool
    reason: str


def probe_user_namespaces() -> str | None:
    """Run :data:`USERNS_PROBE` in a child process; return None when it works, else why it does not."""
    try:
        result = subprocess.run(USERNS_PROBE, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        return "`unshare` (util-linux) is not installed, so user namespaces could not be probed"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{' '.join(USERNS_PROBE)}` could not run: {exc}"
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
        return (
            f"this user cannot make a user namespace (`{' '.join(USERNS_PROBE)}`: {detail[0]}), "
            "which PrivateUsers=yes needs"
        )
    return None


def _allow_uids() -> tuple[list[int] | None, str]:
    """The configuration's ``allow_uids`` as the service would read it, or None and the error."""
    from gz_ia.collector.config import ConfigError, load_config

    try:
        return list(load_config().allow_uids), ""
    except ConfigError as exc:
        return None, str(exc)


def choose_sandbox(mode: Literal["auto", "yes", "no"]) -> SandboxChoice:
    """Decide whether to install the sandbox drop-in: ``yes`` and ``no`` as told; ``auto`` when the
    configuration admits no other uid and this user can make a user namespace."""
    if mode == "no":
        return SandboxChoice(False, "--sandbox no")
    if mode == "yes":
        uids, _ = _allow_uids()
        if uids:
            return SandboxChoice(True, f"--sandbox yes; allow_uids {uids} will be refused inside it")
        return SandboxChoice(True, "--sandbox yes")
    uids, error = _allow_uids()
    if uids is None:
        return SandboxChoice(False, f"the configuration cannot be read to check allow_uids: {error}")
    if uids:
        return SandboxChoice(
            False, f"the configuration sets allow_uids {uids}, and other uids appear as nobody inside it"
        )
    problem = probe_user_namespaces()
    if problem is not None:
        return SandboxChoice(False, problem)
    return SandboxChoice(
        True, f"this user can make a user namespace (`{' '.join(USERNS_PROBE)}` succeeded); opt out: --sandbox no"
    )


def render_units(exec_start: str = DEFAULT_EXEC_START, http_listen: str | None = DEFAULT_HTTP_LISTEN) -> dict[str, str]:
    """Return ``{file name: text}`` of the units, with ``exec_start`` as ``ExecStart`` and the HTTP
    socket listening on ``http_listen`` (``host:port``; None: no HTTP socket unit)."""
    if http_listen is None:
        service = _SERVICE_UNIT.format(exec_start=exec_start, http_after="", http_also="")
        return {SOCKET_NAME: _SOCKET_UNIT, SERVICE_NAME: service}
    service = _SERVICE_UNIT.format(
        exec_start=exec_start,
        http_after=f" {HTTP_SOCKET_NAME}\nWants={HTTP_SOCKET_NAME}",
        http_also=f" {HTTP_SOCKET_NAME}",
    )
    http = _HTTP_SOCKET_UNIT.format(listen=http_listen)
    return {SOCKET_NAME: _SOCKET_UNIT, SERVICE_NAME: service, HTTP_SOCKET_NAME: http}


def http_listen() -> tuple[str | None, str]:
    """The ``ListenStream=`` of the HTTP socket unit for the configured ``http_address``, or None,
    and the sentence that says why."""
    from gz_ia.collector.config import ConfigError, load_config

    try:
        config = load_config()
    except ConfigError as exc:
        return None, f"the configuration cannot be read to find http_address: {exc}"
    endpoint = config.http_endpoint()
    if endpoint is None:
        return None, "http_address is off"
    host, port = endpoint
    if port == 0:
        return None, "http_address asks for any free port (0), which a unit cannot hold"
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return listen, f"http_address {config.http_address!r}"


def _quote(word: str, *, program: bool = False) -> str:
    # systemd expands % specifiers everywhere in ExecStart, and $VARIABLES only in the arguments
    # (the executable's path is taken literally): double them where they apply, quote spaces.
    word = word.replace("%", "%%")
    if not program:
        word = word.replace("$", "$$")
    if any(char in word for char in " \t\"\\'"):
        word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word


def command_line(program: Path, *args: str) -> str:
    """Return an ``ExecStart`` value running ``program`` with ``args``, quoted for systemd."""
    return " ".join([_quote(str(program), program=True), *(_quote(arg) for arg in args)])


def exec_start() -> str:
    """Return the ``ExecStart`` command line that runs this installation's collector.

    The ``gz-ia-collector`` script beside the running interpreter (the same virtual environment)
    wins; then the one on ``PATH``; else ``<python> -m gz_ia.collector``.
    """
    beside = Path(sys.executable).parent / "gz-ia-collector"
    if beside.is_file() and os.access(beside, os.X_OK):
        return command_line(beside.absolute(), "serve")
    found = shutil.which("gz-ia-collector")
    if found:
        return command_line(Path(found).absolute(), "serve")
    return command_line(Path(sys.executable).absolute(), "-m", "gz_ia.collector", "serve")


def user_unit_dir() -> Path:
    """Return ``$XDG_CONFIG_HOME/systemd/user`` (``~/.config/systemd/user``)."""
    return env.config_home() / "systemd" / "user"


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass  # other drop-ins of the user's own live there


@click.command("install")
@click.option("--user", "user", is_flag=True, help="Install systemd user units (the only mode supported).")
@click.option("--dry-run", is_flag=True, help="Print the units and where they would go; write nothing.")
@click.option(
    "--unit-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write the units [default: $XDG_CONFIG_HOME/systemd/user].",
)
@click.option(
    "--sandbox",
    type=click.Choice(["auto", "yes", "no"]),
    default="auto",
    show_default=True,
    help="Also write the sandbox drop-in (PrivateUsers=yes and the namespace directives); auto: where "
    "this user can make a user namespace and the configuration sets no allow_uids. no: remove it.",
)
def install_command(user: bool, dry_run: bool, unit_dir: Path | None, sandbox: Literal["auto", "yes", "no"]) -> None:
    """Write the systemd user units that run this installation's collector."""
    if not user:
        raise click.UsageError("only user units are supported: run `gz-ia-collector install --user`")
    directory = unit_dir if unit_dir is not None else user_unit_dir()
    listen, listen_reason = http_listen()
    files = render_units(exec_start(), listen)
    choice = choose_sandbox(sandbox)
    if choice.install:
        files[str(SANDBOX_PATH)] = SANDBOX_DROP_IN
    for name, text in files.items():
        path = directory / name
        if dry_run:
            click.echo(f"# would write {path}")
            click.echo(text)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, text)
        click.echo(f"wrote {path}")
    drop_in = directory / SANDBOX_PATH
    if not choice.install and drop_in.exists():
        # A sandbox written by an earlier install would otherwise stay in force.
        if dry_run:
            click.echo(f"# would remove {drop_in}")
        else:
            drop_in.unlink()
            _remove_if_empty(drop_in.parent)
            click.echo(f"removed {drop_in}")
    http_unit = directory / HTTP_SOCKET_NAME
    if listen is None and http_unit.exists():
        # An HTTP port held for an earlier http_address would otherwise stay taken.
        if dry_run:
            click.echo(f"# would remove {http_unit}")
        else:
            http_unit.unlink()
            click.echo(f"removed {http_unit}")
    click.echo(f"sandbox: {'installed' if choice.install else 'not installed'}: {choice.reason}")
    click.echo(f"http socket: {'on ' + listen if listen else 'not installed'}: {listen_reason}")
    sockets = SOCKET_NAME if listen is None else f"{SOCKET_NAME} {HTTP_SOCKET_NAME}"
    verb = "Then enable" if dry_run else "Now enable"
    click.echo(
        f"\n{verb} the sockets (the collector starts on the first connection):\n"
        f"  systemctl --user daemon-reload && systemctl --user enable --now {sockets}\n"
        "Keep it running while you are logged out:\n"
        "  loginctl enable-linger $USER\n"
        "Check it with `gz-ia status` or `systemctl --user status gz-ia-collector`; "
        "reload the configuration with `systemctl --user reload gz-ia-collector`."
    )
