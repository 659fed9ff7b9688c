"""The reader stays light: only the standard library, msgspec and the client; storage knows nothing of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_reader_imports_only_the_standard_library_msgspec_and_the_client() -> None:
    """Importing the reader loads neither uvloop, click nor prometheus_client (nor the daemon modules)."""
    code = "import sys, json, gz_ia.collector.reading\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = set(json.loads(result.stdout))
    assert (
        not {"uvloop", "click", "prometheus_client", "gz_ia.collector.service.server", "gz_ia.collector.config"}
        & modules
    )


def test_storage_imports_nothing_of_the_reading_package() -> None:
    """Reading sits above storage: every storage module loads without any module of ``reading``."""
    storage = Path(__file__).parents[3] / "collector/src/gz_ia/collector/storage"
    names = sorted(f"gz_ia.collector.storage.{path.stem}" for path in storage.glob("*.py") if path.stem != "__init__")
    code = f"import sys, json\nfor name in {names!r}: __import__(name)\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(result.stdout)
    assert len(names) >= 5
    assert [name for name in loaded if name.startswith("gz_ia.collector.reading")] == []
