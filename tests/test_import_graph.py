"""The import graph of both distributions: no cycle anywhere, and no module using another's private names.

import-linter holds the floors; this test holds what it does not see. Every import counts, those
under ``if TYPE_CHECKING:`` and those inside functions included: a cycle closed only for the type
checker is still two modules that cannot be understood apart. A name starting with ``_`` is its
module's own: another module neither imports it (``from x import _name``) nor reaches for it
(``x._name``). Private *modules* (``gz_ia.client._sender``) are a package's own instead, which
import-linter's ``private_modules`` contract holds across the distributions.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_ROOTS: tuple[Path, ...] = (REPO / "client" / "src", REPO / "collector" / "src")


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    imports: set[str] = field(default_factory=set)
    private_uses: list[str] = field(default_factory=list)


def _modules(roots: tuple[Path, ...]) -> dict[str, Module]:
    found: dict[str, Module] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join(parts)
            found[name] = Module(name, path, is_package)
    return found


def _owning_module(name: str, modules: dict[str, Module]) -> str | None:
    """The module ``name`` (a module, or a name inside one) belongs to, if it is one of ours."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(module: Module, level: int, target: str | None) -> str:
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _graph(roots: tuple[Path, ...] = SOURCE_ROOTS) -> dict[str, Module]:
    modules = _modules(roots)
    for module in modules.values():
        aliases: dict[str, str] = {}  # a local name bound to one of our modules -> that module
        tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    owner = _owning_module(alias.name, modules)
                    if owner is not None:
                        module.imports.add(owner)
                        if alias.asname is not None and alias.name in modules:
                            aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                target = _absolute(module, node.level, node.module) if node.level else node.module
                if target is None or _owning_module(target, modules) is None:
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if full in modules:
                        module.imports.add(full)
                        aliases[alias.asname or alias.name] = full
                        continue
                    owner = _owning_module(target, modules)
                    assert owner is not None
                    module.imports.add(owner)
                    if _is_private(alias.name) and owner != module.name:
                        module.private_uses.append(f"from {target} import {alias.name}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _is_private(node.attr)
                and f"{aliases[node.value.id]}.{node.attr}" not in modules
            ):
                module.private_uses.append(f"{aliases[node.value.id]}.{node.attr}")
        module.imports.discard(module.name)
    return modules


def _cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start, first in modules.items():
        if start in index:
            continue
        work = [(start, iter(sorted(first.imports)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(modules[successor].imports))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def test_the_graph_covers_both_distributions() -> None:
    modules = _graph()
    assert "gz_ia.client._sender" in modules
    assert "gz_ia.collector.service.connection" in modules
    assert modules["gz_ia.client._sender"].imports >= {"gz_ia.client.protocol", "gz_ia.client.trust"}


def test_no_import_cycle_type_checking_imports_included() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (every import counts, TYPE_CHECKING ones too):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles
    )


def test_no_module_uses_another_modules_private_names() -> None:
    uses = [f"{module.name}: {use}" for module in _graph().values() for use in module.private_uses]
    assert not uses, "private names used from another module:\n" + "\n".join(uses)


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The detector itself: a planted cycle through a TYPE_CHECKING import and both kinds of private use."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (package / "b.py").write_text("from . import a\nfrom .a import _hidden\nB = a._secret\n")
    modules = {
        name: Module(name, package / file, file == "__init__.py")
        for name, file in (("pkg", "__init__.py"), ("pkg.a", "a.py"), ("pkg.b", "b.py"))
    }
    graph = _graph((tmp_path,))
    assert set(graph) == set(modules)
    assert _cycles(graph) == [["pkg.a", "pkg.b"]]
    assert graph["pkg.b"].private_uses == ["from pkg.a import _hidden", "pkg.a._secret"]
