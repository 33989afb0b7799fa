"""Limits and discard policies; discard-new checks see proposals in flight."""

from __future__ import annotations

from .conftest import refused


def test_discard_old_max_msgs(make):
    h = make(max_msgs=3)
    for i in range(5):
        h.pub("s.a", b"%d" % i)
    assert h.seqs() == [3, 4, 5]


def test_discard_old_max_bytes(make):
    h = make(max_bytes=200)
    for _ in range(10):
        h.pub("s.a", b"x" * 50)
    st = h.state()
    assert st.bytes <= 200 and st.last_seq == 10 and st.msgs == 2


def test_discard_old_max_msgs_per_subject(make):
    h = make(max_msgs_per_subject=2)
    for i in range(4):
        h.pub("s.a", b"%d" % i)
    h.pub("s.b")
    assert [(m.subject, m.data) for m in h.msgs()] == [("s.a", b"2"), ("s.a", b"3"), ("s.b", b"")]


def test_max_age(make, clock):
    h = make(max_age=10.0)
    h.pub("s.a")
    clock.advance(5)
    h.pub("s.a")
    clock.advance(6)
    assert h.engine.expire().removed == 1
    assert h.seqs() == [2]


def test_discard_new_max_msgs(make):
    h = make(max_msgs=2, discard="new")
    h.pub("s.a")
    h.pub("s.a")
    with refused(10077, "maximum messages exceeded"):
        h.engine.prepare_publish("s.a", b"")


def test_discard_new_max_bytes(make):
    h = make(max_bytes=150, discard="new")
    h.pub("s.a", b"x" * 50)
    with refused(10077, "maximum bytes exceeded"):
        h.engine.prepare_publish("s.a", b"x" * 100)


def test_discard_new_counts_proposals_in_flight(make):
    h = make(max_msgs=2, discard="new")
    a = h.engine.prepare_publish("s.a", b"")
    b = h.engine.prepare_publish("s.a", b"")
    with refused(10077):
        h.engine.prepare_publish("s.a", b"")
    h.apply(a)
    h.apply(b)
    assert h.state().msgs == 2


def test_discard_new_per_subject(make):
    h = make(max_msgs_per_subject=1, discard="new", discard_new_per_subject=True,
             allow_rollup_hdrs=True)
    op = h.engine.prepare_publish("s.a", b"1")
    with refused(10077, "maximum messages per subject exceeded"):
        h.engine.prepare_publish("s.a", b"2")  # the first is still in flight
    h.apply(op)
    with refused(10077, "per subject"):
        h.engine.prepare_publish("s.a", b"2")
    h.pub("s.b", b"other subject")
    h.pub("s.a", b"rolled", {"Nats-Rollup": "sub"})  # a rollup replaces instead
    assert [m.data for m in h.msgs("s.a")] == [b"rolled"]


def test_discard_new_without_per_subject_drops_old_per_subject(make):
    h = make(max_msgs_per_subject=1, discard="new")
    h.pub("s.a", b"1")
    h.pub("s.a", b"2")
    assert [m.data for m in h.msgs()] == [b"2"]


def test_limits_bound_interest_streams_too(make):
    h = make(retention="interest", max_msgs=2)
    h.engine.register_consumer("C")
    for _ in range(4):
        h.pub("s.a")
    assert h.seqs() == [3, 4]


def test_update_config_applies_new_limits(make):
    h = make()
    for i in range(5):
        h.pub("s.a", b"%d" % i)
    cfg = h.engine.config
    import dataclasses

    op = h.engine.prepare_update(dataclasses.replace(cfg, max_msgs=2, description="now small"))
    res = h.apply(op)
    assert res.ok and res.value.max_msgs == 2
    assert h.seqs() == [4, 5]
    assert h.engine.config.description == "now small"
    assert h.store.config.max_msgs == 2


def test_update_config_refuses_fixed_fields(make):
    h = make()
    import dataclasses

    with refused(10052):
        h.engine.prepare_update(dataclasses.replace(h.engine.config, storage="file"))


def test_update_keeps_store_only_settings(make, tmp_path):
    import dataclasses

    from .conftest import Harness

    h = Harness(make().clock, "file", str(tmp_path), {"block_size": 4096})
    h.pub("s.a")
    h.apply(h.engine.prepare_update(dataclasses.replace(h.engine.config, max_msgs=10)))
    assert h.store.config.max_msgs == 10 and h.store.config.block_size == 4096


def test_max_consumers(make):
    h = make(max_consumers=1)
    h.engine.register_consumer("A")
    with refused(10026):
        h.engine.register_consumer("B")
    with refused(10026):
        h.engine.prepare_consumer("B")
    h.engine.register_consumer("A", ["s.a"])  # updating an existing one is fine
