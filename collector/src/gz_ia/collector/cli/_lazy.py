"""Command groups whose subcommands are imported only when used (click's documented lazy loading).

A reading command starts often, from scripts and pagers: importing every command module (and with them
subprocess, tempfile, json, sockets) would cost each ``gz-ia logs`` more than the answer. A module named
here is imported when its command is run, completed or listed by ``--help``, and registers its commands
on the group as it always does.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["LazyGroup"]


class LazyGroup(click.Group):
    """A group that imports a command's module the first time the command is looked up."""

    def __init__(self, *args: Any, modules: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.modules: dict[str, str] = dict(modules or {})
        """Command name → the module (relative to this package) that registers it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.modules})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = self.modules.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(module, __package__)
        return super().get_command(ctx, cmd_name)
