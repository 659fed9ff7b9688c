"""An archive's seal: what tells, without decompressing it, that a compressed archive is as written.

The collector compresses an archive once and never writes it again. Into the gzip header it writes
the plain archive's mtime and length (an extra field, RFC 1952 section 2.3.1.1, which ``gzip`` and
Python's reader skip), and it gives the compressed file that same mtime. Any later write changes the
file's mtime, and a cut or swapped file ends with another length in its trailer; so ``gz-ia
sessions`` checks an archive with one ``fstat`` and two small reads. Damage that changes no mtime (a
failing disk, a write whose mtime was set back) is found only by reading everything
(``gz-ia sessions --verify``).
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from typing import Final

from .segments import READ_FLAGS

__all__ = ["seal_holds", "write_sealed"]

_MAGIC: Final = b"\x1f\x8b\x08"
_FEXTRA: Final = 0x04
_SUBFIELD_ID: Final = b"gZ"
_SEAL: Final = struct.Struct("<qQ")
"""The plain archive's mtime in nanoseconds and its length in bytes."""
_HEADER: Final = struct.Struct("<3sBIBBH2sH")
"""Magic and method, flags, mtime (0), extra flags, OS (255: unknown), extra length, subfield id and length."""
_TRAILER: Final = struct.Struct("<II")
_CHUNK: Final = 1 << 20


def write_sealed(source: int, target: int, plain: os.stat_result, *, level: int = 6) -> None:
    """Write the gzip form of the file open as ``source`` (``plain`` its ``fstat``) to ``target``.

    The caller gives ``target`` the plain file's mtime once written (``os.utime``).

    Raises:
        OSError: reading or writing failed, or the plain file changed length meanwhile.
    """
    seal = _SEAL.pack(plain.st_mtime_ns, plain.st_size)
    header = _HEADER.pack(_MAGIC, _FEXTRA, 0, 0, 255, 4 + len(seal), _SUBFIELD_ID, len(seal)) + seal
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    crc = 0
    length = 0
    with os.fdopen(os.dup(target), "wb") as out:
        out.write(header)
        while chunk := os.pread(source, _CHUNK, length):
            crc = zlib.crc32(chunk, crc)
            length += len(chunk)
            out.write(compressor.compress(chunk))
        out.write(compressor.flush())
        out.write(_TRAILER.pack(crc, length & 0xFFFFFFFF))
    if length != plain.st_size:
        raise OSError(f"the plain archive changed length while compressed ({plain.st_size} -> {length})")


def seal_holds(dir_fd: int, name: str) -> bool | None:
    """Tell whether the compressed archive ``name`` is as the collector wrote it.

    True: sealed, and its mtime and trailer agree with the seal. False: changed since (or not a gzip
    file, or unreadable). None: it carries no seal (written by an earlier gz-ia) or is gone.
    """
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None  # removed by retention since the listing
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size < _HEADER.size + _SEAL.size + _TRAILER.size:
            return False
        head = os.pread(fd, _HEADER.size + _SEAL.size, 0)
        tail = os.pread(fd, _TRAILER.size, info.st_size - _TRAILER.size)
    except OSError:
        return False
    finally:
        os.close(fd)
    if not head.startswith(_MAGIC):
        return False
    _magic, flags, _mtime, _xfl, _os, _extra, subfield, size = _HEADER.unpack_from(head)
    if not flags & _FEXTRA or subfield != _SUBFIELD_ID or size != _SEAL.size:
        return None
    mtime_ns: int
    length: int
    mtime_ns, length = _SEAL.unpack_from(head, _HEADER.size)
    trailer_length: int = _TRAILER.unpack(tail)[1]
    return info.st_mtime_ns == mtime_ns and trailer_length == length & 0xFFFFFFFF
