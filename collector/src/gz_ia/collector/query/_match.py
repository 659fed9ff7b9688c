"""Which events a question selects beyond the reader's filters: ``FIELD=VALUE`` matches and ``--grep``.

Field matches are journalctl's: ``stage=FINISH attrs.tool=Bash`` keeps events whose ``stage`` is
``FINISH`` and whose ``attrs.tool`` is ``Bash``; several values of one field are ORed, different fields
ANDed; ``FIELD=`` (nothing after ``=``) matches an absent or empty field. ``--grep`` searches every text
field with a regular expression, case-insensitively when the pattern has no upper-case letter
(journalctl's and ripgrep's smart case) unless the case is forced.

Each selection also offers *needles*: byte strings of which a stored line must contain at least one
per field to match at all (the collector writes compact JSON), so a scan can skip a line, or a whole
chunk of lines, without decoding it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import msgspec

from gz_ia.client.schema import StoredEvent
from gz_ia.collector.reading.hosts import host_of

__all__ = [
    "EXOTIC",
    "KNOWN_FIELDS",
    "FieldMatch",
    "FieldMatches",
    "GrepNeedle",
    "Selection",
    "compile_grep",
    "grep_needle",
    "parse_matches",
    "parse_seq_range",
]

KNOWN_FIELDS: Final = tuple(sorted(StoredEvent.__struct_fields__))
"""The stored fields a ``FIELD=VALUE`` may name, besides ``attrs.KEY``."""
_NUMERIC: Final = frozenset({"seq", "duration_ms"})
_UPPER: Final = frozenset({"stage", "status"})
_ESCAPE: Final = re.compile(r"\\.")
_regex_parser: Final[Any] = importlib.import_module("re._parser")  # re's own parser: no stub, no public twin
_LITERAL: Final = _regex_parser.LITERAL
_FOLDS_TO_ASCII: Final = frozenset("iks")
"""ASCII letters a case-insensitive ``re`` also matches with a non-ASCII letter (U+0130, U+0131, U+212A, U+017F)."""


def _encoded(value: object) -> bytes:
    return msgspec.json.encode(value)


class FieldMatch(msgspec.Struct, frozen=True):
    """One field and the values it may take (ORed)."""

    name: str
    values: tuple[str, ...]

    def test(self, event: StoredEvent) -> bool:
        name = self.name
        if name.startswith("attrs."):
            actual: object = event.attrs.get(name[6:]) if event.attrs else None
        elif name == "host":
            actual = host_of(event.session_id)
        else:
            actual = getattr(event, name)
        if type(actual) is str:  # a plain string (not a Stage or Status): equal to one of the values
            return actual in self.values
        return any(_equal(actual, value, name) for value in self.values)

    def accepts(self, actual: object) -> bool:
        """Whether the field's value ``actual`` (None: absent) is one of the values."""
        if type(actual) is str:
            return actual in self.values
        return any(_equal(actual, value, self.name) for value in self.values)

    def needles(self) -> tuple[bytes, ...] | None:
        """Byte strings one of which a matching compact JSON line contains; None when none is sure."""
        found: list[bytes] = []
        if self.name == "host":  # on a hub, the first part of the session id
            if "" in self.values:
                return None
            return tuple(b'"session_id":' + _encoded(value + ".")[:-1] for value in self.values)
        for value in self.values:
            if value == "" or self.name in _NUMERIC or self.name == "timestamp":
                return None
            key = self.name[6:] if self.name.startswith("attrs.") else self.name
            # An attribute may be a string, a bool or a number: only strings have one spelling.
            if self.name.startswith("attrs.") and (value in ("true", "false") or _number(value) is not None):
                return None
            text = value.upper() if self.name in _UPPER else value
            found.append(_encoded(key) + b":" + _encoded(text))
        return tuple(found)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _equal(actual: object, wanted: str, name: str) -> bool:
    if wanted == "":
        return actual is None or actual == ""
    if actual is None:
        return False
    if isinstance(actual, bool):
        return wanted.lower() == ("true" if actual else "false")
    if isinstance(actual, int | float):
        number = _number(wanted)
        return number is not None and number == actual
    if name in _UPPER:
        return str(actual) == wanted.upper()
    if name == "timestamp":
        return _encoded(actual)[1:-1].decode() == wanted
    return str(actual) == wanted


class FieldMatches(msgspec.Struct, frozen=True):
    """``FIELD=VALUE`` arguments: values of one field ORed, fields ANDed."""

    fields: tuple[FieldMatch, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.fields)

    def test(self, event: StoredEvent) -> bool:
        """Tell whether ``event`` satisfies every field."""
        for item in self.fields:  # noqa: SIM110 (not all() over a generator: this runs once per event read)
            if not item.test(event):
                return False
        return True

    def needles(self) -> list[tuple[bytes, ...]]:
        """Per field that has sure needles, the byte strings one of which a matching line contains."""
        return [found for item in self.fields if (found := item.needles()) is not None]

    def values_of(self, name: str) -> tuple[str, ...] | None:
        """The values asked for ``name``, None when it is not matched."""
        for item in self.fields:
            if item.name == name:
                return item.values
        return None


def parse_matches(arguments: Iterable[str]) -> FieldMatches:
    """Parse ``FIELD=VALUE`` arguments.

    Raises:
        ValueError: an argument without ``=``, or a field that is not stored (the message names them).
    """
    grouped: dict[str, list[str]] = {}
    for argument in arguments:
        name, sep, value = argument.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"{argument!r} is not FIELD=VALUE")
        if name not in KNOWN_FIELDS and name != "host" and not (name.startswith("attrs.") and len(name) > 6):
            raise ValueError(
                f"unknown field {name!r}: the stored fields are {', '.join(KNOWN_FIELDS)}, attrs.KEY for any KEY, "
                "and host (on a fleet hub)"
            )
        if name in _NUMERIC and value and _number(value) is None:
            raise ValueError(f"{argument!r}: {name} is a number")
        grouped.setdefault(name, []).append(value)
    return FieldMatches(tuple(FieldMatch(name, tuple(values)) for name, values in grouped.items()))


