"""Deliver policies (resolved once into a starting seq) and ack policies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rayjet.api import ConsumerInfo, StreamConfig
from rayjet.clock import NANOS_PER_SECOND
from rayjet.engine.consumer.ops import StartOp, decode_consumer_op
from rayjet.storage import MemStore, StoreConfig


@pytest.fixture
def hundred(clock):
    store = MemStore(StoreConfig(storage="memory"), clock=clock)
    for i in range(1, 101):
        store.store_msg("ORDERS.processed", b"", f"order {i}".encode())
    return store


@pytest.mark.parametrize("policy, opts, first", [
    ("all", {}, b"order 1"),
    ("last", {}, b"order 100"),
    ("by_start_sequence", {"opt_start_seq": 10}, b"order 10"),
])
def test_start_position(make, hundred, policy, opts, first):
    c = make(store=hundred, durable_name="X", filter_subject="ORDERS.processed",
             ack_policy="none", deliver_policy=policy, **opts)
    [m] = c.fetch()
    assert m.data == first


def test_deliver_new_skips_existing(make, hundred):
    c = make(store=hundred, deliver_policy="new")
    assert c.row() == ("0/100", "0/100", 0, 0, 0)
    assert c.fetch() == []
    c.pub(data=b"order 101")
    [m] = c.fetch()
    assert (m.data, m.stream_seq, m.consumer_seq) == (b"order 101", 101, 1)


def test_deliver_by_start_time(make, clock):
    c = make(start=False)
    for i in (1, 2, 3):
        c.pub(data=f"order {i}".encode())
        clock.advance(60)
    start = datetime.fromtimestamp((clock.now_ns() - 150 * NANOS_PER_SECOND) / NANOS_PER_SECOND,
                                   tz=UTC)
    c = make(store=c.store, deliver_policy="by_start_time", opt_start_time=start)
    [m] = c.fetch()
    assert m.data == b"order 2"


def test_deliver_last_filtered_and_empty_stream(make):
    c = make(start=False)
    c.pub("ORDERS.a", b"a1")
    c.pub("ORDERS.b", b"b1")
    c.pub("ORDERS.b", b"b2")
    c.pub("ORDERS.c", b"c1")
    d = make(store=c.store, deliver_policy="last", filter_subject="ORDERS.b")
    assert [m.data for m in d.fetch(10)] == [b"b2"]
    e = make(deliver_policy="last")  # empty stream: only what comes next
    assert decode_consumer_op(e.log[0]) == StartOp(1, 0)
    e.pub(data=b"later")
    assert [m.data for m in e.fetch()] == [b"later"]


def test_deliver_last_per_subject(make):
    c = make(start=False)
    for subj, data in [("ORDERS.a", b"a1"), ("ORDERS.b", b"b1"), ("ORDERS.a", b"a2"),
                       ("ORDERS.c", b"c1"), ("ORDERS.b", b"b2"), ("ORDERS.x", b"x1")]:
        c.pub(subj, data)
    d = make(store=c.store, deliver_policy="last_per_subject",
             filter_subjects=("ORDERS.a", "ORDERS.b", "ORDERS.c"))
    assert d.engine.info(d.now).num_pending == 3
    msgs = d.fetch(10)
    assert [m.data for m in msgs] == [b"a2", b"c1", b"b2"]
    assert [m.num_pending for m in msgs] == [2, 1, 0]
    d.pub("ORDERS.a", b"a3")
    assert [m.data for m in d.fetch(10)] == [b"a3"]


def test_last_per_subject_survives_leader_change(make):
    c = make(start=False)
    for subj in ["ORDERS.a", "ORDERS.b", "ORDERS.a", "ORDERS.c", "ORDERS.b"]:
        c.pub(subj)
    d = make(store=c.store, deliver_policy="last_per_subject", ack_policy="none", followers=1)
    assert [m.stream_seq for m in d.fetch(1)] == [3]
    # the follower takes over: it continues the catch-up, nothing twice, nothing missed
    new = d.followers[0]
    d.commit(new.set_leader(d.now))
    out = new.next_batch(d.now, 10)
    assert [m.stream_seq for m in out.messages] == [4, 5]


def test_ack_none_moves_floor_with_delivery(make):
    c = make(ack_policy="none")
    for _ in range(3):
        c.pub()
    assert [m.stream_seq for m in c.fetch(2)] == [1, 2]
    assert c.row() == ("2/2", "2/2", 0, 0, 1)
    assert c.ack(1).op is None  # nothing to ack
    c.tick(3600)
    assert [m.stream_seq for m in c.fetch(5)] == [3]


def test_ack_none_info_leaves_max_ack_pending_unset(make):
    """nats-server 2.15.1: an ack-none consumer's info has no max_ack_pending (nats-py: None)."""
    c = make(ack_policy="none")
    c.pub()
    c.fetch(5)
    info = c.engine.info(c.now)
    assert info.config.max_ack_pending is None
    wire = info.to_dict()
    assert "max_ack_pending" not in wire["config"]
    assert ConsumerInfo.from_dict(wire).config.max_ack_pending is None
    nats_api = pytest.importorskip("nats.js.api", reason="nats-py is not installed (dev extra)")
    assert nats_api.ConsumerInfo.from_response(wire).config.max_ack_pending is None


