"""The lazy command groups: command modules export plain click commands and never import their group
back; every ``"module:attr"`` a group names resolves to a click command of that name."""

from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest

from gz_ia.collector import cli
from gz_ia.collector.cli import _lazy

PACKAGE = cli.__name__
CLI_DIR = Path(cli.__file__).parent
GROUP_MODULES = {PACKAGE, f"{PACKAGE}._collector"}
"""The modules that define the lazy groups (``gz-ia``, ``gz-ia session``, ``gz-ia-collector``)."""


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports (``TYPE_CHECKING`` and function-level imports included), absolute;
    ``from X import name`` counts as importing ``X``."""
    module = f"{PACKAGE}.{path.stem}"
    package = module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0]
                names.add(f"{base}.{node.module}" if node.module else base)
            else:
                names.add(node.module or "")
    return names


@pytest.mark.parametrize(
    "path", sorted(path for path in CLI_DIR.glob("_*.py") if path.name != "__init__.py"), ids=lambda path: path.name
)
def test_no_cli_module_imports_a_group_back(path: Path) -> None:
    """``from . import main``, ``from gz_ia.collector.cli import session`` or ``from ._collector import
    collector_main`` in a command module would close a circle through the group that loads it by name."""
    assert sorted(_imported(path) & GROUP_MODULES) == []


def _lazy_groups() -> dict[str, _lazy.LazyGroup]:
    groups = {"gz-ia": cli.main, "gz-ia session": cli.session, "gz-ia-collector": cli.collector_main}
    assert all(isinstance(group, _lazy.LazyGroup) for group in groups.values())
    return {name: group for name, group in groups.items() if isinstance(group, _lazy.LazyGroup)}


def test_every_lazy_name_resolves_to_a_click_command_of_that_name() -> None:
    """Each ``"module:attr"`` names a click command (or group) whose own name is the one it is listed
    under, the group returns it, and no command is listed twice (``session logs`` is not ``logs``)."""
    seen: dict[int, str] = {}
    for group_name, group in _lazy_groups().items():
        assert group.lazy_commands, group_name
        context = click.Context(group, info_name=group_name)
        for name, target in group.lazy_commands.items():
            assert target.startswith("._") and target.count(":") == 1, target
            command = _lazy.load_command(target)
            assert command.name == name, (group_name, target)
            assert group.get_command(context, name) is command
            assert seen.setdefault(id(command), f"{group_name} {name}") == f"{group_name} {name}"
        assert set(group.lazy_commands) <= set(group.list_commands(context))


def test_a_name_that_is_not_a_command_is_refused() -> None:
    with pytest.raises(TypeError, match="not a click command"):
        _lazy.load_command("._common:version")
