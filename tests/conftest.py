"""Fixtures shared by every test: short temporary directories, a real collector process, the schema."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, Final

import pytest

REPO = Path(__file__).resolve().parents[1]
SCHEMA_PATH = REPO / "docs" / "logevent.schema.json"
AGENTS = REPO / "tests" / "fixtures" / "agents"


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def first_reply(sock: socket.socket) -> Any:
    """Read from a raw client connection until the collector's first reply is in; return it decoded."""
    from gz_ia.client.protocol import FrameReader, collector_message_decoder

    reader = FrameReader()
    bodies: list[bytes] = []
    while not bodies:
        data = sock.recv(1 << 16)
        assert data, "the collector closed the connection before replying"
        bodies = reader.feed(data)
    return collector_message_decoder.decode(bodies[0])


def wait_for(predicate: Any, timeout: float = 60.0, interval: float = 0.02, message: str = "condition") -> None:
    """Poll ``predicate`` until it is true or fail the test after ``timeout`` seconds (a safety bound:
    a passing run needs a fraction of it, even with the suite's workers sharing the cores)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {message}")


TEST_ONLY_VARIABLES = ("GZ_IA_SOAK_SECONDS", "GZ_IA_CHAOS_SEED", "GZ_IA_TEST_AGENTS", "GZ_IA_TEST_BACKENDS")
"""Variables of the test suite that share gz-ia's prefix and are kept from the programs it starts."""


