"""The systems under test, each started fresh in the foreground on a private socket and root.

Peers run with the tuned configurations below: the same job as ours (newline JSON
over a Unix stream socket, routed by ``session_id`` into ``<root>/sessions/<id>.events.jsonl``), no
fsync. Our collector runs from this work tree (``python -m gz_ia.collector``) with its defaults unless a
configuration says otherwise.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ._common import BenchError, socket_accepts, stop_process, wait_until
from ._peers import Peers

_START_TIMEOUT: Final = 30.0


class System:
    """A started collector: its process, socket and the root it writes sessions into."""

    name: str
    speaks_frames: bool = False

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = workdir / "in.sock"
        self.root = workdir / "ws" / ".harness"
        self.sessions_dir = self.root / "sessions"
        self.log_path = workdir / f"{type(self).__name__.lower()}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the system and wait until it accepts connections (each subclass says how)."""
        raise NotImplementedError

    @property
    def pid(self) -> int:
        """The collector's process id."""
        assert self.proc is not None
        return self.proc.pid

    def _spawn(
        self, argv: list[str], env: dict[str, str] | None = None, preexec: Callable[[], None] | None = None
    ) -> None:
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                # preexec_fn only sets an rlimit, before exec, in a bench process without threads.
                argv,
                stdout=log,
                stderr=log,
                env={**os.environ, **(env or {})},
                preexec_fn=preexec,  # noqa: PLW1509
                # A session of its own, as systemd gives every service: with autogroup scheduling
                # (on this machine) the kernel then shares the CPU between the collector and the
                # agents' session as it does in production, rather than thread by thread.
                start_new_session=True,
            )
        try:
            wait_until(lambda: self._alive() and socket_accepts(self.socket), _START_TIMEOUT, f"{self.name} to listen")
        except BenchError as exc:
            self.stop()
            raise BenchError(f"{exc}; log:\n{self.log()[-3000:]}") from exc

    def _alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise BenchError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
        return True

    def log(self) -> str:
        """What the process printed."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL)."""
        if self.proc is not None:
            stop_process(self.proc)


