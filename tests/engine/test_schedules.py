"""Message schedules: @at fires once and purges itself, @every repeats."""

from __future__ import annotations

from rayjet.api.headers import decode_headers
from rayjet.engine.schedules import format_ns, parse_ns

from .conftest import refused


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
        ({"Nats-Schedule": "@daily", t: "s.out"}, 10189),
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
