"""One exception base per distribution, and every exception drawn in its base module's tree.

Every module of ``gz_ia.collector`` and ``gz_ia.client`` is imported; each exception class defined
there must derive from the distribution's base (``CollectorError``, ``GzIaError``) and be named in
the tree of ``gz_ia.collector.errors`` / ``gz_ia.client.errors``, on a line that also shows its
builtin bases. A new exception without the base, or left out of the tree, fails here.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

from gz_ia.client import errors as client_errors
from gz_ia.collector import errors as collector_errors

_BUILTINS = frozenset(value for value in vars(builtins).values() if inspect.isclass(value))


def _modules(package_name: str) -> list[ModuleType]:
    package = importlib.import_module(package_name)
    names = [package_name] + [
        info.name
        for info in pkgutil.walk_packages(package.__path__, f"{package_name}.")
        if info.name.rsplit(".", 1)[-1] != "__main__"  # running it starts a collector
    ]
    return [importlib.import_module(name) for name in names]


def _exceptions(package_name: str) -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in _modules(package_name):
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return sorted(found.values(), key=lambda cls: (cls.__module__, cls.__qualname__))


def _tree_line(doc: str, name: str) -> str | None:
    for line in doc.splitlines():
        if re.search(rf"(?:──\s*|^\s*){re.escape(name)}\b", line):
            return line
    return None


CASES = [
    ("gz_ia.collector", collector_errors.CollectorError, collector_errors.__doc__ or ""),
    ("gz_ia.client", client_errors.GzIaError, client_errors.__doc__ or ""),
]


@pytest.mark.parametrize(("package_name", "base", "doc"), CASES, ids=["collector", "client"])
def test_every_exception_derives_from_the_base_and_is_drawn(package_name: str, base: type, doc: str) -> None:
    exceptions = _exceptions(package_name)
    assert base in exceptions
    assert len(exceptions) > 3  # the walk found the package's modules
    strays = [f"{cls.__module__}.{cls.__qualname__}" for cls in exceptions if not issubclass(cls, base)]
    assert not strays, f"derive these from {base.__name__}: {strays}"
    for cls in exceptions:
        line = _tree_line(doc, cls.__name__)
        assert line is not None, f"{cls.__module__}.{cls.__name__} is missing from {base.__module__}'s tree"
        for builtin in (b for b in cls.__bases__ if b in _BUILTINS and b is not Exception):
            assert f"{cls.__name__}({builtin.__name__})" in line, f"the tree should show {cls.__name__}'s {builtin}"


@pytest.mark.parametrize(("package_name", "base", "doc"), CASES, ids=["collector", "client"])
def test_the_tree_names_no_class_that_does_not_exist(package_name: str, base: type, doc: str) -> None:
    names = {cls.__name__ for cls in _exceptions(package_name)}
    drawn = set(re.findall(r"(?:──\s|^\s{4})(_?[A-Z]\w+)", doc, flags=re.MULTILINE))
    assert drawn <= names, f"drawn but not defined: {drawn - names}"


def test_the_builtin_bases_still_catch() -> None:
    from gz_ia.client.protocol import FrameTooLarge
    from gz_ia.client.trust import UntrustedSocket
    from gz_ia.collector.reading import InvalidCursor, SessionNotFound

    assert issubclass(UntrustedSocket, PermissionError)
    assert issubclass(FrameTooLarge, ValueError)
    assert issubclass(InvalidCursor, ValueError)
    assert issubclass(SessionNotFound, LookupError)
    assert isinstance(UntrustedSocket("not yours"), OSError)
