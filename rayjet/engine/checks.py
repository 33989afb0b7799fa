"""Checks of a published message's headers, made once on the leader before proposing.

Each function takes the parsed header dict and raises the typed error with the NATS
err_code nats-server answers with.
"""

from __future__ import annotations

from collections.abc import Callable

from rayjet.api import headers as H
from rayjet.api.duration import parse_ttl
from rayjet.engine import schedules as S
from rayjet.engine.counters import parse_incr
from rayjet.engine.ops import F_ROLLUP_ALL, F_ROLLUP_SUB
from rayjet.errors import APIError, MessageTTLDisabledError, error_for
from rayjet.subjects import is_valid_subject, subjects_collide


def int_header(h: dict[str, str], name: str) -> int | None:
    """An unsigned integer header; absent or not a number reads as absent (as nats-server)."""
    value = h.get(name)
    if value is None:
        return None
    value = value.strip()
    return int(value) if value.isdigit() else None


def check_incr(h: dict[str, str], data: bytes, allow: bool) -> int | None:
    """The Nats-Incr increment, or None. 10171 invalid or mixed with rollup/expected-*,
    10168 counters disabled, 10170 payload given."""
    value = h.get(H.INCR)
    if value is None:
        return None
    if not value.strip():
        raise error_for("MESSAGE_INCR_INVALID")
    incr = parse_incr(value)
    if not allow:
        raise error_for("MESSAGE_INCR_DISABLED")
    if data:
        raise error_for("MESSAGE_INCR_PAYLOAD")
    for name in (H.ROLLUP, H.EXPECTED_STREAM, H.EXPECTED_LAST_MSG_ID,
                 H.EXPECTED_LAST_SUBJECT_SEQ_SUBJECT):
        if h.get(name):
            raise error_for("MESSAGE_INCR_INVALID")
    if int_header(h, H.EXPECTED_LAST_SEQ) is not None \
            or int_header(h, H.EXPECTED_LAST_SUBJECT_SEQ) is not None:
        raise error_for("MESSAGE_INCR_INVALID")
    return incr


def check_ttl(h: dict[str, str], allow: bool) -> int:
    """Seconds of Nats-TTL (-1 never, 0 none). 10166 when TTLs are disabled, 10165 invalid."""
    value = h.get(H.TTL)
    if value is None or value == "":
        return 0
    try:
        ttl = parse_ttl(value)
    except APIError:
        if not allow:
            raise MessageTTLDisabledError() from None
        raise
    if ttl and not allow:
        raise MessageTTLDisabledError()
    return ttl


def rollup_flags(h: dict[str, str], allow: bool, deny_purge: bool) -> int:
    """F_ROLLUP_* for a Nats-Rollup header; 10111 when not permitted or not sub/all."""
    value = h.get(H.ROLLUP)
    if not value:
        return 0
    if not allow or deny_purge:
        raise error_for("STREAM_ROLLUP_FAILED", "rollup not permitted")
    if value == H.ROLLUP_SUBJECT:
        return F_ROLLUP_SUB
    if value == H.ROLLUP_ALL:
        return F_ROLLUP_ALL
    raise error_for("STREAM_ROLLUP_FAILED", f"rollup value invalid: {value!r}")


def check_schedule(h: dict[str, str], subject: str, subjects: tuple[str, ...], allow: bool,
                   allow_ttl: bool, ts: int) -> int:
    """First fire time (ns) of a schedule message, 0 when it is not one; adds
    ``Nats-Rollup: sub`` to ``h`` so a new schedule replaces the previous one.

    As nats-server, a Nats-Schedule-Time-Zone that is empty or names no IANA zone is refused
    (10223) even on a message that is not a schedule, and before the pattern is looked at;
    10188 instead of either when schedules are disabled."""
    zone = None
    time_zone = h.get(S.SCHEDULE_TIME_ZONE)
    if time_zone is not None:
        zone = S.load_zone(time_zone)
        if zone is None:
            raise error_for("MESSAGE_SCHEDULES_TIME_ZONE_INVALID" if allow
                            else "MESSAGE_SCHEDULES_DISABLED")
    pattern = h.get(S.SCHEDULE)
    if pattern is None or pattern == "":
        return 0
    if not allow:
        raise error_for("MESSAGE_SCHEDULES_DISABLED")
    parsed = S.parse_schedule(pattern, ts, zone)
    if parsed is None:
        raise error_for("MESSAGE_SCHEDULES_PATTERN_INVALID")
    sttl = h.get(S.SCHEDULE_TTL, "")
    if sttl:
        try:
            parse_ttl(sttl)
        except APIError:
            raise error_for("MESSAGE_SCHEDULES_TTL_INVALID") from None
    srollup = h.get(S.SCHEDULE_ROLLUP, "")
    if srollup and srollup != H.ROLLUP_SUBJECT:
        raise error_for("MESSAGE_SCHEDULES_ROLLUP_INVALID")
    if sttl and not allow_ttl:
        raise MessageTTLDisabledError()
    target = h.get(S.SCHEDULE_TARGET, "")
    if not target or not is_valid_subject(target) or target == subject:
        raise error_for("MESSAGE_SCHEDULES_TARGET_INVALID")
    source = h.get(S.SCHEDULE_SOURCE, "")
    if source and (source in (target, subject) or not is_valid_subject(source)):
        raise error_for("MESSAGE_SCHEDULES_SOURCE_INVALID")
    if not any(subjects_collide(s, target) for s in subjects):
        raise error_for("MESSAGE_SCHEDULES_TARGET_INVALID")
    if source and not any(subjects_collide(s, source) for s in subjects):
        raise error_for("MESSAGE_SCHEDULES_SOURCE_INVALID")
    rollup = h.get(H.ROLLUP)
    if not rollup:
        h[H.ROLLUP] = H.ROLLUP_SUBJECT
    elif rollup != H.ROLLUP_SUBJECT:
        raise error_for("MESSAGE_SCHEDULES_ROLLUP_INVALID")
    return parsed.first


def check_scheduler(h: dict[str, str], subject: str, allow: bool,
                    is_schedule: Callable[[str], bool]) -> str:
    """A client may send ``Nats-Schedule-Next: purge`` with ``Nats-Scheduler: <subject>`` to
    cancel a schedule; returns that subject ("" otherwise). 10212 for any other use."""
    nxt = h.get(S.SCHEDULE_NEXT)
    scheduler = h.get(S.SCHEDULER)
    if nxt:
        if nxt != S.SCHEDULE_NEXT_PURGE:
            raise error_for("MESSAGE_SCHEDULES_SCHEDULER_INVALID")
        if not scheduler or scheduler == subject or not is_valid_subject(scheduler):
            raise error_for("MESSAGE_SCHEDULES_SCHEDULER_INVALID")
        if not allow:
            raise error_for("MESSAGE_SCHEDULES_DISABLED")
        if not is_schedule(scheduler):
            raise error_for("MESSAGE_SCHEDULES_SCHEDULER_INVALID")
        return scheduler
    if scheduler:
        raise error_for("MESSAGE_SCHEDULES_SCHEDULER_INVALID")
    return ""


__all__ = [
    "check_incr", "check_schedule", "check_scheduler", "check_ttl", "int_header",
    "rollup_flags",
]
