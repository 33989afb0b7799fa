"""Cron patterns of message schedules, and the time zones they are read in.

The grammar is the one nats-server accepts (its own cron parser, after robfig/cron):

* exactly six whitespace-separated fields: second, minute, hour, day of month, month, day of
  week (0-59, 0-59, 0-23, 1-31, 1-12, 0-6 with 0 Sunday);
* a field is a comma-separated list (empty items are skipped) of ``*`` or ``?`` (the whole
  range), ``N``, ``N-M``, each optionally followed by ``/step``; ``N/step`` runs from N to the
  field's maximum; names ``jan``..``dec`` and ``sun``..``sat`` (any case) stand for numbers in
  the month and weekday fields (not in steps); a leading ``+`` on a number is allowed;
* when either day field is unrestricted (``*`` or ``?``, alone or with step 1) a day must match
  both day fields, otherwise either;
* ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight``, ``@hourly``
  stand for fixed patterns (exact spelling only).

The next time is searched the way nats-server searches it, field by field in the zone's wall
clock: days and months step through the calendar (so a nonexistent wall time in a DST gap lands
after the gap, and the zone's offset picks which of two repeated wall times is meant, as Go's
``time.Date`` does), hours, minutes and seconds step through real time (so an hour repeated
when clocks go back can match twice, and an hour skipped when they go forward never matches).
A pattern that matches nothing within five years of the start is invalid.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, tzinfo
from typing import NamedTuple
from zoneinfo import ZoneInfo

from rayjet.clock import NANOS_PER_SECOND

STAR = 1 << 63  # set on a field given as * or ? (with no step above 1)

PREDEFINED = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}

_MONTHS = {n: i + 1 for i, n in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_WEEKDAYS = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (min, max, names) of second, minute, hour, day of month, month, day of week
_BOUNDS = ((0, 59, None), (0, 59, None), (0, 23, None), (1, 31, None), (1, 12, _MONTHS),
           (0, 6, _WEEKDAYS))
_INT = re.compile(r"[+-]?[0-9]+\Z")  # what Go's strconv.Atoi takes (in int64 range)
_INT64_MAX = (1 << 63) - 1
_YEARS_AHEAD = 5
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


class CronError(ValueError):
    """A cron pattern nats-server would refuse."""


class Cron(NamedTuple):
    """Bit sets of the values each field allows (bit n: value n), STAR on unrestricted ones."""

    second: int
    minute: int
    hour: int
    dom: int
    month: int
    dow: int


def _number(text: str, names: dict[str, int] | None) -> int:
    if names is not None and text.lower() in names:
        return names[text.lower()]
    if not _INT.match(text) or abs(int(text)) > _INT64_MAX:
        raise CronError(f"not a number: {text!r}")
    value = int(text)
    if value < 0:
        raise CronError(f"negative number: {text!r}")
    return value


def _range(expr: str, lo_bound: int, hi_bound: int, names: dict[str, int] | None) -> int:
    parts = expr.split("/")
    ends = parts[0].split("-")
    star = 0
    if ends[0] in ("*", "?"):
        lo, hi, star = lo_bound, hi_bound, STAR  # anything after "*-" is ignored, as there
    else:
        lo = _number(ends[0], names)
        if len(ends) == 1:
            hi = lo
        elif len(ends) == 2:
            hi = _number(ends[1], names)
        else:
            raise CronError(f"too many hyphens: {expr!r}")
    step = 1
    if len(parts) == 2:
        step = _number(parts[1], None)
        if len(ends) == 1:
            hi = hi_bound
        if step > 1:
            star = 0
    elif len(parts) > 2:
        raise CronError(f"too many slashes: {expr!r}")
    if lo < lo_bound or hi > hi_bound or lo > hi:
        raise CronError(f"range out of bounds: {expr!r}")
    if step == 0:
        raise CronError(f"step must be positive: {expr!r}")
    bits = 0
    for value in range(lo, hi + 1, step):
        bits |= 1 << value
    return bits | star


def _field(text: str, index: int) -> int:
    lo, hi, names = _BOUNDS[index]
    bits = 0
    for expr in text.split(","):
        if expr:
            bits |= _range(expr, lo, hi, names)
    return bits


def parse_cron(pattern: str) -> Cron:
    """The fields of a cron pattern (or of a predefined ``@name``); CronError when invalid."""
    fields = PREDEFINED.get(pattern, pattern).split()
    if len(fields) != 6:
        raise CronError(f"pattern requires 6 fields, got {len(fields)}")
    cron = Cron(*(_field(f, i) for i, f in enumerate(fields)))
    # nats-server would search five years for a time in an empty second/minute/hour/month set
    # (a field of only commas) and then refuse the pattern; refuse it at once.
    if not all(bits & ~STAR for bits in (cron.second, cron.minute, cron.hour, cron.month)):
        raise CronError(f"a field allows no value: {pattern!r}")
    return cron


# -- time zones ------------------------------------------------------------------------------------
def load_zone(name: str) -> tzinfo | None:
    """The zone an IANA name (or ``UTC``) names; None when unknown or empty. ``Local`` (Go's
    zone of the host) is taken as UTC so that no answer depends on the machine."""
    if name in ("UTC", "Local"):
        return UTC
    if not name or name.startswith(("/", "\\")) or ".." in name or "\0" in name:
        return None
    try:
        return ZoneInfo(name)
    except Exception:  # noqa: BLE001 - unknown key, a directory, unreadable file
        return None


class _Wall(NamedTuple):
    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    weekday: int  # 0 Sunday


def _wall(secs: int, zone: tzinfo) -> _Wall:
    d = datetime.fromtimestamp(secs, zone)
    return _Wall(d.year, d.month, d.day, d.hour, d.minute, d.second, (d.weekday() + 1) % 7)


def _offset(secs: int, zone: tzinfo) -> int:
    off = datetime.fromtimestamp(secs, zone).utcoffset()
    return int(off.total_seconds()) if off is not None else 0


def wall_to_unix(zone: tzinfo, year: int, month: int, day: int, hour: int = 0,
                 minute: int = 0, second: int = 0) -> int:
    """Unix seconds of a wall time in ``zone`` as Go's ``time.Date`` gives it: months and days
    out of range carry over; the offset is the one in force at (wall time - the offset in force
    at the wall time read as UTC), which puts a time in a DST gap after the gap and picks one
    of two repeated wall times by the sign of the zone's offset."""
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    days = date(year, month, 1).toordinal() - _EPOCH_ORDINAL + day - 1
    local = days * 86400 + hour * 3600 + minute * 60 + second
    return local - _offset(local - _offset(local, zone), zone)


