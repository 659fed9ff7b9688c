"""Instructions per event of the collector's per-event work, counted by callgrind: a figure that noise cannot move.

On a shared 2-core VM the wall clock of the same code varies up to 2x from one minute to the next,
wider than most optimisations; at 100 sessions callgrind counts the same instructions to 0.05 % run
to run (at 10,000, the checkpoints and passes that follow the wall clock, slowed down by valgrind, move
it by a few percent). It counts
decode (``decode_batch``) and staging (``Ingest.apply``, with its write passes detached every 16
batches) of the suite's own load, in process and without disk, after a warm-up in which every
session got its state. Instructions are not time (a cache miss costs no instruction, which is most
of what 10,000 sessions add), so this guides work on the code; ``bench/run`` says what it is worth.

``--whole`` counts the whole collector instead: the real process (``python -m gz_ia.collector``, every
thread, user space only) fed the suite's load over its socket, once with ``--events`` and once with
three times as many; the difference over the difference in events is what one more event costs, its
start, its sessions' first touch and its stop cancelled out. ``--before COMMIT`` counts that commit's
collector too (checked out into a ``git worktree``), ``--before-env NAME=VALUE`` this tree with a
setting (its cost, as ``bench.compare`` has it, but without the machine's noise).

Usage (needs ``valgrind``, e.g. ``apt-get install valgrind``; about 30 s per count)::

    uv run python -m bench.instructions                      # 100,000 events over 100 and 10,000 sessions
    uv run python -m bench.instructions --sessions 100 --events 200000
    uv run python -m bench.instructions --shares 2          # each share of a sharded collector, summed
    GZ_IA_REDACTION_ENABLED=false uv run python -m bench.instructions   # without redaction
    uv run python -m bench.instructions --whole --sessions 100 --events 50000 --before 100a273
    uv run python -m bench.instructions --whole --before-env GZ_IA_REDACTION_ENABLED=false
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

from gz_ia.client.protocol import FrameReader, route_decoder
from gz_ia.collector.config import RedactionConfig
from gz_ia.collector.ingest.staging import Ingest
from gz_ia.collector.ingest.validation import DecodedBatch, decode_batch
from gz_ia.collector.service.duties import WHOLE, reject_unserved
from gz_ia.collector.sharding.share_process import share_role
from gz_ia.collector.storage.writer import Writer

from ._common import REPO, removals_deferred, scratch_dir
from ._ingest import run_verified
from ._load import build_load, routed, session_id
from ._systems import Ours

_SENDERS: Final = 8
_TAKE_EVERY: Final = 16
_REFS: Final = re.compile(r"Collected\s*:\s*(\d+)")
_TOTALS: Final = re.compile(r"^totals: (\d+)", re.MULTILINE)


def _control(switch: str) -> None:
    """Turn callgrind's instrumentation of this process on or off."""
    subprocess.run(["callgrind_control", "-i", switch, str(os.getpid())], stdout=subprocess.DEVNULL, check=True)


def measure(events: int, sessions: int, share: int = 0, shares: int = 1) -> None:
    """Decode and stage ``events`` events over ``sessions`` sessions; count only the second half.

    With ``shares`` above 1, as share ``share`` of a sharded collector does: it reads the batches the
    thin client routed to it, whole, and rejects an event of another share's session.
    """
    role = share_role(share, shares, front=0) if shares > 1 else WHOLE

    def decode(body: bytes) -> DecodedBatch:
        batch = decode_batch(body)
        reject_unserved(batch, role)
        return batch

    def mine(frames: bytes) -> list[bytes]:
        if shares == 1:
            return FrameReader().feed(frames)
        bodies = FrameReader().feed(routed(frames, shares))  # route, batch, route, batch, ...
        pairs = zip(bodies[::2], bodies[1::2], strict=True)
        return [batch for route, batch in pairs if route_decoder.decode(route).share == share]

    load = build_load(events, sessions, _SENDERS, with_json=False)
    per_sender = [mine(bytes(frames)) for frames in load.frames]
    bodies = [  # interleaved sender by sender, as the collector reads them
        (f"{sender:016x}", per_sender[sender][index])
        for index in range(max(map(len, per_sender)))
        for sender in range(_SENDERS)
        if index < len(per_sender[sender])
    ]
    scratch = Path(tempfile.mkdtemp(prefix="gz-ia-instructions-"))
    try:
        (scratch / "root").mkdir()
        writer = Writer(background=False)
        root = writer.root(scratch / "root", owner=os.getuid())
        for index in range(sessions):
            writer.session(root, session_id(index, sessions))
        # Redaction as the collector's defaults have it, unless GZ_IA_REDACTION_ENABLED=false.
        enabled = os.environ.get("GZ_IA_REDACTION_ENABLED", "true").lower() != "false"
        ingest = Ingest(writer, redactor=RedactionConfig(enabled=enabled).redactor())

        def stage(part: list[tuple[str, bytes]]) -> int:
            staged = 0
            for count, (producer, body) in enumerate(part, 1):
                outcome = ingest.apply(root, producer, decode(body))
                if outcome.rejections or outcome.duplicates:
                    raise SystemExit(f"the load was not staged as it should be: {outcome.rejections[:3]}")
                staged += outcome.count
                if count % _TAKE_EVERY == 0:
                    for target, data in writer.take().items:
                        target.size += len(data)
            return staged

        half = len(bodies) // 2
        stage(bodies[:half])
        _control("on")
        counted = stage(bodies[half:])
        _control("off")
        print(counted)
    finally:
        shutil.rmtree(scratch)