class CollectorProcess:
    """A real ``gz-ia-collector`` process on a private socket and session root."""

    def __init__(self, base: Path, *args: str, env: dict[str, str] | None = None, shards: int = 1) -> None:
        self.base = base
        self.socket = base / "run" / "collector.sock"
        self.workspace = base / "ws"
        self.root = self.workspace / ".harness"
        self.root.mkdir(parents=True, exist_ok=True)
        self.metrics_port = free_port()
        self.http_port = free_port()
        self.args = list(args)
        self.log_path = base / "collector.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra_env = env or {}
        self.shards = shards
        """The ``shards`` setting: above 1, a front process and that many share processes."""
        self.starts = 0
        self.prefix: list[str] = []
        """Prepended to the command line, e.g. ["prlimit", "--nofile=256", "--"]."""

    @property
    def env(self) -> dict[str, str]:
        """Environment for agents and CLI commands that should talk to this collector."""
        environment = dict(os.environ)
        environment.update(
            {"GZ_IA_SOCKET": str(self.socket), "GZ_IA_ROOT": str(self.root), "GZ_IA_STATE_DIR": str(self.state_dir)}
        )
        environment.pop("GZ_IA_PARENT_SESSION_ID", None)
        environment.pop("GZ_IA_PARENT_PID", None)
        # The suite's own settings, which no gz-ia program reads (it would warn of each, rightly).
        for name in TEST_ONLY_VARIABLES:
            environment.pop(name, None)
        return environment

    def command(self) -> list[str]:
        return [
            *self.prefix,
            sys.executable,
            "-m",
            "gz_ia.collector",
            "--socket",
            str(self.socket),
            "--metrics-address",
            f"127.0.0.1:{self.metrics_port}",
            "--http-address",
            f"127.0.0.1:{self.http_port}",
            *self.args,
        ]

    @property
    def http_url(self) -> str:
        """The base URL of the collector's loopback HTTP side."""
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def state_dir(self) -> Path:
        """The collector's state directory (its key, its known roots), shared with the CLI's ``env``."""
        named = self.extra_env.get("GZ_IA_STATE_DIR")
        return Path(named) if named else self.base.parent / f"{self.base.name}-state"

    @property
    def key(self) -> str:
        """The user's key the collector's HTTP side asks for (drawn by the collector at its start)."""
        return str(json.loads((self.state_dir / "http.json").read_text())["key"])

    def http_headers(self, **more: str) -> dict[str, str]:
        """The headers one of the user's programs sends to the HTTP side: the key, and ``more``."""
        return {"X-Gz-Ia-Key": self.key, **more}

    def exporter_env(self, *headers: str) -> dict[str, str]:
        """:attr:`env` for an OTLP exporter pointed at this collector, as docs/user-guide.md sets one
        up: ``OTEL_EXPORTER_OTLP_HEADERS`` carries the key (and ``headers``, each ``name=value``)."""
        return {**self.env, "OTEL_EXPORTER_OTLP_HEADERS": ",".join([f"x-gz-ia-key={self.key}", *headers])}

    def start(self, *, wait: bool = True) -> None:
        # Its own configuration and state directories (over the test's, see ``_private_state``), unless
        # the test names others in ``env``.
        environment = self.env
        environment["XDG_CONFIG_HOME"] = str(self.base / "config")
        environment["GZ_IA_SHARDS"] = str(self.shards)
        environment["GZ_IA_STATE_DIR"] = str(self.state_dir)
        environment.update(self.extra_env)
        self.starts += 1
        log = self.log_path.open("ab")
        log.write(f"--- start {self.starts}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log, env=environment)
        log.close()
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        marker = f"--- start {self.starts}\n"
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"collector exited with {self.proc.returncode}:\n{self.log()}")
            text = self.log()
            if "ready" in text[text.rfind(marker) :]:
                return
            time.sleep(0.02)
        pytest.fail(f"collector not ready after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def write_config(self, text: str) -> None:
        """Write the collector's default configuration file (``XDG_CONFIG_HOME`` is ``<base>/config``)."""
        path = self.base / "config" / "gz-ia" / "collector.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def log_lines(self, containing: str, *, process: str = "gz-ia-collector") -> list[str]:
        """The log lines of one process that contain ``containing``: ``"gz-ia-collector"`` is the
        collector itself (a sharded collector's front), ``"gz-ia-collector[share 1]"`` a share."""
        prefix = process + ": "
        return [line for line in self.log().splitlines() if line.startswith(prefix) and containing in line]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send ``sig`` and wait for the exit; return the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"collector did not exit within {timeout} s after signal {sig}:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL: a crash, as far as the collector can tell."""
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def session_file(self, session_id: str) -> Path:
        return self.root / "sessions" / f"{session_id}.events.jsonl"

    def session_lines(self, session_id: str) -> list[dict[str, Any]]:
        path = self.session_file(session_id)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def all_sessions(self) -> dict[str, list[dict[str, Any]]]:
        directory = self.root / "sessions"
        return {
            path.name.removesuffix(".events.jsonl"): [json.loads(line) for line in path.read_text().splitlines()]
            for path in sorted(directory.glob("*.events.jsonl"))
        }

    def rejects(self) -> list[dict[str, Any]]:
        """Every rejects record, of every share's rejects file, in the order received."""
        records = [
            json.loads(line) for path in self.root.glob("rejects*.jsonl") for line in path.read_text().splitlines()
        ]
        return sorted(records, key=lambda record: str(record["received"]))

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def metric(self, sample: str) -> float:
        """The value of one sample of the exposition, named as it is exported (with its labels, if any)."""
        for line in self.metrics().splitlines():
            if line.startswith(sample + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{sample} not exported")

    def client(self, **kwargs: Any) -> Any:
        from gz_ia.client import Client

        return Client(socket_path=self.socket, root=self.root, **kwargs)

    def gz_ia(
        self,
        *args: str,
        check: bool = False,
        timeout: float = 30,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the ``gz-ia`` command line as a real subprocess against this collector (``env``
        replaces its environment, for a test that points it elsewhere)."""
        return subprocess.run(
            [sys.executable, "-c", "from gz_ia.collector.entry import main; main()", *args],
            env=self.env if env is None else env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


SYSTEM_PYTHON = "/usr/bin/python3"
"""Debian's interpreter: another uid cannot run the pyenv one under root's 0700 home."""


def system_python_path() -> str:
    """``PYTHONPATH`` for SYSTEM_PYTHON: the source trees and the workspace's site-packages (uvloop,
    msgspec, click...: built for CPython 3.11, as Debian's is)."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    return os.pathsep.join([str(REPO / "client" / "src"), str(REPO / "collector" / "src"), site])


class OtherUidCollector(CollectorProcess):
    """A collector run by another uid (``setpriv``, no passwd entry needed) with its own directories.

    Its metrics address is the default unless ``metrics_args`` says otherwise; ``sandbox`` (a
    command-line prefix run as that uid) goes between ``setpriv`` and the interpreter.
    """

    def __init__(self, base: Path, uid: int, *, shards: int = 1) -> None:
        super().__init__(base, shards=shards)
        self.uid = uid
        state = base.parent / f"{base.name}-state"
        state.mkdir()
        for directory in (base, *base.rglob("*"), state):
            os.chown(directory, uid, uid)
        self.metrics_args: list[str] = []
        self.sandbox: list[str] = []
        self.extra_env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": system_python_path(),
            "HOME": str(base),
            "XDG_RUNTIME_DIR": str(base / "run"),
            "GZ_IA_SPOOL_DIR": str(base / "spool"),
        }

    def as_user(self) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups"]

    def command(self) -> list[str]:
        return [
            *self.as_user(),
            *self.sandbox,
            SYSTEM_PYTHON,
            "-m",
            "gz_ia.collector",
            "--socket",
            str(self.socket),
            "--http-address",
            f"127.0.0.1:{self.http_port}",
            *self.metrics_args,
            *self.args,
        ]

    def run_as_user(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run SYSTEM_PYTHON with ``args`` as this collector's uid, in its environment."""
        return subprocess.run(
            [*self.as_user(), SYSTEM_PYTHON, *args],
            env={**self.env, **self.extra_env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def status(self) -> dict[str, Any]:
        """``gz-ia status --json`` run by the same uid (the collector answers its own user only)."""
        result = self.run_as_user("-c", "from gz_ia.collector.cli import main; main()", "status", "--json")
        assert result.returncode == 0, result.stderr
        report: dict[str, Any] = json.loads(result.stdout)
        return report


def spool_dir() -> Path:
    """This test's spool directory (see ``_private_spool``), where clients spool and adoption looks."""
    return Path(os.environ["GZ_IA_SPOOL_DIR"])


@pytest.fixture(autouse=True)
def _private_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every test spools into its own directory, never into the user's ~/.local/state."""
    spool = tmp_path / "spool"
    monkeypatch.setenv("GZ_IA_SPOOL_DIR", str(spool))
    return spool


@pytest.fixture(autouse=True)
def _private_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every test, and every process it starts, keeps its state and its default root and reads its
    configuration in its own directories: the known roots (``roots.json``), export positions and
    ``collector.toml`` of the user's ~/.local/state and ~/.config are shared by every test running at
    the same time, and a collector takes the lock of each root listed there."""
    monkeypatch.setenv("GZ_IA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))  # the default root, never the user's
    monkeypatch.delenv("GZ_IA_CONFIG", raising=False)


@pytest.fixture(name="short_tmp")
def _short_tmp() -> Iterator[Path]:
    """A temporary directory under /tmp with a short path (AF_UNIX paths are limited to ~107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="gzt", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(name="module_short_tmp", scope="module")
def _module_short_tmp() -> Iterator[Path]:
    """``short_tmp`` shared by the tests of one module (for collectors built once per module)."""
    path = Path(tempfile.mkdtemp(prefix="gzm", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run a test that starts collectors against one process, and also against a front with two shares
    where it is marked ``shards(1, 2)`` (the write and delivery path, where the two differ)."""
    if "shards" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("shards")
        values = marker.args if marker is not None else (1,)
        metafunc.parametrize("shards", values, ids=[f"shards{value}" for value in values])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``needs_collector`` every test that starts a collector (through ``make_collector``), before
    ``-m`` selects: scripts/test-client, which installs the client alone, deselects them."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "make_collector" in names or "make_module_collector" in names:
            item.add_marker(pytest.mark.needs_collector)


@pytest.fixture(name="shards")
def _shards() -> int:
    """The ``shards`` setting of the collectors a test starts (parametrized: see above)."""
    return 1


class CollectorFactory:
    """Makes real collector processes, each on its own socket and root under ``base``; closes them all."""

    def __init__(self, base: Path, prefix: str, shards: int = 1) -> None:
        self.base, self.prefix, self.shards = base, prefix, shards
        self.made: list[CollectorProcess] = []

    def __call__(self, *args: str, start: bool = True, env: dict[str, str] | None = None) -> CollectorProcess:
        workspace = self.base / f"{self.prefix}{len(self.made)}"
        workspace.mkdir()
        process = CollectorProcess(workspace, *args, env=env, shards=self.shards)
        self.made.append(process)
        if start:
            process.start()
        return process

    def close(self) -> None:
        for process in self.made:
            process.close()


@pytest.fixture(name="make_collector")
def _make_collector(short_tmp: Path, shards: int) -> Iterator[CollectorFactory]:
    """Factory of real collector processes, each on its own socket and root; all killed at the end."""
    make = CollectorFactory(short_tmp, "c", shards)
    yield make
    make.close()


@pytest.fixture(name="collector")
def _collector(make_collector: Any) -> CollectorProcess:
    """One running collector process."""
    return make_collector()  # type: ignore[no-any-return]


@pytest.fixture(name="make_module_collector", scope="module")
def _make_module_collector(module_short_tmp: Path) -> Iterator[CollectorFactory]:
    """``make_collector`` for read-side fixtures built once per module (one process, no shards).

    Whatever such a fixture sends spools, if ever, into the module's own directory: the per-test
    spool directory is not set up yet when a module-scoped fixture runs.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GZ_IA_SPOOL_DIR", str(module_short_tmp / "spool"))
        make = CollectorFactory(module_short_tmp, "m")
        yield make
        make.close()


def send_events(
    collector: CollectorProcess, events: Iterable[Any], *, per_batch: int = 1_000, timeout: float = 30.0
) -> list[Any]:
    """Send ``events`` through one client ``per_batch`` at a time (queued together, so batched on the
    wire) and return every verdict in order; fails on a rejection or a verdict missing after ``timeout``
    seconds."""
    listed = list(events)
    verdicts: list[Any] = []
    client = collector.client()
    try:
        for start in range(0, len(listed), per_batch):
            futures = [client.send_future(event) for event in listed[start : start + per_batch]]
            verdicts += [future.result(timeout) for future in futures]
        return verdicts
    finally:
        client.close()


def increasing_timestamps() -> Iterator[datetime]:
    """Now, stamped afresh for each event but strictly increasing, so that time filters and merges
    see distinct instants even for events built within the same microsecond."""
    last = datetime.now(UTC)
    while True:
        now = datetime.now(UTC)
        last = now if now > last else last + timedelta(microseconds=1)
        yield last


FOLLOW_BOUND = 30.0
"""Safety bound (seconds) on waiting for a follower's output; a passing run needs a fraction of it."""


INTERRUPTIBLE: Final = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])",
]
"""Prefix of a command a test interrupts: it runs with SIGINT's default action, as from a terminal.

A suite started with SIGINT ignored (``&`` in a non-interactive script, ``nohup``, some CI runners)
would otherwise pass that on, and Ctrl-C would not stop the process (nor a ``bash -c`` and what it
runs). An exec'ing prefix, not ``preexec_fn``, which is unsafe in a process with threads.
"""


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the process group ``proc`` leads (started with ``start_new_session``), children included."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


class Follower:
    """A ``gz-ia ... -f`` subprocess whose stdout and stderr lines are collected by threads.

    Waits are bounded by ``FOLLOWFOLLOW_BOUND`` seconds, past which the test fails with what the process said."""

    def __init__(self, collector: Any, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*INTERRUPTIBLE, sys.executable, "-c", "from gz_ia.collector.cli import main; main()", *args],
            env=collector.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.errors: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.errors), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _pump(stream: IO[str], into: queue.Queue[str]) -> None:
        for line in stream:
            into.put(line)

    def said(self, text: str) -> None:
        """Wait until stderr has a line containing ``text`` (fails the test after the safety bound)."""
        while True:
            try:
                line = self.errors.get(timeout=FOLLOW_BOUND)
            except queue.Empty:
                code, stderr = self.finish()
                pytest.fail(f"the follower never said {text!r}; exit {code}; stderr: {stderr}")
            if text in line:
                return
            if self.proc.poll() is not None and self.errors.empty():
                code, stderr = self.finish()
                pytest.fail(f"the follower exited {code} without saying {text!r}: {line}{stderr}")

    def take(self, count: int) -> list[dict[str, Any]]:
        """Return the next ``count`` JSON lines (fails the test after the safety bound)."""
        records = []
        for _ in range(count):
            try:
                records.append(json.loads(self.lines.get(timeout=FOLLOW_BOUND)))
            except queue.Empty:
                code, stderr = self.finish()
                pytest.fail(f"follower printed {records} of {count} lines; exit {code}; stderr: {stderr}")
        return records

    def finish(self, *, kill: bool = True) -> tuple[int, str]:
        """Wait for the process (killing it first with ``kill``); return its exit code and stderr."""
        if kill and self.proc.poll() is None:
            kill_group(self.proc)
        try:
            code = self.proc.wait(FOLLOW_BOUND)
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            self.proc.wait()
            pytest.fail("the follower did not exit")
        for thread in self._threads:
            thread.join(FOLLOW_BOUND)
        stderr = "".join(self.errors.get() for _ in range(self.errors.qsize()))
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code, stderr

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C: return the exit code and stderr."""
        self.proc.send_signal(signal.SIGINT)
        return self.finish(kill=False)


@pytest.fixture(name="follow")
def _follow() -> Iterator[Callable[..., Follower]]:
    """Start :class:`Follower` processes (``follow(collector, *gz_ia_args)``); every one is killed afterwards."""
    started: list[Follower] = []

    def start(collector: Any, *args: str) -> Follower:
        started.append(Follower(collector, *args))
        return started[-1]

    yield start
    for follower in started:
        follower.finish()


@pytest.fixture(name="schema_validator", scope="session")
def _schema_validator() -> Any:
    """A draft-07 validator of the published LogEvent schema, checking the date-time format."""
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    return jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def soak_seconds(default: float) -> float:
    """Duration of a slow soak/fault test: ``GZ_IA_SOAK_SECONDS`` bounds it (CI sets it low)."""
    bound = os.environ.get("GZ_IA_SOAK_SECONDS")
    return min(default, float(bound)) if bound else default


@pytest.fixture(name="soak")
def _soak() -> Any:
    return soak_seconds


from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
