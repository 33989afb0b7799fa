"""Message schedules: @at fires once and purges itself, @every and cron patterns repeat."""

from __future__ import annotations

from datetime import datetime

from rayjet.api.headers import decode_headers
from rayjet.clock import ManualClock
from rayjet.engine.schedules import format_ns, parse_ns

from .conftest import Harness, refused

NS = 1_000_000_000


def _at(clock, seconds: float) -> str:
    return "@at " + format_ns(clock.now_ns() + int(seconds * 1e9))


def test_at_schedule_fires_once_and_purges_itself(make, clock):
    h = make(allow_msg_schedules=True)
    h.pub("s.sched.1", b"payload", {"Nats-Schedule": _at(clock, 10),
                                     "Nats-Schedule-Target": "s.out", "Keep": "me"})
    assert h.engine.due() == []
    clock.advance(10)
    (op,) = h.engine.due()
    assert h.engine.due() == []  # in flight: not fired twice
    hdrs = decode_headers(op.hdr)
    assert op.subject == "s.out" and op.data == b"payload"
    assert hdrs == {"Keep": "me", "Nats-Scheduler": "s.sched.1", "Nats-Schedule-Next": "purge"}
    assert h.apply(op).ok
    assert [m.subject for m in h.msgs()] == ["s.out"]
    assert len(h.engine.schedules) == 0


def test_every_schedule_repeats(make, clock):
    h = make(allow_msg_schedules=True, allow_msg_ttl=True)
    h.pub("s.sched", b"tick", {"Nats-Schedule": "@every 5s", "Nats-Schedule-Target": "s.out",
                               "Nats-Schedule-TTL": "30s"})
    fired = []
    for _ in range(3):
        clock.advance(5)
        ops = h.engine.due()
        assert len(ops) == 1
        assert h.apply(ops[0]).ok
        fired.append(ops[0])
    hdrs = decode_headers(fired[0].hdr)
    assert hdrs["Nats-TTL"] == "30s" and fired[0].ttl == 30
    assert parse_ns(hdrs["Nats-Schedule-Next"]) == fired[0].ts + 5_000_000_000
    assert [m.subject for m in h.msgs()] == ["s.sched", "s.out", "s.out", "s.out"]


def test_a_late_every_schedule_fires_once_and_skips_ahead(make, clock):
    h = make(allow_msg_schedules=True)
    h.pub("s.sched", b"", {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "s.out"})
    clock.advance(100)
    (op,) = h.engine.due()
    h.apply(op)
    assert h.engine.due() == []
    clock.advance(1)
    assert len(h.engine.due()) == 1


def test_new_message_on_schedule_subject_replaces_it(make, clock):
    h = make(allow_msg_schedules=True)
    h.pub("s.sched", b"1", {"Nats-Schedule": _at(clock, 5), "Nats-Schedule-Target": "s.out"})
    h.pub("s.sched", b"2", {"Nats-Schedule": _at(clock, 50), "Nats-Schedule-Target": "s.out"})
    assert [m.data for m in h.msgs()] == [b"2"]  # rollup sub added by the leader
    clock.advance(6)
    assert h.engine.due() == []


def test_client_can_cancel_a_schedule(make, clock):
    h = make(allow_msg_schedules=True)
    h.pub("s.sched", b"", {"Nats-Schedule": _at(clock, 5), "Nats-Schedule-Target": "s.out"})
    h.pub("s.cancel", b"", {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "s.sched"})
    assert h.msgs("s.sched") == [] and len(h.engine.schedules) == 0
    h.pub("s.plain")
    with refused(10212):
        h.engine.prepare_publish("s.x", b"", {"Nats-Schedule-Next": "purge",
                                              "Nats-Scheduler": "s.plain"})


