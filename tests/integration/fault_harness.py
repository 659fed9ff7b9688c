"""What the fault tests share: agent processes, waiting, metrics, figures, filling a disk, and the audit of a root.

The audit reads every session segment (archived ones too, gzipped or not) and every rejects file of a
root and says what is wrong in them: torn, corrupt or schema-invalid lines, ``seq`` not gap-free,
a delivery or an event (``attrs.eid``) written twice; and where each event is.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.fixtures.agents.agent_records import read_records

from gz_ia.client.schema import StoredEvent

REPO = Path(__file__).resolve().parents[2]
FIGURES_DOC = REPO / "docs" / "reliability-figures.json"
SOURCE_PATH = os.pathsep.join(str(REPO / part / "src") for part in ("client", "collector"))
"""``PYTHONPATH`` for agent processes: the workspace's sources."""

_ARCHIVE = re.compile(r"\.events\.([0-9]{6,})\.jsonl(\.gz)?\Z")


def wait_until(predicate: Any, timeout: float, message: str, interval: float = 0.05, detail: Any = None) -> None:
    """Poll ``predicate`` until it is true, or fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    extra = f"\n{detail()}" if detail is not None else ""
    pytest.fail(f"timed out after {timeout} s waiting for {message}{extra}")


class AgentFleet:
    """Agent processes against one collector, each logging to ``<out>/<name>.log`` and stopping when the
    stop file appears; the fault tests' agents (tests/fixtures/agents/) say how to start one."""

    def __init__(self, out: Path, env: dict[str, str]) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.env = dict(env)
        self.env["PYTHONPATH"] = SOURCE_PATH
        self.env["GZ_IA_EXIT_TIMEOUT"] = "0"
        self.stop_file = out / "STOP"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: list[str] = []

    def launch(self, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
        with (self.out / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env if env is None else env
            )

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.killed.append(name)

    def alive(self) -> list[str]:
        return [name for name, proc in self.procs.items() if proc.poll() is None and name not in self.killed]

    def snapshot(self, name: str) -> dict[str, Any]:
        """The agent's last ``<name>.stats.json`` (empty before its first)."""
        try:
            return dict(json.loads((self.out / f"{name}.stats.json").read_text()))
        except (FileNotFoundError, ValueError):
            return {}

    def log(self, name: str) -> str:
        return (self.out / f"{name}.log").read_text(errors="replace")

    def acked_total(self) -> int:
        """Events the agents were told were written (each agent's ``<name>.acks``)."""
        return sum(len(read_records(self.out / f"{name}.acks")) for name in self.procs)

    def finish(self, timeout: float = 150.0) -> dict[str, dict[str, Any]]:
        """Ask every live agent to stop, wait for its exit, and return the summaries it wrote."""
        self.stop_file.touch()
        deadline = time.monotonic() + timeout
        summaries: dict[str, dict[str, Any]] = {}
        for name in self.alive():
            proc = self.procs[name]
            try:
                proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            path = self.out / f"{name}.summary.json"
            if not path.exists():
                pytest.fail(f"agent {name} left no summary (exit {proc.returncode}):\n{self.log(name)[-3000:]}")
            summaries[name] = json.loads(path.read_text())
        return summaries

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def vm_kib(pid: int, field: str = "VmHWM") -> int:
    """Return a memory figure of a live process in KiB (``VmHWM`` = peak RSS), 0 if it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else 0


def metric_value(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Return the value of one sample of a Prometheus exposition (0 when absent)."""
    wanted = labels or {}
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        sample, _, label_text = head.partition("{")
        if sample != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', label_text))
        if all(found.get(key) == val for key, val in wanted.items()):
            return float(value)
    return 0.0


def record_figures(tmp_path: Path, name: str, figures: dict[str, Any]) -> None:
    """Print the figures, write them under the test's tmp dir and, when asked, into the docs."""
    text = json.dumps(figures, indent=2, sort_keys=True)
    print(f"\n=== reliability figures: {name} ===\n{text}")
    (tmp_path / "figures.json").write_text(text + "\n")
    if os.environ.get("GZ_IA_WRITE_FIGURES") == "1":
        existing: dict[str, Any] = {}
        with contextlib.suppress(FileNotFoundError, ValueError):
            existing = json.loads(FIGURES_DOC.read_text())
        existing[name] = figures
        FIGURES_DOC.write_text(json.dumps(existing, indent=2, sort_keys=True) + "\n")


def fill_disk(path: Path) -> int:
    """Write ``path`` until the filesystem is full; return the bytes written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    written = 0
    try:
        for size in (1 << 16, 4096, 512, 1):
            chunk = b"\0" * size
            while True:
                try:
                    written += os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return written


@contextlib.contextmanager
def tmpfs(path: Path, size_mib: int) -> Iterator[None]:
    """A tmpfs of ``size_mib`` MiB mounted on ``path`` for the block (needs root): a disk that fills."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", "tmpfs", str(path)], check=True)
    try:
        yield
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def evidence_kept(root: Path, collector_log: Any, tmp_path: Path) -> Iterator[None]:
    """On a failed assertion, copy ``root`` and the collector's log under ``tmp_path``: a tmpfs goes
    away with the test."""
    try:
        yield
    except AssertionError:
        shutil.copytree(root, tmp_path / "root-copy", symlinks=True)
        (tmp_path / "collector.log").write_text(collector_log())
        raise


