"""The bounds of an event and of a frame, importable without msgspec.

The schema (:mod:`.schema`) and the wire protocol (:mod:`.protocol`) take their limits from here,
and so do the one-shot commands (``gz-ia session log``, the Claude Code hook), for which importing
msgspec would cost more than the rest of a call.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing would cost the one-shot commands
if TYPE_CHECKING:
    from typing import Any, Final

__all__ = [
    "MAX_ACTION_LENGTH",
    "MAX_AGENT_LENGTH",
    "MAX_ATTRS",
    "MAX_ATTR_INT",
    "MAX_ATTR_KEY_LENGTH",
    "MAX_ATTR_STRING_LENGTH",
    "MAX_CYCLE_LENGTH",
    "MAX_ERROR_LENGTH",
    "MAX_FRAME",
    "MAX_SESSION_ID_LENGTH",
    "MIN_ATTR_INT",
    "PROTOCOL_VERSION",
    "STAGES",
    "STATUSES",
    "attrs_fit",
    "fits",
    "storable",
]

PROTOCOL_VERSION: Final = 1
MAX_FRAME: Final = 1 << 20
"""Largest frame body either side accepts (1 MiB); a larger length prefix ends the connection."""

MAX_SESSION_ID_LENGTH: Final = 128
MAX_ACTION_LENGTH: Final = 512
MAX_AGENT_LENGTH: Final = 128
MAX_ERROR_LENGTH: Final = 16 * 1024
MAX_ATTRS: Final = 32
MAX_ATTR_KEY_LENGTH: Final = 64
MAX_ATTR_STRING_LENGTH: Final = 1024
MAX_CYCLE_LENGTH: Final = 32

MIN_ATTR_INT: Final = -(2**63)
MAX_ATTR_INT: Final = 2**63 - 1
"""The range of an int attribute value: a signed 64-bit integer, as every reader of JSON holds it."""

STAGES: Final = ("READ", "PENDING", "FINISH")
"""The values of :class:`.schema.Stage`, in cycle order."""
STATUSES: Final = ("OK", "FAILED")
"""The values of :class:`.schema.Status`."""


def fits(action: str, agent: str, role: str | None, error: str | None, attrs: dict[str, Any] | None) -> bool:
    """Tell whether the free-text fields are within their limits already (the cheap common case)."""
    return (
        len(action) <= MAX_ACTION_LENGTH
        and len(agent) <= MAX_AGENT_LENGTH
        and (role is None or len(role) <= MAX_AGENT_LENGTH)
        and (error is None or len(error) <= MAX_ERROR_LENGTH)
        and (attrs is None or attrs_fit(attrs))
    )


def storable(value: Any) -> Any:
    """Return an attribute value as it can be stored: the one place that decides it, for every path.

    JSON has no NaN or infinity (a JSON encoder writes ``null``, which no reader of the schema
    takes), and MessagePack and JSON readers hold ints in 64 bits. So a float that is not finite
    becomes the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (as JavaScript spells them), and
    an int outside :data:`MIN_ATTR_INT` … :data:`MAX_ATTR_INT` its decimal string (hexadecimal past
    Python's bound on decimal conversion). Every other value is returned as it is: the collector
    judges it.
    """
    if isinstance(value, float):
        if value - value == 0.0:  # finite; inf - inf and anything involving NaN are NaN
            return value
        if value != value:  # noqa: PLR0124 - NaN is the one value unequal to itself
            return "NaN"
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, int) and not isinstance(value, bool) and not MIN_ATTR_INT <= value <= MAX_ATTR_INT:
        try:
            return str(int(value))
        except ValueError:  # more digits than sys.get_int_max_str_digits() allows
            return hex(value)
    return value


def attrs_fit(attrs: dict[str, Any]) -> bool:
    """Tell whether ``attrs`` is within its limits and every value storable as it is (anything but a
    map: nothing to cut, the collector judges it)."""
    if not isinstance(attrs, dict):
        return True
    if len(attrs) > MAX_ATTRS:
        return False
    for key, value in attrs.items():
        if (isinstance(key, str) and len(key) > MAX_ATTR_KEY_LENGTH) or (
            isinstance(value, str) and len(value) > MAX_ATTR_STRING_LENGTH
        ):
            return False
        if isinstance(value, float | int) and storable(value) is not value:
            return False
    return True
