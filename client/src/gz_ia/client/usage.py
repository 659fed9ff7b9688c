"""Tokens, cost and model: what a model call used, stored as reserved ``attrs`` keys of an event.

The stored shape keeps the schema compatible: an event whose ``attrs`` hold any of the keys below is
a usage record, and its counts are added once to its session's totals (and to those of the tree it
belongs to). The keys are the OpenTelemetry GenAI conventions' where they have one, so that an export
carries them as they are; the cost has no convention and is gz-ia's own key. Usage usually rides on
the FINISH of the action that made the model call (``act.usage(...)``), but any event may carry it.
"""

from __future__ import annotations

import math

from .limits import MAX_ATTR_INT, MAX_ATTR_STRING_LENGTH

# Not typing.TYPE_CHECKING: the agents' command hooks import this module, and typing would cost them
# more than the rest of their call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

__all__ = [
    "CACHE_CREATION_TOKENS",
    "CACHE_READ_TOKENS",
    "COST_USD",
    "HOOK_READING",
    "INPUT_TOKENS",
    "MODEL",
    "OUTPUT_TOKENS",
    "PLAIN_KEYS",
    "TOKEN_KEYS",
    "TOKEN_KINDS",
    "USAGE_FROM",
    "UsageSum",
    "Used",
    "reading_of",
    "recorded_usage",
    "usage_attrs",
    "usage_of",
]

INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
"""Input (prompt) tokens, not counting those read from or written to a prompt cache."""
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
COST_USD: Final = "gz-ia.cost_usd"
"""What the call cost in US dollars, as the agent reports it (no GenAI convention names a cost)."""
MODEL: Final = "gen_ai.request.model"

USAGE_FROM: Final = "gz-ia.usage_from"
"""Who read the usage. :data:`HOOK_READING` marks an agent hook's own reading of it (a turn's or a
model call's counts, taken from the agent's transcript or response): the agent's telemetry, when it
is on too, reports the same calls again, request by request."""
HOOK_READING: Final = "hook"

TOKEN_KINDS: Final = ("input", "output", "cache_read", "cache_creation")
"""The token kinds, in the order of :data:`TOKEN_KEYS` (the ``kind`` label of ``gzia_tokens_total``)."""
TOKEN_KEYS: Final = (INPUT_TOKENS, OUTPUT_TOKENS, CACHE_READ_TOKENS, CACHE_CREATION_TOKENS)

_USAGE_KEYS: Final = frozenset((*TOKEN_KEYS, COST_USD, MODEL))


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 0 <= value <= MAX_ATTR_INT:
        raise ValueError(f"{name} must be between 0 and 2**63-1, not {value}")
    return value


def usage_attrs(
    *,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cache_read_tokens: int | None = None,
    cache_creation_tokens: int | None = None,
    cost_usd: float | None = None,
    model: str | None = None,
) -> dict[str, int | float | str]:
    """Return the ``attrs`` entries that record one model call's usage (only the values given).

    Raises:
        TypeError: a count is not an int, the cost not a number, the model not a string.
        ValueError: a count or the cost is negative (or not finite).
    """
    attrs: dict[str, int | float | str] = {}
    for key, name, value in zip(
        TOKEN_KEYS,
        ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"),
        (input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens),
        strict=True,
    ):
        if value is not None:
            attrs[key] = _count(name, value)
    if cost_usd is not None:
        if isinstance(cost_usd, bool) or not isinstance(cost_usd, int | float):
            raise TypeError(f"cost_usd must be a number, not {type(cost_usd).__name__}")
        if not math.isfinite(cost_usd) or cost_usd < 0:
            raise ValueError(f"cost_usd must be a finite number >= 0, not {cost_usd}")
        attrs[COST_USD] = float(cost_usd)
    if model is not None:
        if not isinstance(model, str):
            raise TypeError(f"model must be a string, not {type(model).__name__}")
        if model:
            attrs[MODEL] = model[:MAX_ATTR_STRING_LENGTH]
    return attrs


def usage_of(attrs: Mapping[str, object] | None) -> tuple[tuple[int, int, int, int], float, str] | None:
    """Return ``(tokens by kind, cost, model)`` that an event's ``attrs`` record, or None if none.

    Values of the wrong type or sign count as absent (a reader never trusts a line to add up), so
    that one bad line cannot make a total negative or unreadable.
    """
    if not attrs or _USAGE_KEYS.isdisjoint(attrs):
        return None
    tokens: list[int] = []
    for key in TOKEN_KEYS:
        value = attrs.get(key)
        tokens.append(value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0)
    cost = attrs.get(COST_USD)
    cost_usd = 0.0
    if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
        cost_usd = float(cost)
    model = attrs.get(MODEL)
    return (tokens[0], tokens[1], tokens[2], tokens[3]), cost_usd, model if isinstance(model, str) else ""


