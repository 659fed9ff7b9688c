"""Time expressions of ``--since`` and ``--until``: journalctl's forms, ages, epochs and RFC 3339.

Accepted (``now`` is the moment the command started, ``tz`` the zone of times without an offset):

* ``now``, ``today``, ``yesterday``, ``tomorrow`` (midnight of that day in ``tz``);
* relative times: ``-1h``, ``-15min``, ``+5min``, ``1h 30min ago``, ``2 days ago``, and the bare ages
  of earlier versions (``10m``, ``2h``, ``7d``: that long ago);
* ``@1764583200`` or a plain number: a Unix epoch;
* ``2026-12-01 10:00``, ``2026-12-01 10:00:05``, ``2026-12-01``, ``10:00`` (today), in ``tz``;
* RFC 3339 with an offset (``2026-12-01T10:00:00Z``, ``...+01:00``), or a time followed by ``UTC``.
"""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Final

__all__ = ["parse_span", "parse_time"]

_UNITS: Final = {
    "us": 1e-6,
    "usec": 1e-6,
    "ms": 1e-3,
    "msec": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86_400.0,
    "day": 86_400.0,
    "days": 86_400.0,
    "w": 604_800.0,
    "week": 604_800.0,
    "weeks": 604_800.0,
    "month": 2_629_800.0,
    "months": 2_629_800.0,
    "y": 31_557_600.0,
    "year": 31_557_600.0,
    "years": 31_557_600.0,
}
"""systemd.time(7)'s units; a month is 30.44 days and a year 365.25 days, as there."""
_PART: Final = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
_SPAN: Final = re.compile(r"^(?:\d+(?:\.\d+)?\s*[a-z]*\s*)+$")
_DAYS: Final = {"today": 0, "yesterday": -1, "tomorrow": 1}
_CLOCK: Final = re.compile(r"^\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?$")


def parse_span(value: str) -> float:
    """Return the seconds of a span such as ``90``, ``10m``, ``1h 30min`` or ``2 days``.

    Raises:
        ValueError: not a span (a bare number is seconds; units are systemd's, e.g. ``s``, ``min``, ``h``).
    """
    text = value.strip().lower()
    if not text or not _SPAN.match(text):
        raise ValueError(f"{value!r} is not a time span like 30s, 15min, 2h or 1h 30min")
    total = 0.0
    for number, unit in _PART.findall(text):
        factor = _UNITS.get(unit or "s")
        if factor is None:
            raise ValueError(f"{value!r}: unknown unit {unit!r} (use s, min, h, d, w, month, y)")
        total += float(number) * factor
    return total


def parse_time(value: str, *, now: datetime, tz: tzinfo | None = None) -> datetime:
    """Return the instant ``value`` names, as an aware datetime.

    Args:
        value: a time expression (see the module docstring).
        now: the current time (aware); relative times and ``today`` count from it.
        tz: the zone of times written without an offset; None is the local zone.

    Raises:
        ValueError: ``value`` is none of the accepted forms.
    """
    text = " ".join(value.strip().split())
    lowered = text.lower()
    if lowered == "now":
        return now
    if lowered in _DAYS:
        day = now.astimezone(tz).date() + timedelta(days=_DAYS[lowered])
        return _wall_clock(datetime.combine(day, time()), tz)
    relative = _relative(lowered, now)
    if relative is not None:
        return relative
    epoch = lowered.removeprefix("@")
    if epoch and (epoch[0].isdigit() or epoch[0] == "."):
        with contextlib.suppress(ValueError, OverflowError):
            return datetime.fromtimestamp(float(epoch), UTC)
    zone = tz
    if lowered.endswith(" utc"):
        text, zone = text[:-4].rstrip(), UTC
    if _CLOCK.match(text):
        text = f"{now.astimezone(zone).date().isoformat()} {text}"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a time: use now, today, yesterday, -1h, -15min, 10m (ago), "
            "2026-12-01 10:00, an epoch or RFC 3339"
        ) from None
    return moment if moment.tzinfo is not None else _wall_clock(moment, zone)


def _relative(text: str, now: datetime) -> datetime | None:
    """``-1h``, ``+5min``, ``1h ago``, ``10m``: a span before (or, with ``+``, after) ``now``."""
    sign = -1.0
    if text.startswith(("-", "+")):
        sign = 1.0 if text[0] == "+" else -1.0
        text = text[1:].lstrip()
    elif text.endswith(" ago"):
        text = text[:-4]
    elif text.endswith(" left"):
        sign, text = 1.0, text[:-5]
    if not text or not _SPAN.match(text) or not any(ch.isalpha() for ch in text):
        return None  # a bare number is an epoch, not an age
    try:
        seconds = parse_span(text)
    except ValueError:
        return None
    try:
        return now + timedelta(seconds=sign * seconds)
    except (OverflowError, ValueError):
        raise ValueError(f"{text!r} reaches outside the years 1 to 9999") from None


def _wall_clock(moment: datetime, zone: tzinfo | None) -> datetime:
    """Attach ``zone`` to a naive wall-clock time; None is the system zone, with the offset in force then."""
    return moment.astimezone() if zone is None else moment.replace(tzinfo=zone)