def test_schedule_refusals(make, clock):
    h = make(allow_msg_schedules=True)
    t = "Nats-Schedule-Target"
    cases = [
        ({"Nats-Schedule": "@reboot", t: "s.out"}, 10189),
        ({"Nats-Schedule": "@every 500ms", t: "s.out"}, 10189),
        ({"Nats-Schedule": "@at yesterday", t: "s.out"}, 10189),
        ({"Nats-Schedule": "@every 1s"}, 10190),
        ({"Nats-Schedule": "@every 1s", t: "s.sched"}, 10190),
        ({"Nats-Schedule": "@every 1s", t: "other.x"}, 10190),
        ({"Nats-Schedule": "@every 1s", t: "s.out", "Nats-Schedule-TTL": "soon"}, 10191),
        ({"Nats-Schedule": "@every 1s", t: "s.out", "Nats-Schedule-Rollup": "all"}, 10192),
        ({"Nats-Schedule": "@every 1s", t: "s.out", "Nats-Schedule-Source": "s.out"}, 10203),
        ({"Nats-Schedule": "@every 1s", t: "s.out", "Nats-Schedule-TTL": "5s"}, 10166),
        ({"Nats-Schedule-Next": "2030-01-01T00:00:00Z", "Nats-Scheduler": "s.x"}, 10212),
        ({"Nats-Scheduler": "s.x"}, 10212),
    ]
    for hdrs, code in cases:
        with refused(code):
            h.engine.prepare_publish("s.sched", b"", hdrs)


def test_schedules_disabled(make, clock):
    h = make()
    with refused(10188):
        h.engine.prepare_publish("s.sched", b"", {"Nats-Schedule": "@every 1s",
                                                  "Nats-Schedule-Target": "s.out"})


def test_schedule_with_source_takes_the_source_payload(make, clock):
    h = make(allow_msg_schedules=True)
    h.pub("s.src", b"latest")
    h.pub("s.sched", b"own", {"Nats-Schedule": _at(clock, 1), "Nats-Schedule-Target": "s.out",
                              "Nats-Schedule-Source": "s.src"})
    clock.advance(1)
    (op,) = h.engine.due()
    assert op.data == b"latest"


def test_schedules_survive_a_restart(make, clock):
    h = make(allow_msg_schedules=True)
    h.pub("s.sched", b"", {"Nats-Schedule": "@every 5s", "Nats-Schedule-Target": "s.out"})
    clock.advance(5)
    (op,) = h.engine.due()
    h.apply(op)
    before = h.engine.schedules.to_list()
    h.engine.rebuild()
    assert h.engine.schedules.to_list() == before


def _utc(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp()) * NS


def _fire(h) -> tuple:
    """Fire the one due schedule and store its copy: (op, its Nats-Schedule-Next)."""
    (op,) = h.engine.due()
    assert h.apply(op).ok
    return op, decode_headers(op.hdr)["Nats-Schedule-Next"]


def test_cron_schedule_fires_and_repeats(make, clock):
    h = make(allow_msg_schedules=True)
    start = clock.now_ns()  # 2023-11-14T22:13:20Z, a multiple of 5 seconds
    h.pub("s.sched", b"tick", {"Nats-Schedule": "*/5 * * * * *",
                               "Nats-Schedule-Target": "s.out"})
    assert h.engine.schedules.next_due() == start + 5 * NS
    clock.advance(4.9)
    assert h.engine.due() == []
    nexts = []
    for _ in range(3):
        clock.set(h.engine.schedules.next_due())
        op, nxt = _fire(h)
        assert op.subject == "s.out" and op.data == b"tick"
        nexts.append(nxt)
    assert nexts == ["2023-11-14T22:13:30Z", "2023-11-14T22:13:35Z", "2023-11-14T22:13:40Z"]
    assert [m.subject for m in h.msgs()] == ["s.sched", "s.out", "s.out", "s.out"]
    assert h.engine.schedules.next_due() == _utc("2023-11-14T22:13:40+00:00")


