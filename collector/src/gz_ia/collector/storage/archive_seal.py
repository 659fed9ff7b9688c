"""An archive's seal: what tells, without decompressing it, that a compressed archive is as written.

The collector compresses an archive once and never writes it again. Into the gzip header it writes
the plain archive's length, the compressed file's length and the CRC-32 of the plain bytes (an extra
field, RFC 1952 section 2.3.1.1, which ``gzip`` and Python's reader skip). A cut, extended or swapped
file has another length or ends with another trailer, so ``gz-ia sessions`` checks an archive with
one ``fstat`` and two small reads. The file's times are no part of the seal: ``touch``, or a copy
that does not keep them, changes nothing that was stored. Damage that keeps the length and the
trailer (bytes overwritten in the middle, a failing disk) is found only by decompressing (``gz-ia
sessions --verify``, ``gz-ia session logs``).
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
_SEAL: Final = struct.Struct("<QQI")
"""The plain archive's length, the compressed file's length (both in bytes) and the plain bytes' CRC-32."""
_OLD_SEAL: Final = struct.Struct("<qQ")
"""The seal of an earlier gz-ia: the plain archive's mtime (no longer checked) and its length."""
_HEADER: Final = struct.Struct("<3sBIBBH2sH")
"""Magic and method, flags, mtime (0), extra flags, OS (255: unknown), extra length, subfield id and length."""
_TRAILER: Final = struct.Struct("<II")
_CHUNK: Final = 1 << 20


def write_sealed(source: int, target: int, plain: os.stat_result, *, level: int = 6) -> None:
    """Write the gzip form of the file open as ``source`` (``plain`` its ``fstat``) to ``target``.

    The seal is known only at the end: its place in the header is written first and filled in last.

    Raises:
        OSError: reading or writing failed, or the plain file changed length meanwhile.
    """
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    crc = 0
    length = 0
    with os.fdopen(os.dup(target), "wb") as out:
        out.write(_header(bytes(_SEAL.size)))
        while chunk := os.pread(source, _CHUNK, length):
            crc = zlib.crc32(chunk, crc)
            length += len(chunk)
            out.write(compressor.compress(chunk))
        out.write(compressor.flush())
        out.write(_TRAILER.pack(crc, length & 0xFFFFFFFF))
        packed = out.tell()
    if length != plain.st_size:
        raise OSError(f"the plain archive changed length while compressed ({plain.st_size} -> {length})")
    seal = _header(_SEAL.pack(length, packed, crc))
    if os.pwrite(target, seal, 0) != len(seal):
        raise OSError("short write of an archive's seal")


def _header(seal: bytes) -> bytes:
    return _HEADER.pack(_MAGIC, _FEXTRA, 0, 0, 255, 4 + len(seal), _SUBFIELD_ID, len(seal)) + seal


def seal_holds(dir_fd: int, name: str) -> bool | None:
    """Tell whether the compressed archive ``name`` is as the collector wrote it.

    True: sealed, and its length and trailer agree with the seal (its times are not looked at).
    False: changed since (or not a gzip file, or unreadable). None: it carries no seal (compressed
    by an earlier gz-ia) or is gone.
    """
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None  # removed by retention since the listing
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size < _HEADER.size + _OLD_SEAL.size + _TRAILER.size:
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
    if not flags & _FEXTRA or subfield != _SUBFIELD_ID:
        return None
    trailer_crc, trailer_length = _TRAILER.unpack(tail)
    if size == _OLD_SEAL.size:  # an earlier gz-ia's seal: its mtime told nothing a copy keeps
        return bool(trailer_length == _OLD_SEAL.unpack_from(head, _HEADER.size)[1] & 0xFFFFFFFF)
    if size != _SEAL.size:
        return None
    length, packed, crc = _SEAL.unpack_from(head, _HEADER.size)
    return bool(info.st_size == packed and trailer_crc == crc and trailer_length == length & 0xFFFFFFFF)
