"""docs/architecture.md draws the collector's floors as the import-linter layers contract holds them.

The table (floor, package, purpose, may import) is what a newcomer reads; the contract in the root
``pyproject.toml`` is what CI enforces. Each row names its floor's packages, and a floor may import
every floor below it and none above.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOORS_CONTRACT = "The collector's floors, top to bottom (siblings on one floor are independent)"


def _contract_floors() -> list[set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (floors,) = [contract for contract in contracts if contract["name"] == FLOORS_CONTRACT]
    assert floors["type"] == "layers"
    assert floors["containers"] == ["gz_ia.collector"]
    return [{name.strip() for name in layer.split("|")} for layer in floors["layers"]]


def _documented_floors() -> list[tuple[int, set[str], str]]:
    """Each row of the table: its floor number, its packages, and what it may import."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = []
    for line in text.splitlines():
        match = re.fullmatch(r"\| (\d+) \| ([^|]+) \| .* \| ([^|]+) \|", line)
        if match is None:
            continue
        packages = {name.rstrip("/") for name in re.findall(r"`([^`]+)`", match.group(2))}
        rows.append((int(match.group(1)), packages, match.group(3).strip()))
    return rows


def test_the_table_names_the_contracts_floors_in_order() -> None:
    floors = _contract_floors()
    documented: dict[int, set[str]] = {}
    for floor, packages, _ in _documented_floors():
        documented.setdefault(floor, set()).update(packages)
    assert [documented[floor] for floor in sorted(documented)] == floors
    assert sorted(documented) == list(range(1, len(floors) + 1))


def test_each_floor_may_import_the_floors_below_it() -> None:
    bottom = len(_contract_floors())
    for floor, packages, may_import in _documented_floors():
        if floor == bottom:
            expected = "\N{EM DASH}"
        elif floor == bottom - 1:
            expected = f"floor {bottom}"
        else:
            expected = f"floors {floor + 1}\N{EN DASH}{bottom}"
        assert may_import == expected, (floor, packages)


def test_every_collector_package_is_on_a_floor() -> None:
    """A new room at the top of ``gz_ia.collector`` must be given its floor (and its row)."""
    on_floors = set().union(*_contract_floors())
    package = REPO / "collector" / "src" / "gz_ia" / "collector"
    rooms = {path.stem for path in package.glob("*.py")} | {path.parent.name for path in package.glob("*/__init__.py")}
    assert rooms - {"__init__", "__main__"} == on_floors