def test_cron_schedule_in_a_time_zone(make, clock):
    h = make(allow_msg_schedules=True)
    h.pub("s.sched", b"", {"Nats-Schedule": "0 0 9 * * *", "Nats-Schedule-Time-Zone":
                           "Asia/Kolkata", "Nats-Schedule-Target": "s.out"})
    # 09:00 in Kolkata is 03:30 UTC; the clock starts at 22:13:20 UTC on 2023-11-14
    assert h.engine.schedules.next_due() == _utc("2023-11-15T03:30:00+00:00")
    clock.set(_utc("2023-11-15T03:29:59+00:00"))
    assert h.engine.due() == []
    clock.advance(1)
    op, nxt = _fire(h)
    assert nxt == "2023-11-16T09:00:00+05:30"  # in the zone, as nats-server writes it
    assert "Nats-Schedule-Time-Zone" not in decode_headers(op.hdr)
    assert h.engine.schedules.next_due() == _utc("2023-11-16T03:30:00+00:00")
    before = h.engine.schedules.to_list()
    h.engine.rebuild()  # recovery reads the zone's offset back from the fired copy
    assert h.engine.schedules.to_list() == before


def test_cron_schedule_through_a_dst_change():
    clock = ManualClock(_utc("2025-10-25T12:00:00+00:00"))
    h = Harness(clock, allow_msg_schedules=True)
    h.pub("s.sched", b"", {"Nats-Schedule": "0 30 2 * * *", "Nats-Schedule-Time-Zone":
                           "Europe/Amsterdam", "Nats-Schedule-Target": "s.out"})
    fired = []
    for _ in range(3):
        clock.set(h.engine.schedules.next_due())
        op, nxt = _fire(h)
        fired.append((op.ts, nxt))
    # 02:30 happens twice on 2025-10-26 (clocks go back from 03:00 CEST to 02:00 CET)
    assert fired == [(_utc("2025-10-26T00:30:00+00:00"), "2025-10-26T02:30:00+01:00"),
                     (_utc("2025-10-26T01:30:00+00:00"), "2025-10-27T02:30:00+01:00"),
                     (_utc("2025-10-27T01:30:00+00:00"), "2025-10-28T02:30:00+01:00")]


def test_a_late_cron_schedule_fires_once_and_skips_ahead(make, clock):
    h = make(allow_msg_schedules=True)
    h.pub("s.sched", b"", {"Nats-Schedule": "@hourly", "Nats-Schedule-Target": "s.out"})
    clock.set(_utc("2023-11-15T05:00:00+00:00") + 400_000_000)  # 7 hours late
    _op, nxt = _fire(h)
    assert nxt == "2023-11-15T06:00:00Z"
    assert h.engine.due() == []


def test_cron_and_time_zone_refusals(make, clock):
    h = make(allow_msg_schedules=True)
    t, z = "Nats-Schedule-Target", "Nats-Schedule-Time-Zone"
    cases = [
        ({"Nats-Schedule": "* * * * *", t: "s.out"}, 10189),
        ({"Nats-Schedule": "0 0 0 * * 7", t: "s.out"}, 10189),
        ({"Nats-Schedule": "0 0 0 30 2 *", t: "s.out"}, 10189),  # never
        ({"Nats-Schedule": "@DAILY", t: "s.out"}, 10189),
        ({"Nats-Schedule": "0 * * * * *", z: "Not/A/Zone", t: "s.out"}, 10223),
        ({"Nats-Schedule": "0 * * * * *", z: "", t: "s.out"}, 10223),
        ({"Nats-Schedule": "invalid", z: "Not/A/Zone", t: "s.out"}, 10223),  # zone first
        ({z: "Not/A/Zone"}, 10223),  # even with no schedule
        ({"Nats-Schedule": "invalid", z: "UTC", t: "s.out"}, 10189),
        ({"Nats-Schedule": "@every 5s", z: "UTC", t: "s.out"}, 10189),
        ({"Nats-Schedule": "@at 2030-01-01T00:00:00Z", z: "UTC", t: "s.out"}, 10189),
        ({"Nats-Schedule": "@daily", z: "Europe/Amsterdam"}, 10190),
    ]
    for hdrs, code in cases:
        with refused(code):
            h.engine.prepare_publish("s.sched", b"", hdrs)
    assert h.msgs() == []
    h.pub("s.plain", b"", {z: "Europe/Amsterdam"})  # a valid zone alone is no schedule
    assert len(h.engine.schedules) == 0
    off = make()
    for hdrs in ({"Nats-Schedule": "0 * * * * *", z: "Not/A/Zone"}, {z: "Not/A/Zone"}):
        with refused(10188):
            off.engine.prepare_publish("s.sched", b"", hdrs)
