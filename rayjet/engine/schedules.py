"""Message schedules (allow_msg_schedules): ``Nats-Schedule: @at <time>`` / ``@every <dur>``.

A schedule is a message on its own subject carrying the pattern and a target subject. When it
is due the leader publishes a copy of it to the target (schedule headers stripped,
``Nats-Scheduler`` and ``Nats-Schedule-Next`` added). Storing that copy moves a repeating
schedule to its next time, or purges a one-shot schedule; every replica does this from the
values the leader put in the op, so no replica reads its own clock.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rayjet.api.duration import parse_duration, parse_rfc3339
from rayjet.clock import NANOS_PER_SECOND
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


def parse_schedule(pattern: str, ts: int) -> tuple[int, int] | None:
    """(first fire time in ns, repeat interval in ns or 0) of a pattern seen at ``ts``.

    None when the pattern is not one we support (nats-server also knows cron patterns).
    """
    if pattern.startswith("@at "):
        try:
            when = parse_rfc3339(pattern[4:])
        except APIError:
            return None
        if when is None:
            return None
        delta = when - _EPOCH
        return (delta.days * 86400 + delta.seconds) * NANOS_PER_SECOND \
            + delta.microseconds * 1000, 0
    if pattern.startswith("@every "):
        try:
            seconds = parse_duration(pattern[7:])
        except ValueError:
            return None
        if seconds < 1:
            return None
        every = round(seconds * NANOS_PER_SECOND)
        return round_second(ts) + every, every
    return None


def next_fire(fire: int, every: int, now: int) -> int:
    """The next time of a repeating schedule that fired at ``fire``; a schedule that fell
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
    "SCHEDULE_SOURCE", "SCHEDULE_TARGET", "SCHEDULE_TIME_ZONE", "SCHEDULE_TTL", "Schedules",
    "fired_headers", "format_ns", "next_fire", "parse_ns", "parse_schedule", "round_second",
]
