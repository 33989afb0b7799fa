"""Counter streams: Nats-Incr on allow_msg_counter streams, values as {"val":"N"}."""

from __future__ import annotations

from .conftest import refused

INCR = "Nats-Incr"


def test_increments_accumulate_per_subject(make):
    h = make(allow_msg_counter=True)
    assert h.pub("s.a", b"", {INCR: "5"}).val == "5"
    assert h.pub("s.a", b"", {INCR: "-2"}).val == "3"
    assert h.pub("s.b", b"", {INCR: "+1"}).val == "1"
    assert h.store.load_last_msg("s.a").data == b'{"val":"3"}'


def test_big_values(make):
    h = make(allow_msg_counter=True)
    h.pub("s.a", b"", {INCR: str(2**70)})
    assert h.pub("s.a", b"", {INCR: str(2**70)}).val == str(2**71)


def test_pipelined_increments_see_each_other(make):
    h = make(allow_msg_counter=True)
    a = h.engine.prepare_publish("s.a", b"", {INCR: "1"})
    b = h.engine.prepare_publish("s.a", b"", {INCR: "1"})
    assert b.data == b'{"val":"2"}'
    assert h.apply(a).ack.val == "1" and h.apply(b).ack.val == "2"


def test_counters_disabled(make):
    h = make()
    with refused(10168):
        h.engine.prepare_publish("s.a", b"", {INCR: "1"})


def test_increment_missing(make):
    h = make(allow_msg_counter=True)
    with refused(10169):
        h.engine.prepare_publish("s.a", b"")


def test_increment_with_payload(make):
    h = make(allow_msg_counter=True)
    with refused(10170):
        h.engine.prepare_publish("s.a", b"data", {INCR: "1"})


def test_increment_invalid(make):
    h = make(allow_msg_counter=True, allow_rollup_hdrs=True)
    for hdr in ({INCR: "one"}, {INCR: "1.5"}, {INCR: "1", "Nats-Rollup": "sub"},
                {INCR: "1", "Nats-Expected-Last-Sequence": "0"},
                {INCR: "1", "Nats-Expected-Stream": "S"}):
        with refused(10171):
            h.engine.prepare_publish("s.a", b"", hdr)


def test_counter_broken(make):
    h = make()
    h.pub("s.a", b"not json")
    import dataclasses

    from rayjet.engine import UpdateConfigOp

    # not an editable field: written straight to the log to get a non-counter value in place
    cfg = dataclasses.replace(h.engine.config, allow_msg_counter=True)
    assert h.apply(UpdateConfigOp(cfg.to_dict())).ok
    with refused(10172):
        h.engine.prepare_publish("s.a", b"", {INCR: "1"})
