"""Command groups whose subcommands are imported only when used (click's documented lazy loading).

A reading command starts often, from scripts and pagers: importing every command module (and with them
subprocess, tempfile, json, sockets) would cost each ``gz-ia logs`` more than the answer. A group names
each lazy command as ``"module:attr"`` (the module relative to this package): the module is imported
when its command is run, completed or listed by ``--help``, and the group adds the click command it
exports under ``attr``. A command module defines plain ``click.command``/``click.group`` objects and
never imports the group that holds it, so no module imports the package back.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

__all__ = ["LazyGroup", "load_command"]


class LazyGroup(click.Group):
    """A group that imports a command's module the first time the command is looked up."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, str] = dict(lazy_commands or {})
        """Command name → ``"module:attr"``: the module (relative to this package) and the command it exports."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_commands.get(cmd_name)
        if target is not None and cmd_name not in self.commands:
            self.add_command(load_command(target), cmd_name)
        return super().get_command(ctx, cmd_name)


def load_command(target: str) -> click.Command:
    """Import ``"module:attr"`` (the module relative to this package) and return its click command."""
    module_name, _, attr = target.partition(":")
    command = getattr(importlib.import_module(module_name, __package__), attr)
    if not isinstance(command, click.Command):
        raise TypeError(f"{target} is not a click command")
    return command
