"""Message schedules (allow_msg_schedules): ``Nats-Schedule: @at <time>``, ``@every <dur>``
or a cron pattern (:mod:`rayjet.engine.cron`), the latter optionally read in the IANA zone of
``Nats-Schedule-Time-Zone``.

A schedule is a message on its own subject carrying the pattern and a target subject. When it
is due the leader publishes a copy of it to the target (schedule headers stripped,
``Nats-Scheduler`` and ``Nats-Schedule-Next`` added). Storing that copy moves a repeating
schedule to its next time, or purges a one-shot schedule; every replica does this from the
values the leader put in the op, so no replica reads its own clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import NamedTuple

from rayjet.api.duration import parse_duration, parse_rfc3339
from rayjet.clock import NANOS_PER_SECOND
from rayjet.engine.cron import Cron, CronError, cron_next, format_in_zone, load_zone, parse_cron
from rayjet.errors import APIError

SCHEDULE = "Nats-Schedule"
SCHEDULE_TIME_ZONE = "Nats-Schedule-Time-Zone"
SCHEDULE_TTL = "Nats-Schedule-TTL"
SCHEDULE_ROLLUP = "Nats-Schedule-Rollup"
SCHEDULE_TARGET = "Nats-Schedule-Target"
SCHEDULE_SOURCE = "Nats-Schedule-Source"
SCHEDULER = "Nats-Scheduler"
SCHEDULE_NEXT = "Nats-Schedule-Next"
SCHEDULE_NEXT_PURGE = "purge"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def round_second(ns: int) -> int:
    """Go's Time.Round(time.Second) for ns since the epoch (half rounds up)."""
    return (ns + NANOS_PER_SECOND // 2) // NANOS_PER_SECOND * NANOS_PER_SECOND


class Schedule(NamedTuple):
    """A parsed schedule pattern: when it first fires and how it repeats."""

    first: int  # ns
    every: int = 0  # @every: the interval in ns
    cron: Cron | None = None  # a cron pattern (or @daily etc.)
    zone: tzinfo | None = None  # Nats-Schedule-Time-Zone (cron only); None when absent

    @property
    def repeats(self) -> bool:
        return bool(self.every) or self.cron is not None

    def after(self, fire: int, now: int) -> int | None:
        """The next time of a repeating schedule that fired at ``fire`` (the leader's clock
        reads ``now``); one that fell behind fires once and skips ahead, as nats-server does.
        None when a cron pattern has no time left within five years (the schedule is dropped)."""
        if self.cron is None:
            return next_fire(fire, self.every, now)
        nxt = cron_next(self.cron, self.zone, fire)
        if nxt is not None and nxt < now:
            nxt = cron_next(self.cron, self.zone, round_second(now))
        return nxt

    def next_header(self, nxt: int) -> str:
        """Nats-Schedule-Next of a fired copy: the time in the schedule's zone (UTC if none)."""
        return format_in_zone(nxt, self.zone)


def parse_schedule(pattern: str, ts: int, zone: tzinfo | None = None) -> Schedule | None:
    """The schedule a pattern seen at ``ts`` describes; None when nats-server would refuse the
    pattern: an unknown form, an @every under a second, an @at or @every given a time zone
    (``zone`` is None only when the message had no Nats-Schedule-Time-Zone), a cron pattern
    with no time within five years."""
    if pattern.startswith("@at "):
        if zone is not None:
            return None
        try:
            when = parse_rfc3339(pattern[4:])
        except APIError:
            return None
        if when is None:
            return None
        delta = when - _EPOCH
        return Schedule((delta.days * 86400 + delta.seconds) * NANOS_PER_SECOND
                        + delta.microseconds * 1000)
    if pattern.startswith("@every "):
        if zone is not None:
            return None
        try:
            seconds = parse_duration(pattern[7:])
        except ValueError:
            return None
        if seconds < 1:
            return None
        every = round(seconds * NANOS_PER_SECOND)
        return Schedule(round_second(ts) + every, every)
    try:
        cron = parse_cron(pattern)
    except CronError:
        return None
    first = cron_next(cron, zone, ts)
    if first is None:
        return None
    return Schedule(first, 0, cron, zone)


def stored_schedule(pattern: str | None, time_zone: str | None, ts: int) -> Schedule | None:
    """The schedule of a stored message's Nats-Schedule and Nats-Schedule-Time-Zone values
    (None when either is absent or invalid, or the zone is unknown)."""
    if not pattern:
        return None
    zone = None
    if time_zone is not None:
        zone = load_zone(time_zone)
        if zone is None:
            return None
    return parse_schedule(pattern, ts, zone)


def next_fire(fire: int, every: int, now: int) -> int:
    """The next time of an @every schedule that fired at ``fire``; a schedule that fell
    behind fires once and skips ahead, as nats-server does."""
    nxt = round_second(fire) + every
    if nxt < now:
        nxt = round_second(now) + every
    return nxt


def format_ns(ns: int) -> str:
    """RFC 3339 with nanoseconds, trailing zeros trimmed (Go's RFC3339Nano), in UTC."""
    secs, frac = divmod(ns, NANOS_PER_SECOND)
    text = datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def parse_ns(text: str) -> int:
    """Inverse of :func:`format_ns` (to the microsecond); 0 when not a time."""
    try:
        when = parse_rfc3339(text)
    except APIError:
        return 0
    if when is None:
        return 0
    delta = when - _EPOCH
    return (delta.days * 86400 + delta.seconds) * NANOS_PER_SECOND + delta.microseconds * 1000


class Schedules:
    """schedule subject -> [seq of the schedule message, next fire time ns]."""

    __slots__ = ("by_subject", "inflight")

    def __init__(self) -> None:
        self.by_subject: dict[str, list[int]] = {}
        self.inflight: set[str] = set()  # leader only: fired, copy not yet applied

    def __len__(self) -> int:
        return len(self.by_subject)

    def add(self, subject: str, seq: int, fire: int) -> None:
        self.by_subject[subject] = [seq, fire]
        self.inflight.discard(subject)

    def update(self, subject: str, fire: int) -> None:
        entry = self.by_subject.get(subject)
        if entry is not None:
            entry[1] = fire
        self.inflight.discard(subject)

    def remove(self, subject: str) -> None:
        if self.by_subject.pop(subject, None) is not None:
            self.inflight.discard(subject)

    def due(self, now: int) -> list[tuple[str, int, int]]:
        """(subject, seq, fire) of schedules due at ``now`` and not in flight, by seq."""
        out = [(subj, seq, fire) for subj, (seq, fire) in self.by_subject.items()
               if fire <= now and subj not in self.inflight]
        out.sort(key=lambda row: row[1])
        return out

    def next_due(self) -> int:
        """The earliest fire time (ns), 0 when there is no schedule."""
        return min((fire for _seq, fire in self.by_subject.values()), default=0)

    def to_list(self) -> list[list]:
        return [[s, seq, fire] for s, (seq, fire) in self.by_subject.items()]

    @classmethod
    def from_list(cls, rows: list) -> Schedules:
        out = cls()
        for subj, seq, fire in rows:
            out.by_subject[subj] = [seq, fire]
        return out


def fired_headers(h: dict[str, str], scheduler: str, next_value: str) -> dict[str, str]:
    """Headers of the message a schedule publishes to its target."""
    ttl = h.get(SCHEDULE_TTL, "")
    rollup = h.get(SCHEDULE_ROLLUP, "")
    out = {k: v for k, v in h.items()
           if not k.startswith("Nats-Schedule") and not k.startswith("Nats-Expected-")
           and k not in ("Nats-Msg-Id", "Nats-TTL", "Nats-Rollup", SCHEDULER)}
    out[SCHEDULER] = scheduler
    out[SCHEDULE_NEXT] = next_value
    if ttl:
        out["Nats-TTL"] = ttl
    if rollup:
        out["Nats-Rollup"] = rollup
    return out


__all__ = [
    "SCHEDULE", "SCHEDULER", "SCHEDULE_NEXT", "SCHEDULE_NEXT_PURGE", "SCHEDULE_ROLLUP",
    "SCHEDULE_SOURCE", "SCHEDULE_TARGET", "SCHEDULE_TIME_ZONE", "SCHEDULE_TTL", "Schedule",
    "Schedules", "fired_headers", "format_ns", "load_zone", "next_fire", "parse_ns",
    "parse_schedule", "round_second", "stored_schedule",
]
