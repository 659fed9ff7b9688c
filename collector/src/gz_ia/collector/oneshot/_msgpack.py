"""The MessagePack of a one-shot delivery's frames, written out so that a call need not import msgspec.

``gz-ia session log`` and ``gz-ia hook claude-code`` start an interpreter per event, and importing
msgspec (with the typing, enum, datetime and decimal modules it pulls in) would cost more than the
rest of the call. A one-shot that reaches a collector sends a Hello and a Batch of plain values and
reads back a Welcome and Verdicts or an Error, which takes this much code. It writes exactly the
bytes msgspec writes for the same values (the tests compare the two on generated events and
frames), so the collector sees no difference; everything else (spooling, the click CLI, the
daemon) uses msgspec.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["Raw", "Timestamp", "pack", "unpack"]

_FLOAT64: Final = struct.Struct(">d")
_FLOAT32: Final = struct.Struct(">f")


class Timestamp(int):
    """A UTC time in nanoseconds since the epoch, packed as the MessagePack timestamp extension
    (as msgspec packs an aware ``datetime``)."""

    __slots__ = ()


class Raw(bytes):
    """Bytes already packed (an event's body inside a Batch): copied as they are."""

    __slots__ = ()


def pack(value: object) -> bytes:
    """Pack ``value``: None, bool, int, float, str, :class:`Timestamp`, :class:`Raw`, and lists,
    tuples and dicts of these.

    Raises:
        TypeError: a value of another type.
        OverflowError: an int outside the 64-bit range.
    """
    out = bytearray()
    _pack(value, out)
    return bytes(out)


def _header(out: bytearray, size: int, fix: int, fix_limit: int, codes: bytes) -> None:
    """A str, array or map header: the fix form below ``fix_limit``, else 8-, 16- or 32-bit lengths
    (``codes`` holds the 8-bit code or nothing, then the 16- and 32-bit ones)."""
    if size < fix_limit:
        out.append(fix | size)
    elif size < 0x100 and len(codes) == 3:
        out += bytes((codes[0], size))
    elif size < 0x10000:
        out.append(codes[-2])
        out += size.to_bytes(2, "big")
    else:
        out.append(codes[-1])
        out += size.to_bytes(4, "big")


def _pack(value: object, out: bytearray) -> None:
    if value is None:
        out.append(0xC0)
    elif value is True:
        out.append(0xC3)
    elif value is False:
        out.append(0xC2)
    elif isinstance(value, Timestamp):
        _pack_timestamp(int(value), out)
    elif isinstance(value, int):
        _pack_int(value, out)
    elif isinstance(value, float):
        out.append(0xCB)
        out += _FLOAT64.pack(value)
    elif isinstance(value, str):
        data = value.encode()
        _header(out, len(data), 0xA0, 32, b"\xd9\xda\xdb")
        out += data
    elif isinstance(value, Raw):
        out += value
    elif isinstance(value, list | tuple):
        _header(out, len(value), 0x90, 16, b"\xdc\xdd")
        for item in value:
            _pack(item, out)
    elif isinstance(value, dict):
        _header(out, len(value), 0x80, 16, b"\xde\xdf")
        for key, item in value.items():
            _pack(key, out)
            _pack(item, out)
    else:
        raise TypeError(f"cannot pack a {type(value).__name__}")


def _pack_int(value: int, out: bytearray) -> None:
    if 0 <= value < 0x80 or -32 <= value < 0:
        out += value.to_bytes(1, "big", signed=True)
    elif value >= 0:
        for code, size in ((0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)):
            if value < 1 << (8 * size):
                out.append(code)
                out += value.to_bytes(size, "big")
                return
        raise OverflowError("int too big to pack")
    else:
        for code, size in ((0xD0, 1), (0xD1, 2), (0xD2, 4), (0xD3, 8)):
            if value >= -(1 << (8 * size - 1)):
                out.append(code)
                out += value.to_bytes(size, "big", signed=True)
                return
        raise OverflowError("int too small to pack")


def _pack_timestamp(nanoseconds: int, out: bytearray) -> None:
    seconds, nanos = divmod(nanoseconds, 1_000_000_000)
    if seconds >> 34 == 0:
        if nanos == 0 and seconds >> 32 == 0:
            out += b"\xd6\xff" + seconds.to_bytes(4, "big")
        else:
            out += b"\xd7\xff" + (nanos << 34 | seconds).to_bytes(8, "big")
    else:
        out += b"\xc7\x0c\xff" + nanos.to_bytes(4, "big") + seconds.to_bytes(8, "big", signed=True)


def unpack(data: bytes) -> object:
    """Unpack one value that fills ``data``: maps become dicts, arrays lists, bin bytes.

    Raises:
        ValueError: not one whole MessagePack value, or an extension type (no reply holds one).
    """
    try:
        value, end = _unpack(data, 0)
    except (IndexError, TypeError, struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"truncated or invalid MessagePack: {exc}") from exc
    if end != len(data):
        raise ValueError(f"{len(data) - end} bytes after the MessagePack value")
    return value


_FIXED: Final = {0xC0: None, 0xC2: False, 0xC3: True}
_UINT: Final = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
_INT: Final = {0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
_STR: Final = {0xD9: 1, 0xDA: 2, 0xDB: 4}
_BIN: Final = {0xC4: 1, 0xC5: 2, 0xC6: 4}
_ARRAY: Final = {0xDC: 2, 0xDD: 4}
_MAP: Final = {0xDE: 2, 0xDF: 4}


def _length(data: bytes, offset: int, size: int) -> tuple[int, int]:
    if offset + size > len(data):
        raise IndexError("length past the end")
    return int.from_bytes(data[offset : offset + size], "big"), offset + size


def _unpack(data: bytes, offset: int) -> tuple[object, int]:
    code = data[offset]
    offset += 1
    if code < 0x80 or code >= 0xE0:
        return code - 0x100 if code >= 0xE0 else code, offset
    if code in _FIXED:
        return _FIXED[code], offset
    if 0xA0 <= code < 0xC0 or code in _STR or code in _BIN:
        if code in _STR:
            size, offset = _length(data, offset, _STR[code])
        elif code in _BIN:
            size, offset = _length(data, offset, _BIN[code])
        else:
            size = code & 0x1F
        end = offset + size
        if end > len(data):
            raise IndexError("string past the end")
        chunk = data[offset:end]
        return (bytes(chunk) if code in _BIN else chunk.decode()), end
    if 0x90 <= code < 0xA0 or code in _ARRAY:
        if code in _ARRAY:
            size, offset = _length(data, offset, _ARRAY[code])
        else:
            size = code & 0x0F
        items: list[object] = []
        for _ in range(size):
            item, offset = _unpack(data, offset)
            items.append(item)
        return items, offset
    if 0x80 <= code < 0x90 or code in _MAP:
        if code in _MAP:
            size, offset = _length(data, offset, _MAP[code])
        else:
            size = code & 0x0F
        mapping: dict[object, object] = {}
        for _ in range(size):
            key, offset = _unpack(data, offset)
            mapping[key], offset = _unpack(data, offset)
        return mapping, offset
    if code in _UINT or code in _INT:
        size = _UINT.get(code) or _INT[code]
        if offset + size > len(data):
            raise IndexError("int past the end")
        return int.from_bytes(data[offset : offset + size], "big", signed=code in _INT), offset + size
    if code == 0xCA:
        return _FLOAT32.unpack_from(data, offset)[0], offset + 4
    if code == 0xCB:
        return _FLOAT64.unpack_from(data, offset)[0], offset + 8
    raise ValueError(f"unexpected MessagePack type 0x{code:02x}")
