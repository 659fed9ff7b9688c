"""JSON for the one-shot commands (a hook payload, a ledger) without importing :mod:`json` or msgspec.

The :mod:`json` package compiles regular expressions when it is imported, which costs a one-shot
call about as much as the rest of its work; its C scanner and string encoder (``_json``) need none
of that. Only strict JSON is read (no ``NaN`` or ``Infinity``, as msgspec reads it), and only what
a ledger holds is written: dicts with str keys, lists, str, int, float, bool and None.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

try:
    from _json import encode_basestring_ascii as _quote
except ImportError:  # no C accelerator
    from json.encoder import py_encode_basestring_ascii as _quote

__all__ = ["dumps", "loads"]

_WHITESPACE: Final = " \t\n\r"


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


class _Context:
    """The settings the C scanner reads (as ``json.JSONDecoder`` holds them)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)


_scan: Callable[[str, int], tuple[object, int]] | None = None


def loads(raw: bytes | str) -> object:
    """Decode one JSON document (UTF-8 when bytes).

    Raises:
        ValueError: not UTF-8, or not one JSON document.
    """
    global _scan  # noqa: PLW0603 - built on first use, once per process
    text = (raw.decode() if isinstance(raw, bytes) else raw).strip(_WHITESPACE)
    if _scan is None:
        try:
            from _json import make_scanner
        except ImportError:  # no C accelerator: the json package reads the same documents
            import json

            return json.loads(text, parse_constant=_no_constant)
        _scan = make_scanner(_Context())  # type: ignore[arg-type]  # the stub names its own type; any object with these settings does
    try:
        value, end = _scan(text, 0)
    except StopIteration as exc:
        raise ValueError(f"not JSON at character {exc.value}") from None
    if end != len(text):
        raise ValueError(f"extra data at character {end}")
    return value


def dumps(value: object) -> str:
    """Encode ``value`` as compact ASCII JSON.

    Raises:
        TypeError: a value (or a dict key) of a type a ledger does not hold.
        ValueError: a float that is not finite.
    """
    parts: list[str] = []
    _dump(value, parts)
    return "".join(parts)


def _dump(value: object, parts: list[str]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(_quote(value))
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        import math  # only a ledger holding a float needs it

        if not math.isfinite(value):
            raise ValueError(f"{value} is not JSON")
        parts.append(float.__repr__(value))
    elif isinstance(value, list | tuple):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _dump(item, parts)
        parts.append("]")
    elif isinstance(value, dict):
        parts.append("{")
        for index, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"a JSON key must be a str, not {type(key).__name__}")
            parts.append("," if index else "")
            parts.append(_quote(key))
            parts.append(":")
            _dump(item, parts)
        parts.append("}")
    else:
        raise TypeError(f"cannot encode a {type(value).__name__} as JSON")
