"""What the redactor costs per new text: this tree's against an earlier commit's, side by side.

The ingest load (``bench.compare``) repeats its actions, so it measures the redactor's clean path
for known texts. What a Claude Code event brings instead is a new text each time: a Bash command,
a file path, in attrs. This times ``Redactor.text`` on such texts, unique so that none is
remembered clean, and on the same texts with a secret appended, for this tree's redactor and for
the one of ``--against`` (its ``redaction.py`` loaded from git, in this same process), alternating
runs and keeping each side's fastest. ``msgspec.json.encode`` of the same texts, which the
collector does to every stored text anyway, is timed alongside as a yardstick.

Usage::

    uv run python -m bench.redaction                  # against main
    uv run python -m bench.redaction --against 92d414d --runs 7
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Final

import msgspec

from gz_ia.client import redaction

from ._common import REPO

_COMMANDS: Final = (
    "cd /work/project && uv run --no-sync pytest -n 2 -q tests/client/test_redaction.py -k overlap_{i}",
    "git log --oneline -n {i} -- collector/src/gz_ia/collector/ingest/staging.py",
    "Read /home/user/project/src/gz_ia/collector/storage/writer_{i}.py",
    "rg -n 'def text\\(' client/src --glob '*.py' | head -{i}",
    "Run the unit tests of the storage layer ({i})",
    "docker compose -f deploy/compose.yaml up -d --build api-{i}",
    "npm run build && npm test -- --runInBand --testNamePattern=cookie{i}",
    "python -c 'import json,sys; print(json.load(sys.stdin)[\"items\"][{i}])' < out.json",
)
_SECRET: Final = " -H 'Authorization: Bearer abcdef0123456789xyz'"  # noqa: S105 - a fake


def _earlier(commit: str) -> ModuleType:
    """``redaction.py`` as ``commit`` has it, loaded as a module of the client package."""
    source = subprocess.run(
        ["git", "show", f"{commit}:client/src/gz_ia/client/redaction.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="gz-ia-redaction-")) / "redaction_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("gz_ia.client.redaction_before", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "gz_ia.client"
    spec.loader.exec_module(module)
    return module


def _per_text(run: Callable[[list[str]], object], texts: list[str]) -> float:
    started = time.perf_counter()
    run(texts)
    return (time.perf_counter() - started) / len(texts) * 1e9


def _redacting(redactor: redaction.Redactor) -> Callable[[list[str]], object]:
    text = redactor.text
    return lambda batch: [text(one) for one in batch]


def main(argv: list[str] | None = None) -> int:
    """Print ns per text for each redactor, clean and with a secret, and the ratios."""
    parser = argparse.ArgumentParser(prog="python -m bench.redaction", description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="main", help="the earlier commit (default main)")
    parser.add_argument("--texts", type=int, default=3000, help="texts of each shape (default 3000)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    clean = [command.format(i=i) for i in range(args.texts) for command in _COMMANDS]
    secret = [text + _SECRET for text in clean[: len(clean) // 4]]
    sides = {"before": _earlier(args.against).Redactor, "now": redaction.Redactor}
    best: dict[tuple[str, str], float] = {}
    encode = msgspec.json.encode
    for _ in range(args.runs):
        for side, make in sides.items():
            for shape, texts in (("clean", clean), ("secret", secret)):
                spent = _per_text(_redacting(make()), texts)  # a fresh one: nothing remembered clean
                best[side, shape] = min(best.get((side, shape), spent), spent)
        spent = _per_text(lambda batch: [encode(one) for one in batch], clean)
        best["json", "clean"] = min(best.get(("json", "clean"), spent), spent)
    length = sum(map(len, clean)) // len(clean)
    print(f"{len(clean):,} clean texts (mean {length} characters), {len(secret):,} with a secret; best of {args.runs}")
    print(f"  msgspec.json.encode            {best['json', 'clean']:7,.0f} ns/text")
    for shape in ("clean", "secret"):
        before, now = best["before", shape], best["now", shape]
        print(f"  {shape:6}  before {before:7,.0f}   now {now:7,.0f} ns/text   now / before {now / before:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
