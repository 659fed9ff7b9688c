"""Install the peers (rsyslog, syslog-ng) without ever running them as system services.

Debian's ``rsyslog`` and ``syslog-ng-core`` conflict (both provide the system log daemon), so
rsyslog comes from apt; syslog-ng-core is fetched with
``apt-get download`` and unpacked with ``dpkg -x`` into ``bench/.peers/syslog-ng`` after apt installed
its libraries. While apt runs, a ``policy-rc.d`` that we create (only if there was none) forbids
starting services, so installing rsyslog does not start the system daemon on a machine with an init.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec

from ._common import BENCH, BenchError

PREFIX: Final = BENCH / ".peers" / "syslog-ng"
SYSLOG_NG_LIBS: Final = ("libivykis0", "libnet1", "libpcre3", "libwrap0", "libjson-c5", "libglib2.0-0")
_POLICY: Final = Path("/usr/sbin/policy-rc.d")


class Peers(msgspec.Struct, kw_only=True):
    """Where the installed peers are."""

    rsyslogd: str
    syslog_ng: str
    syslog_ng_modules: str
    syslog_ng_libs: str
    rsyslog_version: str
    syslog_ng_version: str


@contextlib.contextmanager
def _no_service_starts() -> Iterator[None]:
    # Debian's maintainer scripts ask invoke-rc.d, which asks policy-rc.d: exit 101 means "do not".
    created = False
    if not _POLICY.exists():
        _POLICY.write_text("#!/bin/sh\n# gz-ia bench: never start services while installing peers\nexit 101\n")
        _POLICY.chmod(0o755)
        created = True
    try:
        yield
    finally:
        if created:
            _POLICY.unlink(missing_ok=True)


def _apt(*args: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    result = subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BenchError(f"apt-get {' '.join(args)} failed:\n{result.stderr[-2000:]}")


def _installed(package: str) -> bool:
    result = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False)
    return result.stdout.strip() == "install ok installed"


def ensure_peers() -> Peers:
    """Install whatever of the peers is missing and return where they are.

    Raises:
        BenchError: not root, no apt, or an install step failed.
    """
    syslog_ng = PREFIX / "usr" / "sbin" / "syslog-ng"
    missing = [pkg for pkg in ("rsyslog", *SYSLOG_NG_LIBS) if not _installed(pkg)]
    if missing or not syslog_ng.exists():
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise BenchError(f"the peers need apt-get as root to install: {' '.join(missing) or 'syslog-ng-core'}")
        print(f"bench: installing peers ({' '.join(missing) or 'syslog-ng-core'})", file=sys.stderr)
        with _no_service_starts():
            _apt("update", "-qq")
            if missing:
                _apt("install", "-y", "-qq", "--no-install-recommends", *missing)
        if not syslog_ng.exists():
            # Downloaded into a world-writable temporary directory: apt's _apt user must write there.
            with tempfile.TemporaryDirectory(prefix="gzia-sng-") as download:
                os.chmod(download, 0o777)  # noqa: S103 - a private temporary directory, removed at once
                result = subprocess.run(
                    ["apt-get", "download", "syslog-ng-core"], cwd=download, capture_output=True, text=True, check=False
                )
                debs = sorted(Path(download).glob("syslog-ng-core_*.deb"))
                if result.returncode != 0 or not debs:
                    raise BenchError(f"apt-get download syslog-ng-core failed:\n{result.stderr[-2000:]}")
                PREFIX.mkdir(parents=True, exist_ok=True)
                subprocess.run(["dpkg", "-x", str(debs[-1]), str(PREFIX)], check=True)
    rsyslogd = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
    libs = PREFIX / "usr" / "lib" / "syslog-ng"
    modules = sorted(path for path in libs.iterdir() if path.is_dir() and path.name[:1].isdigit())
    if not modules:
        raise BenchError(f"no syslog-ng module directory under {libs}")
    return Peers(
        rsyslogd=rsyslogd,
        syslog_ng=str(syslog_ng),
        syslog_ng_modules=str(modules[-1]),
        syslog_ng_libs=str(libs),
        rsyslog_version=_version([rsyslogd, "-v"], {}),
        syslog_ng_version=_version(
            [str(syslog_ng), "--version", f"--module-path={modules[-1]}"], {"LD_LIBRARY_PATH": str(libs)}
        ),
    )


def _version(argv: list[str], extra_env: dict[str, str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **extra_env}, check=False)
    first = (result.stdout or result.stderr).strip().splitlines()
    return first[0].strip() if first else "unknown"