def compile_grep(pattern: str, *, case_sensitive: bool | None = None) -> re.Pattern[str]:
    """Compile a ``--grep`` pattern; without ``case_sensitive``, case matters only if it has upper case.

    Raises:
        ValueError: not a valid regular expression.
    """
    if case_sensitive is None:
        case_sensitive = any(ch.isupper() for ch in _ESCAPE.sub("", pattern))
    try:
        return re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from exc


def _texts(event: StoredEvent) -> Iterable[str]:
    """Every text field of an event: what ``--grep`` searches."""
    yield event.action
    if event.error is not None:
        yield event.error
    yield event.agent
    if event.role:
        yield event.role
    yield event.session_id
    if event.parent_session_id:
        yield event.parent_session_id
    if event.attrs:
        for value in event.attrs.values():
            if isinstance(value, str):
                yield value


class Selection(msgspec.Struct, frozen=True):
    """What a command selects beyond :class:`~gz_ia.collector.reading.Filters`."""

    matches: FieldMatches = msgspec.field(default_factory=FieldMatches)
    grep: re.Pattern[str] | None = None
    seqs: tuple[int, int] | None = None
    """An inclusive range of ``seq`` (``--seq N`` or ``N..M``)."""

    def __bool__(self) -> bool:
        return bool(self.matches) or self.grep is not None or self.seqs is not None

    def test(self, event: StoredEvent) -> bool:
        """Tell whether ``event`` is selected."""
        seqs = self.seqs
        if seqs is not None and not seqs[0] <= event.seq <= seqs[1]:
            return False
        if self.matches.fields and not self.matches.test(event):
            return False
        if self.grep is not None:
            search = self.grep.search
            return any(search(text) is not None for text in _texts(event))
        return True

    def predicate(self) -> Callable[[StoredEvent], bool] | None:
        """:meth:`test`, or None when nothing is selected (every event passes)."""
        return self.test if self else None

    def needles(self) -> Sequence[tuple[bytes, ...]]:
        """See :meth:`FieldMatches.needles`; and ``--grep``'s literal when case matters."""
        found = self.matches.needles()
        grepped = self.grep_needle()
        if grepped is not None and not grepped.folded:
            found.append((grepped.needle,))
        return found

    def grep_needle(self) -> GrepNeedle | None:
        """See :func:`grep_needle`."""
        return None if self.grep is None else grep_needle(self.grep)


class GrepNeedle(msgspec.Struct, frozen=True):
    """Bytes every stored line a ``--grep`` matches contains: a literal the pattern requires, as the
    collector's compact JSON spells it inside a string (``"`` as ``\\"``, a newline as ``\\n``).

    ``folded``: the pattern ignores case; ``needle`` is then lower case, and a line holds it if its
    lowered bytes do. ``exotic``: the needle has ``i``, ``k`` or ``s``, which such a pattern also
    matches as a non-ASCII letter (dotless i, Kelvin sign, long s): a line holding one of
    :data:`EXOTIC` must be decoded whatever its bytes.
    """

    needle: bytes
    folded: bool
    exotic: bool


EXOTIC: Final = tuple(letter.encode() for letter in "\u0130\u0131\u212a\u017f")
"""The UTF-8 of the non-ASCII letters a case-insensitive ``i``, ``k`` or ``s`` matches."""


def grep_needle(pattern: re.Pattern[str]) -> GrepNeedle | None:
    """The longest literal every match of ``pattern`` holds, as :class:`GrepNeedle`; None if none.

    Only a run of literal characters at the pattern's top level is sure to be in every match (an
    alternative, a class, a repeat or a group may match without it). Ignoring case, only ASCII
    characters are kept: the needle is compared lowered, and ASCII lowering is what bytes offer.
    """
    folded = bool(pattern.flags & re.IGNORECASE)
    try:
        items = list(_regex_parser.parse(pattern.pattern, pattern.flags & ~re.IGNORECASE))
    except (re.error, RecursionError, OverflowError):
        return None
    runs: list[str] = []
    run: list[str] = []
    for op, argument in [*items, (None, None)]:
        char = chr(argument) if op is _LITERAL and isinstance(argument, int) else None
        if char is not None and not (folded and not char.isascii()):
            run.append(char)
            continue
        if run:
            runs.append("".join(run))
            run = []
    if not runs:
        return None
    text = max(runs, key=len)
    if folded:
        text = text.lower()
    needle = _encoded(text)[1:-1]
    if folded:
        needle = needle.lower()  # an escape's hex digits too: the line is lowered whole
    return GrepNeedle(needle, folded, folded and not _FOLDS_TO_ASCII.isdisjoint(text))


def parse_seq_range(text: str) -> tuple[int, int]:
    """Parse ``--seq N`` or ``--seq N..M`` into an inclusive range.

    Raises:
        ValueError: not a positive number or an ascending range of them.
    """
    low, sep, high = text.strip().partition("..")
    try:
        first = int(low)
        last = int(high) if sep else first
    except ValueError:
        raise ValueError(f"{text!r} is not a seq N or a range N..M") from None
    if first < 1 or last < first:
        raise ValueError(f"{text!r}: seqs start at 1 and a range N..M needs N <= M")
    return first, last
