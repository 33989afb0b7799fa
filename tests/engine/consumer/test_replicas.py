"""Replicas apply the same ops to the same state; snapshots; leader changes."""

from __future__ import annotations

import pytest

from rayjet.engine.consumer.ops import (
    AckOp,
    DeliveredOp,
    MaxDeliveredOp,
    PurgedOp,
    StartOp,
    TouchOp,
    decode_consumer_op,
    encode_consumer_op,
)
from rayjet.errors import BadRequestError


@pytest.mark.parametrize("op", [
    StartOp(5, 9), DeliveredOp(123, ((1, 2, 1), (2, 3, 2)), 7), AckOp(9, ((1, 2),)),
    TouchOp(4, (1, 2)), MaxDeliveredOp(((3, 4),)), PurgedOp(10), DeliveredOp(1),
])
def test_codec_round_trip(op):
    assert decode_consumer_op(encode_consumer_op(op)) == op


def test_codec_refuses_unknown():
    with pytest.raises(BadRequestError):
        decode_consumer_op(b"")
    with pytest.raises(BadRequestError):
        decode_consumer_op(b"\xfe\x90")


def test_followers_match_leader(make):
    c = make(ack_wait=2.0, max_deliver=3, followers=2)
    for _ in range(10):
        c.pub()
    c.fetch(6)
    c.ack(2)
    c.nak(3, delay=1.0)
    c.progress(4)
    c.term(5)
    c.tick(2)
    c.fetch(10)
    c.tick(2)
    c.fetch(10)
    c.tick(2)
    c.fetch(10)
    assert c.replicas_agree()
    rows = {(f.info(c.now).delivered.consumer_seq, f.info(c.now).ack_floor.stream_seq,
             f.info(c.now).num_ack_pending) for f in c.followers}
    assert len(rows) == 1


def test_snapshot_restore(make):
    c = make(followers=1)
    for _ in range(4):
        c.pub()
    c.fetch(4)
    c.ack(1)
    c.ack(3)
    snap = c.engine.snapshot()
    fresh = c._engine(1)
    fresh.restore(snap)
    assert fresh.state.same_as(c.engine.state)
    # the restored replica leads on: 2 and 4 are still owed, nothing acked comes back
    c.commit(fresh.set_leader(c.now))
    c.clock.advance(30)
    fresh.due_redeliveries(c.now)
    assert [m.stream_seq for m in fresh.next_batch(c.now, 10).messages] == [2, 4]


def test_leader_change_keeps_acks_and_redelivers_the_rest(make):
    c = make(ack_wait=5.0, followers=1)
    for _ in range(5):
        c.pub()
    c.fetch(3)
    c.ack(1)
    c.ack(3)
    # a delivery decided but never committed is lost with the old leader
    lost = c.engine.next_batch(c.now, 1)
    assert [m.stream_seq for m in lost.messages] == [4]
    new = c.followers[0]
    assert new.set_leader(c.now) == []
    c.clock.advance(5)
    new.due_redeliveries(c.now)
    out = new.next_batch(c.now, 10)
    assert [(m.stream_seq, m.num_delivered) for m in out.messages] == [(2, 2), (4, 1), (5, 1)]


def test_pipelined_decisions_then_commit(make):
    c = make(followers=1)
    for _ in range(6):
        c.pub()
    e = c.engine
    b1 = e.next_batch(c.now, 2)
    b2 = e.next_batch(c.now, 2)  # decided before b1 is committed: no overlap
    a = e.prepare_ack(1, c.now)
    assert [m.stream_seq for m in b1.messages + b2.messages] == [1, 2, 3, 4]
    assert e.info(c.now).num_ack_pending == 3  # the leader counts what it handed out
    c.commit(b1.ops + b2.ops + [a.op])
    assert c.replicas_agree()
    assert c.row() == ("4/4", "1/1", 3, 0, 2)


def test_foreign_committed_op_rebuilds_view(make):
    c = make()
    for _ in range(3):
        c.pub()
    e = c.engine
    b = e.next_batch(c.now, 1)
    # an op from an earlier term commits first (e.g. an ack the old leader proposed)
    e.apply(DeliveredOp(c.now, ((1, 1, 1),)))
    e.apply(AckOp(c.now, ((1, 1),)))
    for op in b.ops:
        e.apply(op)
    assert e.view.same_as(e.state)


def test_purged_stream(make):
    c = make(followers=1)
    for _ in range(5):
        c.pub()
    c.fetch(2)
    c.store.purge_ex("", 4, 0)  # removes 1..3
    c.commit([c.engine.prepare_purged(4)])
    assert c.row() == ("2/3", "2/3", 0, 0, 2)
    assert [m.stream_seq for m in c.fetch(5)] == [4, 5]
    assert c.engine.prepare_purged(2) is None
    assert c.replicas_agree()


def test_needs_ack(make):
    from rayjet.api import StreamConfig

    c = make(stream=StreamConfig(name="ORDERS", subjects=["ORDERS.*"], retention="interest"),
             filter_subject="ORDERS.a", ack_wait=1.0, max_deliver=1)
    c.pub("ORDERS.a")
    c.pub("ORDERS.b")
    c.pub("ORDERS.a")
    c.fetch(2)
    c.ack(1)
    assert [c.engine.needs_ack(s) for s in (1, 2, 3)] == [False, False, True]
    c.tick(1)  # 3 hit max_deliver: not pending, but kept for inspection
    assert c.engine.needs_ack(3)
    c.ack(3)
    assert not c.engine.needs_ack(3) and c.acked == [1, 3]


def test_ack_none_deliveries_replicate_only_the_last(make):
    from rayjet.api import AckPolicy

    c = make(ack_policy=AckPolicy.NONE, followers=1)
    for _ in range(5):
        c.pub()
    assert [m.stream_seq for m in c.fetch(5)] == [1, 2, 3, 4, 5]
    op = decode_consumer_op(c.log[-1])
    assert isinstance(op, DeliveredOp) and op.items == ((5, 5, 1),)
    assert c.row() == ("5/5", "5/5", 0, 0, 0)
    assert c.replicas_agree()
