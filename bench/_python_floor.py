"""The least a search written in CPython can do: what bench/query.py holds ``gz-ia logs`` up against beside rg.

Reads every session file of a root, finds each line holding a byte string (``bytes.find``: memchr
and CPython's two-way search, all in C), slices it out and writes it, one process. Nothing else:
no JSON decoded, no field checked, no time order, no cursor, no gap proven. Whatever design the
reader takes, the Python loop it runs per matching line costs at least this one's few operations,
so when this floor's CPU time is already above rg's, only native code can meet rg on that question.

``--ignore-case`` searches the lowered bytes for a lower-case needle, as ``rg -i`` does for ASCII.

Usage::

    python -m bench._python_floor ROOT NEEDLE [--ignore-case]
"""

from __future__ import annotations

import argparse
import os
import sys


def floor(root: str, needle: bytes, *, ignore_case: bool = False) -> int:
    """Write every line of ``root``'s session files holding ``needle`` to stdout; return how many."""
    sessions = os.path.join(root, "sessions")
    buffer = bytearray(1 << 21)
    out = sys.stdout.buffer
    lines = 0
    for name in sorted(os.listdir(sessions)):
        fd = os.open(os.path.join(sessions, name), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > len(buffer):
                buffer = bytearray(size)
            with memoryview(buffer) as view:
                got = os.preadv(fd, [view[:size]], 0)
        finally:
            os.close(fd)
        data = buffer[:got].lower() if ignore_case else buffer
        found = []
        position = data.find(needle, 0, got)
        while position >= 0:
            start = data.rfind(b"\n", 0, position) + 1
            end = data.index(b"\n", position, got) + 1
            found.append(buffer[start:end])
            position = data.find(needle, end, got)
        lines += len(found)
        out.write(b"".join(found))
    out.flush()
    return lines


def main() -> int:
    """Search the root given on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("needle")
    parser.add_argument("--ignore-case", action="store_true")
    args = parser.parse_args()
    needle = args.needle.encode()
    floor(args.root, needle.lower() if args.ignore_case else needle, ignore_case=args.ignore_case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