PLAIN_KEYS: Final = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")
"""The token keys agents' own attrs use, in the order of :data:`TOKEN_KINDS` (stored by hand-written
instrumentation before the reserved keys existed); their cost key is ``cost_usd``, their model ``model``."""


def recorded_usage(attrs: Mapping[str, object] | None) -> tuple[tuple[int, int, int, int], float, str] | None:
    """Return the usage an event records in either key family that exists on disk, or None.

    The reserved keys (:func:`usage_of`) win; an event with none of them is read through
    :data:`PLAIN_KEYS`, ``cost_usd`` and ``model``, so that a reader adds both families up alike and an
    event holding both is counted once.
    """
    used = usage_of(attrs)
    if used is not None or not attrs:
        return used
    plain = {key: attrs[key] for key in (*PLAIN_KEYS, "cost_usd", "model") if key in attrs}
    if not plain:
        return None
    renamed = {reserved: plain[key] for reserved, key in zip(TOKEN_KEYS, PLAIN_KEYS, strict=True) if key in plain}
    if "cost_usd" in plain:
        renamed[COST_USD] = plain["cost_usd"]
    if "model" in plain and len(plain) > 1:  # a model alone names no usage
        renamed[MODEL] = plain["model"]
    return usage_of(renamed)


_ANY_USAGE_KEY: Final = frozenset((*_USAGE_KEYS, *PLAIN_KEYS, "cost_usd"))

Used = tuple[tuple[int, int, int, int], float, str]
"""``(tokens by kind, cost, model)`` of one usage record."""


def reading_of(attrs: Mapping[str, object] | None) -> tuple[Used, bool] | None:
    """Return the usage an event records and whether it is a hook's reading, or None if none.

    A hook's reading is one marked :data:`HOOK_READING`, or one in the plain keys only (what the
    agents' hooks stored before they used the reserved keys).
    """
    if not attrs or _ANY_USAGE_KEY.isdisjoint(attrs):  # most events: one set operation
        return None
    used = recorded_usage(attrs)
    if used is None:
        return None
    return used, attrs.get(USAGE_FROM) == HOOK_READING or _USAGE_KEYS.isdisjoint(attrs)


class UsageSum:
    """What a session's usage records add up to, each model call counted once.

    The agents' telemetry (and ``act.usage()``, the Agents SDK processor) records each model request;
    an agent's hook may read the same calls' usage again (a Codex turn's, a Gemini CLI call's). So a
    session's hook readings count only while it has no other usage record: whichever door delivered
    first and in whatever order, the totals are those of one door.
    """

    __slots__ = ("cost_usd", "hook_cost_usd", "hook_records", "hook_tokens", "model", "records", "tokens")

    def __init__(self) -> None:
        self.tokens = [0, 0, 0, 0]
        self.cost_usd = 0.0
        self.records = 0
        self.hook_tokens = [0, 0, 0, 0]
        self.hook_cost_usd = 0.0
        self.hook_records = 0
        self.model = ""

    def add(self, attrs: Mapping[str, object] | None) -> tuple[Used, bool] | None:
        """Count the usage ``attrs`` record, if any; return it as :func:`reading_of` does."""
        found = reading_of(attrs)
        if found is not None:
            self.add_reading(*found)
        return found

    def add_reading(self, used: Used, from_hook: bool) -> None:
        """Count one record :func:`reading_of` returned."""
        counts, cost, model = used
        if from_hook:
            tokens = self.hook_tokens
            self.hook_cost_usd += cost
            self.hook_records += 1
        else:
            tokens = self.tokens
            self.cost_usd += cost
            self.records += 1
        for index, count in enumerate(counts):
            tokens[index] += count
        if model:
            self.model = model

    def merge(self, other: UsageSum) -> None:
        """Add ``other``'s records to these (a rolled-up total keeps the rule session by session:
        add :meth:`counted` sums instead)."""
        for index in range(4):
            self.tokens[index] += other.tokens[index]
            self.hook_tokens[index] += other.hook_tokens[index]
        self.cost_usd += other.cost_usd
        self.hook_cost_usd += other.hook_cost_usd
        self.records += other.records
        self.hook_records += other.hook_records
        self.model = other.model or self.model

    @property
    def from_hooks(self) -> bool:
        """True when the hooks' readings are what counts (the session has no other usage record)."""
        return not self.records

    def counted(self) -> tuple[tuple[int, int, int, int], float]:
        """The tokens by kind and the cost that count."""
        tokens, cost = (self.hook_tokens, self.hook_cost_usd) if self.from_hooks else (self.tokens, self.cost_usd)
        return (tokens[0], tokens[1], tokens[2], tokens[3]), cost