def count(events: int, sessions: int, share: int = 0, shares: int = 1) -> tuple[int, int]:
    """Run :func:`measure` under callgrind in a child process; return the instructions and the events counted."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is missing: apt-get install valgrind")
    argv = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null",
        sys.executable, "-m", "bench.instructions", "--child",
        str(events), str(sessions), str(share), str(shares),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=Path(__file__).parent.parent)
    found = _REFS.search(result.stderr)
    if result.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return int(found.group(1)), int(result.stdout.split()[-1])


class _Counted(Ours):
    """The collector under callgrind: its instructions written to ``cg.out.<pid>`` when it stops."""

    def _spawn(
        self, argv: list[str], env: dict[str, str] | None = None, preexec: Callable[[], None] | None = None
    ) -> None:
        out = str(self.workdir / "cg.out.%p")
        super()._spawn(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv], env=env, preexec=preexec)


def _whole_run(events: int, sessions: int, env: dict[str, str]) -> int:
    """Every instruction the collector ran to take ``events`` events over ``sessions`` sessions."""
    load = build_load(events, sessions, _SENDERS, with_json=False)
    with removals_deferred(), scratch_dir("gzcount") as workdir:
        run_verified(_Counted(workdir, env=env), load)
        return sum(
            int(found.group(1))
            for path in workdir.glob("cg.out.*")
            if (found := _TOTALS.search(path.read_text())) is not None
        )


def whole(events: int, sessions: int, env: dict[str, str]) -> float:
    """Instructions the whole collector spends on one more event (see the module docstring)."""
    return (_whole_run(3 * events, sessions, env) - _whole_run(events, sessions, env)) / (2 * events)


def _whole_main(args: argparse.Namespace) -> None:
    """Print :func:`whole` for this tree, and for the commit or setting to compare it with."""
    variants: dict[str, dict[str, str]] = {"this tree": {}}
    if args.before_env:
        variants["this tree, " + " ".join(args.before_env)] = dict(item.split("=", 1) for item in args.before_env)
    with contextlib.ExitStack() as stack:
        if args.before:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gz-ia-instructions-")))
            tree = scratch / "tree"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], cwd=REPO, check=True)
            stack.callback(subprocess.run, ["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
            variants[args.before] = {"PYTHONPATH": f"{tree / 'client' / 'src'}:{tree / 'collector' / 'src'}"}
        for sessions in args.sessions or [100, 10_000]:
            for label, env in variants.items():
                figure = whole(args.events, sessions, env)
                print(f"{sessions:>7,} sessions, {label}: {figure:,.0f} instructions per event", flush=True)


def main() -> None:
    """Print instructions per event for each session count asked for."""
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, action="append", help="default: 100 and 10,000")
    parser.add_argument("--shares", type=int, default=1, help="count each share of a sharded collector (default 1)")
    parser.add_argument("--whole", action="store_true", help="count the whole collector process (see above)")
    parser.add_argument("--before", help="with --whole: also count this commit's collector")
    parser.add_argument(
        "--before-env", action="append", default=[], metavar="NAME=VALUE", help="with --whole: this tree with a setting"
    )
    parser.add_argument("--child", nargs=4, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure(*args.child)
        return
    if args.whole:
        _whole_main(args)
        return
    for sessions in args.sessions or [100, 10_000]:
        counts = [count(args.events, sessions, share, args.shares) for share in range(args.shares)]
        events = sum(counted for _, counted in counts)
        total = sum(instructions for instructions, _ in counts) / events
        parts = " + ".join(f"{instructions / events:,.0f}" for instructions, _ in counts)
        parts = f" ({parts} in the shares)" if args.shares > 1 else ""
        print(f"{sessions:>7,} sessions: {total:,.0f} instructions per event{parts}", flush=True)


if __name__ == "__main__":
    main()
