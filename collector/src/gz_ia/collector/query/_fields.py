"""Decoding only the fields a question reads: a line found by its bytes is checked at a fraction of the cost.

A search decodes every line a byte needle points at, to check the question on the event and to
learn its time (the answer is in time order). ``attrs.tool=Bash`` reads one attribute and the time,
not the twelve other fields and every other attribute; a struct holding only those, with
:class:`StoredEvent`'s own types and constraints, decodes in a third of the time and checks them
exactly as the full event would. The rest of the line is still parsed (a torn or damaged line fails
as it would), not converted. A ``--grep`` reads every text: it gets the full event.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, Final

import msgspec

from gz_ia.client.schema import FAILED, AttrValue, StoredEvent
from gz_ia.collector import reading
from gz_ia.collector.reading.hosts import host_of

from ._match import FieldMatch, Selection

__all__ = ["Decode", "Test", "question_for"]

Decode = Callable[[bytes | bytearray], Any]
"""Decodes a line into an object with the question's fields as :class:`StoredEvent` has them."""
Test = Callable[[Any], bool]

_FIELDS: Final = {info.name: info for info in msgspec.structs.fields(StoredEvent)}
_ORDER: Final = list(_FIELDS)
_FILTERED: Final = (
    ("agents", "agent"),
    ("roles", "role"),
    ("stages", "stage"),
    ("statuses", "status"),
    ("actions", "action"),
)
_full: Final = msgspec.json.Decoder(StoredEvent)
_UNNAMEABLE: Final = frozenset('\\"' + "".join(map(chr, range(32))))
"""Characters msgspec refuses in a field's stored name."""


def _check_failed(self: Any) -> None:
    # The full event's rule (its __post_init__): a line the full event refuses is refused here too.
    if self.status is FAILED and not self.error:
        raise ValueError("status FAILED requires a non-empty error")


def question_for(filters: reading.Filters, selection: Selection) -> tuple[Decode, Test | None]:
    """A decoder of the fields ``filters`` and ``selection`` read (and the time, ``seq``, ``status``
    and ``error``), and
    the selection's test on what it decodes (None: every event is selected)."""
    if selection.grep is not None or selection.seqs is not None:
        return _full.decode, selection.test if selection else None
    # The answer's order, a cursor, and the one rule across fields (FAILED needs an error).
    names = {"timestamp", "seq", "status", "error"}
    for option, field in _FILTERED:
        if getattr(filters, option):
            names.add(field)
    items = selection.matches.fields
    keys = sorted({item.name[6:] for item in items if item.name.startswith("attrs.")})
    # ``host`` (on a fleet hub) is the first part of the session id: that is the field read.
    names.update(
        "session_id" if item.name == "host" else item.name for item in items if not item.name.startswith("attrs.")
    )
    if len(names) * 2 > len(_FIELDS) or "attrs" in names or not all(_UNNAMEABLE.isdisjoint(key) for key in keys):
        # Most of the event, all of attrs, or a key msgspec cannot take as a field's name: the full event.
        return _full.decode, selection.test if selection else None
    fields: list[tuple[str, Any, Any]] = []
    for name in sorted(names, key=_ORDER.index):
        info = _FIELDS[name]
        default = msgspec.NODEFAULT if info.required else info.default
        fields.append((name, info.type, msgspec.field(default=default, name=info.encode_name)))
    if keys:
        # Only the attributes asked for, each under a name of its own (a key need not be one).
        attrs = msgspec.defstruct(
            "StoredAttrsPart",
            [(f"a{index}", AttrValue | None, msgspec.field(default=None, name=key)) for index, key in enumerate(keys)],
            frozen=True,
            gc=False,
            module=__name__,
        )
        fields.append(("attrs", attrs | None, msgspec.field(default=None, name="attrs")))
    namespace = {"__post_init__": _check_failed}
    part = msgspec.defstruct(
        "StoredPart", fields, kw_only=True, frozen=True, gc=False, namespace=namespace, module=__name__
    )
    tests = [_test(item, f"a{keys.index(item.name[6:])}" if item.name.startswith("attrs.") else None) for item in items]
    if not tests:
        test = None
    elif len(tests) == 1:
        test = tests[0]
    else:
        test = lambda event: all(check(event) for check in tests)  # noqa: E731
    return msgspec.json.Decoder(part).decode, test


def _test(item: FieldMatch, alias: str | None) -> Test:
    """``item``'s test on a part: as :meth:`FieldMatch.test` on the full event, without its look-ups."""
    values = item.values
    accepts = item.accepts
    if alias is None:
        get = attrgetter(item.name) if item.name != "host" else (lambda event: host_of(event.session_id))

        def field(event: Any) -> bool:
            actual = get(event)
            return actual in values if type(actual) is str else accepts(actual)

        return field

    def attribute(event: Any) -> bool:
        attrs = event.attrs
        actual = None if attrs is None else getattr(attrs, alias)
        return actual in values if type(actual) is str else accepts(actual)

    return attribute