class Ours(System):
    """Our collector, ``python -m gz_ia.collector`` from this work tree.

    Args:
        workdir: private directory for socket, root, config and log.
        durability: ``os`` or ``fsync``.
        nofile: when set, the collector runs under ``ulimit -n`` of this value.
        extra: more command-line flags.
        env: more environment (``GZ_IA_ROTATION_MAX_BYTES``...).
        shards: ``shards`` setting: above 1, a front and that many share processes (CPU and memory
            are then counted over all of them).
    """

    speaks_frames = True

    def __init__(
        self,
        workdir: Path,
        *,
        durability: str = "os",
        nofile: int | None = None,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        shards: int = 1,
    ) -> None:
        super().__init__(workdir)
        self.env = {**(env or {}), "GZ_IA_SHARDS": str(shards)}
        self.shards = shards
        self.name = ("gz-ia" if durability == "os" else f"gz-ia ({durability})") + (f" x{shards}" if shards > 1 else "")
        self.durability = durability
        self.nofile = nofile
        self.extra = extra

    def start(self) -> None:
        """Start the collector and wait until it accepts connections."""
        argv = [
            sys.executable, "-m", "gz_ia.collector",
            "--socket", str(self.socket),
            "--metrics-address", "off",
            # Not the user's default port (a collector of theirs may hold it); a commit from before
            # the HTTP side has no such option, and nothing to turn off.
            *(["--http-address", "off"] if self._serves_http() else []),
            "--durability", self.durability,
            "--log-level", "warning",
            *self.extra,
        ]  # fmt: skip
        nofile = self.nofile

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        # Private config and state homes: a user's collector.toml must not change what we measure,
        # and neither must the roots other collectors served (each start repairs every known root).
        private = {"XDG_CONFIG_HOME": str(self.workdir / "config"), "XDG_STATE_HOME": str(self.workdir / "state")}
        self._spawn(argv, env={**private, **self.env}, preexec=limit)

    def _serves_http(self) -> bool:
        """Whether the collector this environment imports has an HTTP side (``bench.compare`` runs older ones)."""
        result = subprocess.run(
            [sys.executable, "-m", "gz_ia.collector", "--help"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            check=True,
        )
        return "--http-address" in result.stdout


class Rsyslog(System):
    """rsyslogd 8 with imptcp on a Unix socket, mmjsonparse and a dynaFile omfile."""

    def __init__(self, workdir: Path, peers: Peers, *, sessions: int) -> None:
        super().__init__(workdir)
        self.name = "rsyslog"
        self.peers = peers
        # 2 queue workers at 100 sessions, 1 at 10,000: the faster setting at each, measured here.
        self.workers = 2 if sessions <= 1000 else 1
        self.cache = max(10, min(sessions, 10_000))

    def start(self) -> None:
        """Write the configuration and start ``rsyslogd -n`` on it."""
        spool = self.workdir / "spool"
        spool.mkdir(exist_ok=True)
        conf = self.workdir / "rsyslog.conf"
        conf.write_text(
            f"""
global(workDirectory="{spool}" maxMessageSize="64k")
module(load="imptcp" threads="2")
module(load="mmjsonparse")
template(name="raw" type="string" string="%rawmsg%\\n")
template(name="dyn" type="string" string="{self.sessions_dir}/%$!session_id:::secpath-replace%.events.jsonl")
ruleset(name="bench" queue.type="FixedArray" queue.size="200000" queue.dequeueBatchSize="4096"
        queue.workerThreads="{self.workers}" queue.timeoutEnqueue="600000") {{
  action(type="mmjsonparse" cookie="" useRawMsg="on")
  action(type="omfile" dynaFile="dyn" template="raw" dynaFileCacheSize="{self.cache}"
         ioBufferSize="256k" flushOnTXEnd="on" createDirs="on")
}}
input(type="imptcp" path="{self.socket}" unlink="on" ruleset="bench" flowControl="on")
"""
        )
        self.name = f"rsyslog ({self.workers} worker{'s' if self.workers > 1 else ''})"
        self._spawn([self.peers.rsyslogd, "-n", "-f", str(conf), "-i", str(self.workdir / "rsyslogd.pid")])


class SyslogNg(System):
    """syslog-ng 3.38, tuned, from the private prefix under ``bench/.peers``."""

    def __init__(self, workdir: Path, peers: Peers) -> None:
        super().__init__(workdir)
        self.name = "syslog-ng (tuned)"
        self.peers = peers

    def start(self) -> None:
        """Write the configuration and start ``syslog-ng -F`` on it."""
        conf = self.workdir / "syslog-ng.conf"
        version = self.peers.syslog_ng_modules.rsplit("/", 1)[-1]
        conf.write_text(
            f"""@version: {version}
options {{ threaded(yes); stats-freq(0); mark-freq(0); flush-lines(1000); create-dirs(yes);
          use-dns(no); dns-cache(no); log-msg-size(65536); }};
source s_bench {{ unix-stream("{self.socket}" flags(no-parse) max-connections(16) log-iw-size(160000)
                  log-fetch-limit(1000) log-msg-size(65536)); }};
parser p_json {{ json-parser(prefix(".json.")); }};
destination d_files {{ file("{self.sessions_dir}/${{.json.session_id}}.events.jsonl" template("${{MESSAGE}}\\n")
                       log-fifo-size(200000) flush-lines(1000)); }};
log {{ source(s_bench); parser(p_json); destination(d_files); flags(flow-control); }};
"""
        )
        self._spawn(
            [
                self.peers.syslog_ng,
                "-F",
                "--no-caps",
                "-f",
                str(conf),
                f"--module-path={self.peers.syslog_ng_modules}",
                "-R",
                str(self.workdir / "syslog-ng.persist"),
                "-c",
                str(self.workdir / "syslog-ng.ctl"),
                "-p",
                str(self.workdir / "syslog-ng.pid"),
            ],
            env={"LD_LIBRARY_PATH": self.peers.syslog_ng_libs},
        )
