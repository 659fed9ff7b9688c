"""The public API's annotations, checked by running mypy --strict on typical uses (as msgspec and
structlog do): the examples must pass, and the misuses must fail with the error codes they name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

HERE = Path(__file__).parent
REPO = HERE.parents[1]
MISUSE = HERE / "fail" / "misuse.py"
EXPECTED = re.compile(r"#\s*E:\s*([a-z-]+)\s*$")
REPORTED = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


def _mypy(*paths: Path) -> tuple[int, list[str]]:
    """Run mypy --strict with the repository's configuration; return its exit code and error lines."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(REPO / "pyproject.toml"),
         "--no-incremental", "--no-error-summary", "--show-error-codes", "--no-pretty",
         *(str(path.relative_to(REPO)) for path in paths)],
        cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    return done.returncode, [line for line in done.stdout.splitlines() if ": error: " in line]


def test_the_examples_of_the_public_api_type_check() -> None:
    """Every typical use of the client's and the collector's public API passes mypy --strict, and
    every ``assert_type`` in them holds."""
    examples = sorted(HERE.glob("*_api.py"))
    assert len(examples) == 2
    code, errors = _mypy(*examples)
    assert errors == []
    assert code == 0


def test_each_misuse_of_the_public_api_fails_with_its_error_code() -> None:
    """mypy --strict refuses each marked misuse with the code it names, and nothing else."""
    expected = {
        (number, match.group(1))
        for number, line in enumerate(MISUSE.read_text().splitlines(), start=1)
        if (match := EXPECTED.search(line))
    }
    code, errors = _mypy(MISUSE)
    reported = set()
    for line in errors:
        match = REPORTED.match(line)
        assert match, line
        reported.add((int(match.group("line")), match.group("code")))
    assert len(expected) == 6
    assert reported == expected
    assert code == 1
