"""The client distribution stays thin: msgspec only, and gz_ia stays a namespace package."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import gz_ia
import gz_ia.client


def _modules_after(statement: str) -> set[str]:
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(result.stdout))


def test_importing_the_client_loads_none_of_the_collector_dependencies() -> None:
    """Importing gz_ia.client (and using a scope) never loads uvloop, click or prometheus_client."""
    modules = _modules_after(
        "import gz_ia.client as gz\nwith gz.session(agent='a', client=gz.NullClient()) as s:\n"
        "    with s.action('x'): pass"
    )
    assert "msgspec" in modules
    assert not {"uvloop", "click", "prometheus_client", "gz_ia.collector"} & modules


@pytest.mark.needs_collector
def test_reader_imports_only_stdlib_msgspec_and_client() -> None:
    """The session reader is importable without the daemon's dependencies."""
    modules = _modules_after("import gz_ia.collector.reading")
    assert not {"uvloop", "click", "prometheus_client"} & modules


@pytest.mark.needs_collector
def test_gz_ia_is_a_namespace_package() -> None:
    """Neither distribution ships gz_ia/__init__.py, so both install side by side."""
    assert gz_ia.__file__ is None
    assert len(list(gz_ia.__path__)) == 2


def test_public_names_are_exported_and_sorted() -> None:
    """__all__ lists the public API, sorted, and every name resolves."""
    assert gz_ia.client.__all__ == sorted(gz_ia.client.__all__)
    for name in gz_ia.client.__all__:
        assert getattr(gz_ia.client, name) is not None


def test_importing_the_client_loads_no_sender_until_a_client_is_made() -> None:
    """Sockets, selectors and the spool are imported with the first Client, not with the package: a
    process that only builds events or logs to a NullClient never pays for them."""
    delivery = {"gz_ia.client._sender", "gz_ia.client.spool", "socket", "selectors"}
    modules = _modules_after(
        "import gz_ia.client as gz\nwith gz.session(agent='a', client=gz.NullClient()) as s:\n"
        "    with s.action('x'): pass\ngz.build_event(session_id='s', action='x', stage='READ', agent='a')"
    )
    assert not delivery & modules
    assert delivery <= _modules_after("import gz_ia.client as gz\ngz.Client(socket_path='/nonexistent', spool=False)")


def test_the_hooks_modules_load_none_of_the_client() -> None:
    """A hook that imports the schema, env and the spool reader pays for those alone: the package
    loads each public name on first use, not all of them with itself."""
    modules = _modules_after("import gz_ia.client.schema, gz_ia.client.env, gz_ia.client.spool")
    client = {"gz_ia.client._client", "gz_ia.client._scope", "gz_ia.client._sender", "gz_ia.client.protocol"}
    assert not client & modules


def test_every_public_name_imports_by_name_in_a_fresh_process() -> None:
    """``from gz_ia.client import X`` works for every public X, and ``import *`` brings them all."""
    names = ", ".join(gz_ia.client.__all__)
    _modules_after(f"from gz_ia.client import {names}")
    _modules_after(f"from gz_ia.client import *\nassert all(n in globals() for n in {gz_ia.client.__all__!r})")


def test_importing_the_client_loads_no_asyncio() -> None:
    """Only AsyncClient needs asyncio: a thread-based agent never pays for importing it."""
    assert "asyncio" not in _modules_after("import gz_ia.client\nfrom gz_ia.client import Client, session")
    modules = _modules_after("from gz_ia.client import AsyncClient\nassert AsyncClient.__name__ == 'AsyncClient'")
    assert "asyncio" in modules