def _day_matches(cron: Cron, w: _Wall) -> bool:
    dom = bool(cron.dom >> w.day & 1)
    dow = bool(cron.dow >> w.weekday & 1)
    if (cron.dom | cron.dow) & STAR:
        return dom and dow
    return dom or dow


def cron_next(cron: Cron, zone: tzinfo | None, ts: int) -> int | None:
    """The first time (ns) after ``ts`` (ns), from the next whole second on, that the pattern
    matches in ``zone`` (UTC when None); None when there is none within five years."""
    zone = zone or UTC
    t = ts // NANOS_PER_SECOND + 1
    w = _wall(t, zone)
    year_limit = w.year + _YEARS_AHEAD
    truncated = False
    while True:  # every pass starts over at the month, as a carry may have changed it
        if w.year > year_limit:
            return None
        wrapped = False
        while not cron.month >> w.month & 1:
            if not truncated:
                truncated = True
                t = wall_to_unix(zone, w.year, w.month, 1)
                w = _wall(t, zone)
            t = wall_to_unix(zone, w.year, w.month + 1, w.day, w.hour, w.minute, w.second)
            w = _wall(t, zone)
            if w.month == 1:
                wrapped = True
                break
        if wrapped:
            continue
        while not _day_matches(cron, w):
            if not truncated:
                truncated = True
                t = wall_to_unix(zone, w.year, w.month, w.day)
                w = _wall(t, zone)
            t = wall_to_unix(zone, w.year, w.month, w.day + 1, w.hour, w.minute, w.second)
            w = _wall(t, zone)
            if w.day == 1:
                wrapped = True
                break
        if wrapped:
            continue
        while not cron.hour >> w.hour & 1:
            if not truncated:
                truncated = True
                t = wall_to_unix(zone, w.year, w.month, w.day, w.hour)
            t += 3600
            w = _wall(t, zone)
            if w.hour == 0:
                wrapped = True
                break
        if wrapped:
            continue
        while not cron.minute >> w.minute & 1:
            if not truncated:
                truncated = True
                t -= t % 60
            t += 60
            w = _wall(t, zone)
            if w.minute == 0:
                wrapped = True
                break
        if wrapped:
            continue
        while not cron.second >> w.second & 1:
            truncated = True
            t += 1
            w = _wall(t, zone)
            if w.second == 0:
                wrapped = True
                break
        if wrapped:
            continue
        return t * NANOS_PER_SECOND


def format_in_zone(ns: int, zone: tzinfo | None) -> str:
    """RFC 3339 with nanoseconds (trailing zeros trimmed) in the zone's offset, ``Z`` for a
    zero offset (Go's RFC3339Nano); the form nats-server writes in Nats-Schedule-Next."""
    secs, frac = divmod(ns, NANOS_PER_SECOND)
    d = datetime.fromtimestamp(secs, zone or UTC)
    text = d.strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    off = int(d.utcoffset().total_seconds()) if d.utcoffset() is not None else 0
    if off == 0:
        return text + "Z"
    sign = "-" if off < 0 else "+"
    off = abs(off) // 60
    return f"{text}{sign}{off // 60:02d}:{off % 60:02d}"


__all__ = ["PREDEFINED", "STAR", "Cron", "CronError", "cron_next", "format_in_zone",
           "load_zone", "parse_cron", "wall_to_unix"]