def read_acks(path: Path) -> dict[str, int]:
    """The events an agent was told were written, from its ack log (``eid seq`` lines): seq by eid."""
    return {fields[0]: int(fields[1]) for fields in read_records(path)}


def _read(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def session_segments(sessions: Path) -> dict[str, list[Path]]:
    """Every session's segment files in write order: its archives by number, then its active file."""
    found: dict[str, list[tuple[int, Path]]] = collections.defaultdict(list)
    for path in sessions.iterdir():
        match = _ARCHIVE.search(path.name)
        if match is not None:
            found[path.name[: match.start()]].append((int(match.group(1)), path))
        elif path.name.endswith(".events.jsonl"):
            found[path.name.removesuffix(".events.jsonl")].append((1 << 62, path))
    return {session_id: [path for _, path in sorted(paths)] for session_id, paths in sorted(found.items())}


def read_rejects(root: Path) -> list[dict[str, Any]]:
    """Every record of every share's rejects file, archived segments included."""
    return [
        json.loads(line)
        for path in sorted(root.glob("rejects*.jsonl*"))
        if not path.name.endswith(".state.json")
        for line in _read(path).splitlines()
        if line.strip()
    ]


_reader_decoder = msgspec.json.Decoder(StoredEvent)
"""What every reader decodes a stored line with."""


class Audit:
    """Everything wrong (or counted) in the session files of one root."""

    def __init__(self, root: Path, validator: Any) -> None:
        self.lines = 0
        self.sessions = 0
        self.archived_segments = 0
        self.torn: list[str] = []
        self.corrupt: list[str] = []
        self.invalid: list[str] = []
        self.unreadable: list[str] = []
        """Lines the reader's own decoder (``StoredEvent``) refuses: ``gz-ia logs`` would not show them."""
        self.seq_errors: list[str] = []
        self.delivery_duplicates: list[str] = []
        self.occurrences: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
        self.events: dict[str, dict[str, Any]] = {}
        """The first stored line of each event, by ``attrs.eid``."""
        self.drop_records: list[dict[str, Any]] = []
        self.torn_files = sorted(p.name for p in (root / "sessions").glob("*.torn"))
        for session_id, paths in session_segments(root / "sessions").items():
            self.sessions += 1
            self.archived_segments += len(paths) - 1
            self._session(session_id, paths, validator)

    def _session(self, session_id: str, paths: list[Path], validator: Any) -> None:
        expected_seq = 1
        deliveries: set[str] = set()
        for path in paths:
            data = _read(path)
            if data and not data.endswith(b"\n"):
                self.torn.append(f"{path.name}: ends with {data[-60:]!r}")
            for raw in data.split(b"\n"):
                if not raw:
                    continue
                self.lines += 1
                try:
                    line = json.loads(raw)
                except ValueError:
                    self.corrupt.append(f"{path.name}: {raw[:120]!r}")
                    continue
                try:
                    _reader_decoder.decode(raw)
                except msgspec.ValidationError as exc:
                    self.unreadable.append(f"{path.name} seq {line.get('seq')}: {exc}")
                if not validator.is_valid(line):  # a quarter of the cost of iter_errors()
                    errors = [error.message for error in validator.iter_errors(line)]
                    self.invalid.append(f"{path.name} seq {line.get('seq')}: {errors[:2]}")
                if line.get("seq") != expected_seq:
                    self.seq_errors.append(f"{path.name}: expected seq {expected_seq}, found {line.get('seq')}")
                expected_seq = (line.get("seq") if isinstance(line.get("seq"), int) else expected_seq) + 1
                delivery = line.get("delivery")
                if delivery is not None:
                    if delivery in deliveries:
                        self.delivery_duplicates.append(f"{path.name}: delivery {delivery}")
                    deliveries.add(delivery)
                attrs = line.get("attrs") or {}
                eid = attrs.get("eid") if isinstance(attrs, dict) else None
                if eid is not None:
                    self.occurrences[eid].append((session_id, line.get("seq", 0)))
                    self.events.setdefault(eid, line)
                if str(line.get("action", "")).startswith("gz-ia.dropped"):
                    self.drop_records.append(line)

    @property
    def duplicates(self) -> dict[str, list[tuple[str, int]]]:
        """Events written more than once."""
        return {eid: where for eid, where in self.occurrences.items() if len(where) > 1}

    def assert_clean(self) -> None:
        """No torn, corrupt or schema-invalid line, ``seq`` gap-free, no duplicate delivery."""
        assert not self.torn, f"torn last lines: {self.torn[:5]}"
        assert not self.corrupt, f"lines that are not JSON: {self.corrupt[:5]}"
        assert not self.invalid, f"lines invalid against the schema: {self.invalid[:5]}"
        assert not self.unreadable, f"lines the reader cannot decode: {self.unreadable[:5]}"
        assert not self.seq_errors, f"seq not gap-free/increasing: {self.seq_errors[:5]}"
        assert not self.delivery_duplicates, f"a delivery id written twice: {self.delivery_duplicates[:5]}"
        assert not self.duplicates, f"events written more than once: {list(self.duplicates.items())[:5]}"
