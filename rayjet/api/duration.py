"""Durations and timestamps at the wire boundary.

In Python a duration is a float of seconds and a timestamp an aware ``datetime``; on the
wire (NATS JSON) durations are integer nanoseconds and timestamps RFC 3339 strings.
Conversions happen only here, when a value enters or leaves the process.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from rayjet.errors import InvalidConfigError, MessageTTLInvalidError

NS_PER_SECOND = 1_000_000_000

# Go's zero time; nats-server sends it for "never" (e.g. first_ts of an empty stream).
_GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def to_ns(seconds: float | None) -> int | None:
    """Seconds (float) to integer nanoseconds, as sent on the wire."""
    if seconds is None:
        return None
    return int(round(seconds * NS_PER_SECOND))


def from_ns(ns: int | float | None) -> float | None:
    """Integer nanoseconds from the wire to float seconds."""
    if ns is None:
        return None
    return ns / NS_PER_SECOND


def parse_duration(text: str) -> float:
    """Parse a Go-style duration such as ``"10s"``, ``"1m30s"``, ``"250ms"`` to seconds.

    Raises ``ValueError`` when ``text`` is not a duration.
    """
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    sign = 1.0
    if s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """A short human form of a duration (``"2m"``, ``"1.5s"``, ``"100ms"``) for messages."""
    if seconds == 0:
        return "0s"
    for unit, size in (("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= size:
            value = seconds / size
            return f"{value:g}{unit}"
    return f"{seconds * 1e9:g}ns"


def as_seconds(value: object, *, field: str) -> float | None:
    """Accept seconds (int/float), a ``timedelta`` or a duration string; ``None`` passes."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidConfigError(f"{field} must be a duration in seconds, not a bool")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError:
            pass
    raise InvalidConfigError(
        f"{field} must be a duration (seconds as a number, a timedelta or a string such "
        f"as '10s'), not {value!r}")


def parse_ttl(value: object) -> int:
    """Parse a ``Nats-TTL`` header value to whole seconds; ``-1`` means never expire.

    Accepts ``"never"``, a duration of at least one second (``"10s"``, ``"1m"``) or a
    non-negative whole number of seconds. Anything else raises ``MessageTTLInvalidError``.
    """
    text = str(value).strip()
    if text.lower() == "never":
        return -1
    try:
        seconds = parse_duration(text)
    except ValueError:
        if text.isdigit():
            return int(text)
        raise MessageTTLInvalidError(
            f"invalid per-message TTL {text!r}: use 'never', whole seconds or a duration "
            "such as '10s'") from None
    if seconds < 1:
        raise MessageTTLInvalidError(
            f"invalid per-message TTL {text!r}: a TTL given as a duration must be at least 1s")
    return int(seconds)


def to_rfc3339(dt: datetime | None) -> str | None:
    """An aware datetime to RFC 3339 in UTC with a ``Z`` suffix (fraction trimmed)."""
    if dt is None:
        return None
    if dt.tzinfo is not UTC:
        dt = dt.astimezone(UTC)
    # isoformat (C) rather than strftime: listings write thousands of these
    text = dt.replace(tzinfo=None).isoformat()
    return (text.rstrip("0") if dt.microsecond else text) + "Z"


_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:?\d{2})?$")


def parse_rfc3339(text: str) -> datetime | None:
    """RFC 3339 (nanosecond fractions allowed) to an aware datetime; Go's zero time is None."""
    m = _RFC3339.match(text.strip())
    if not m:
        raise InvalidConfigError(f"invalid timestamp {text!r}: use RFC 3339, e.g. "
                                 "'2024-01-31T12:00:00Z'")
    date, clock, frac, zone = m.groups()
    micro = (frac or "")[:6].ljust(6, "0")
    if not zone or zone in "Zz":
        zone = "+00:00"
    elif ":" not in zone:
        zone = zone[:3] + ":" + zone[3:]
    dt = datetime.fromisoformat(f"{date}T{clock}.{micro}{zone}")
    if dt == _GO_ZERO_TIME:
        return None
    return dt


def as_datetime(value: object, *, field: str) -> datetime | None:
    """Accept an aware datetime (a naive one is taken as UTC) or an RFC 3339 string."""
    if value is None:
        return None
    if isinstance(value, str):
        return parse_rfc3339(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value
    raise InvalidConfigError(f"{field} must be a datetime or an RFC 3339 string, not {value!r}")
