"""``gz-ia-collector install --user``: write the systemd user units for this installation.

The unit texts below are the one source of truth: ``systemd/`` in the repository holds the same
files with the ``ExecStart`` of a ``uv tool``/``pipx`` install (``%h/.local/bin``), and a test keeps
the two identical apart from that line.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Final

import click

from ._collector import collector_main

__all__ = [
    "DEFAULT_EXEC_START",
    "SERVICE_NAME",
    "SOCKET_NAME",
    "command_line",
    "exec_start",
    "render_units",
    "user_unit_dir",
]

SOCKET_NAME: Final = "gz-ia-collector.socket"
SERVICE_NAME: Final = "gz-ia-collector.service"
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

_SERVICE_UNIT: Final = """\
# gz-ia collector (systemd user unit), started on the first connection to gz-ia-collector.socket.
# Installed by `gz-ia-collector install --user`, which points ExecStart at the current installation;
# see docs/operations.md.
[Unit]
Description=gz-ia collector: agent stage events to JSON Lines
Requires=gz-ia-collector.socket
After=gz-ia-collector.socket

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec_start}
ExecReload=/bin/kill -HUP $MAINPID
WatchdogSec=30
Restart=on-failure
RestartSec=1
TimeoutStopSec=20
LimitNOFILE=65536
UMask=0077
# Hardening a user manager applies without privileges: prctl flags and seccomp filters. What needs
# user namespaces or capabilities is in deploy/systemd/ as an opt-in drop-in (docs/operations.md).
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
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
KeyringMode=private

[Install]
Also=gz-ia-collector.socket
"""


def render_units(exec_start: str = DEFAULT_EXEC_START) -> dict[str, str]:
    """Return ``{file name: text}`` of the socket and service units, with ``exec_start`` as ``ExecStart``."""
    return {SOCKET_NAME: _SOCKET_UNIT, SERVICE_NAME: _SERVICE_UNIT.format(exec_start=exec_start)}


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
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


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


@collector_main.command("install")
@click.option("--user", "user", is_flag=True, help="Install systemd user units (the only mode supported).")
@click.option("--dry-run", is_flag=True, help="Print the units and where they would go; write nothing.")
@click.option(
    "--unit-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write the units [default: $XDG_CONFIG_HOME/systemd/user].",
)
def install_command(user: bool, dry_run: bool, unit_dir: Path | None) -> None:
    """Write the systemd user units that run this installation's collector."""
    if not user:
        raise click.UsageError("only user units are supported: run `gz-ia-collector install --user`")
    directory = unit_dir if unit_dir is not None else user_unit_dir()
    units = render_units(exec_start())
    for name, text in units.items():
        path = directory / name
        if dry_run:
            click.echo(f"# would write {path}")
            click.echo(text)
            continue
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, text)
        click.echo(f"wrote {path}")
    verb = "Then enable" if dry_run else "Now enable"
    click.echo(
        f"\n{verb} the socket (the collector starts on the first connection):\n"
        f"  systemctl --user daemon-reload && systemctl --user enable --now {SOCKET_NAME}\n"
        "Keep it running while you are logged out:\n"
        "  loginctl enable-linger $USER\n"
        "Check it with `gz-ia status` or `systemctl --user status gz-ia-collector`; "
        "reload the configuration with `systemctl --user reload gz-ia-collector`."
    )