def test_ack_all_acks_everything_below(make):
    c = make(ack_policy="all")
    for _ in range(5):
        c.pub()
    msgs = c.fetch(5)
    assert c.row() == ("5/5", "0/0", 5, 0, 0)
    c.ack(msgs[2].stream_seq)
    assert c.row() == ("5/5", "3/3", 2, 0, 0)
    c.ack(2)  # below the floor: harmless
    assert c.row() == ("5/5", "3/3", 2, 0, 0)
    c.ack(5)
    assert c.row() == ("5/5", "5/5", 0, 0, 0)


def test_explicit_acks_out_of_order(make):
    c = make()
    for _ in range(4):
        c.pub()
    c.fetch(4)
    c.ack(3)
    assert c.row() == ("4/4", "0/0", 3, 0, 0)
    c.ack(1)
    assert c.row() == ("4/4", "1/1", 2, 0, 0)
    c.ack(2)
    assert c.row() == ("4/4", "3/3", 1, 0, 0)
    c.ack(4)
    assert c.row() == ("4/4", "4/4", 0, 0, 0)


def test_duplicate_and_late_acks_are_harmless(make):
    c = make()
    c.pub()
    c.fetch()
    assert c.ack(1).op is not None
    before = c.engine.state.to_doc()
    out = c.ack(1)
    assert out.op is None and out.ok
    assert c.ack(99).ok is False  # never delivered
    assert c.engine.state.to_doc() == before


def test_filter_subjects_and_stream_order(make):
    c = make(filter_subjects=("ORDERS.a", "ORDERS.c"))
    for s in ["ORDERS.a", "ORDERS.b", "ORDERS.c", "ORDERS.b", "ORDERS.a"]:
        c.pub(s)
    assert c.engine.info(c.now).num_pending == 3
    msgs = c.fetch(10)
    assert [(m.subject, m.stream_seq, m.consumer_seq) for m in msgs] == [
        ("ORDERS.a", 1, 1), ("ORDERS.c", 3, 2), ("ORDERS.a", 5, 3)]
    assert [m.num_pending for m in msgs] == [2, 1, 0]


def test_filtered_consumer_skips_without_delivering(make):
    c = make(filter_subject="ORDERS.a", followers=1)
    for _ in range(5):
        c.pub("ORDERS.b")
    assert c.fetch(3) == []
    assert c.engine.state.scan == 6  # a new leader resumes after what was looked at
    c.pub("ORDERS.a")
    [m] = c.fetch()
    assert (m.stream_seq, m.consumer_seq) == (6, 1)
    assert c.replicas_agree()


def test_stream_config_retention_decides_forwarding(make):
    c = make(stream=StreamConfig(name="ORDERS", subjects=["ORDERS.*"], retention="interest"))
    c.pub()
    c.fetch()
    c.ack(1)
    assert c.acked == [1]
    d = make()
    d.pub()
    d.fetch()
    d.ack(1)
    assert d.acked == []  # limits retention: nothing to tell the stream
