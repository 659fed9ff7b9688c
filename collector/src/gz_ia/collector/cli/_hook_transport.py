"""How ``gz-ia install claude-code`` connects Claude Code: ``http`` hooks, the inbox or the command hook.

An ``http`` hook costs Claude Code no process, but one posted while nothing listens is lost (Claude
Code does not retry). The inbox hook (a shell script leaving the payload in the collector's inbox,
:mod:`gz_ia.collector.integrations.claude_code.inbox_drop`) costs a shell, keeps what no collector
takes yet, and is the default. The command hook (``gz-ia hook claude-code``, a Python process per
hook) is the slowest and needs nothing else. ``auto`` installs ``http`` hooks only where the service
manager holds the collector's HTTP port across restarts: the HTTP socket unit that ``gz-ia-collector
install --user`` writes is there, enabled, and listens on the configured ``http_address``, passing
it to the collector by its name (``FileDescriptorName=http``); else the inbox hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ._install import HTTP_SOCKET_NAME, user_unit_dir

__all__ = ["TransportChoice", "choose_transport", "held_listen_streams"]

Mode = Literal["auto", "http", "inbox", "command"]


@dataclass(frozen=True)
class TransportChoice:
    """The hooks to install: ``http_url`` (None: a command hook, through the inbox where ``inbox``),
    and the sentence that says why."""

    http_url: str | None
    reason: str
    inbox: bool = False


def held_listen_streams(unit: Path) -> list[str] | None:
    """The ``ListenStream=`` values of a socket unit whose sockets reach the collector as its HTTP
    side (``FileDescriptorName=http``); None when the file is missing or names its sockets otherwise."""
    try:
        text = unit.read_text(encoding="utf-8")
    except OSError:
        return None
    section = ""
    streams: list[str] = []
    name = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        key, _, value = line.partition("=")
        if section != "[Socket]":
            continue
        if key.strip() == "ListenStream":
            streams = [] if not value.strip() else [*streams, value.strip()]  # an empty one resets the list
        elif key.strip() == "FileDescriptorName":
            name = value.strip()
    return streams if name == "http" else None


def _http_url() -> tuple[str | None, str, str]:
    """The hook URL of the configured ``http_address``, its ``host:port``, or None and why not."""
    from gz_ia.collector.config import ConfigError, load_config
    from gz_ia.collector.integrations.claude_code.settings import HTTP_HOOK_PATH

    try:
        config = load_config()
    except ConfigError as exc:
        return None, "", f"the configuration cannot be read to find http_address: {exc}"
    endpoint = config.http_endpoint()
    if endpoint is None:
        return None, "", "http_address is off"
    host, port = endpoint
    if port == 0:
        return None, "", "http_address asks for any free port (0): no hook can know it"
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"http://{address}{HTTP_HOOK_PATH}", address, ""


def choose_transport(mode: Mode, unit_dir: Path | None = None) -> TransportChoice:
    """Decide the hooks: ``command``, ``inbox`` and ``http`` as told (``http`` needs an HTTP address);
    ``auto`` ``http`` where the service manager holds the port, else ``inbox`` (see the module's
    docstring)."""
    if mode == "command":
        return TransportChoice(None, "--hooks command")
    if mode == "inbox":
        return TransportChoice(None, "--hooks inbox", inbox=True)
    url, address, problem = _http_url()
    if mode == "http":
        if url is None:
            raise ValueError(f"--hooks http: {problem}")
        return TransportChoice(url, "--hooks http (a hook posted while no collector listens is lost)")
    if url is None:
        return TransportChoice(None, f"inbox hook: {problem}", inbox=True)
    directory = unit_dir if unit_dir is not None else user_unit_dir()
    unit = directory / HTTP_SOCKET_NAME
    streams = held_listen_streams(unit)
    if streams is None:
        return TransportChoice(
            None,
            f"inbox hook: no service manager holds {address} across collector restarts ({unit} is not "
            "there; `gz-ia-collector install --user` writes it), and an http hook posted while the "
            "collector is down would be lost",
            inbox=True,
        )
    if address not in streams:
        return TransportChoice(
            None,
            f"inbox hook: {unit} listens on {', '.join(streams) or 'nothing'}, not on http_address {address} "
            "(run `gz-ia-collector install --user` again)",
            inbox=True,
        )
    enabled = directory / "sockets.target.wants" / HTTP_SOCKET_NAME
    if not enabled.exists():
        return TransportChoice(
            None,
            f"inbox hook: {unit} is not enabled "
            f"(`systemctl --user enable --now {HTTP_SOCKET_NAME}`, then install again)",
            inbox=True,
        )
    return TransportChoice(url, f"http hooks: {unit} holds {address} across collector restarts")
