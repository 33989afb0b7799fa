"""Resetting a consumer's delivery position ($JS.API.CONSUMER.RESET), as nats-server 2.15:
one replicated op; nothing pending afterwards, consumer seqs from 1 again, both floors at
the reset seq - 1; which seqs a deliver policy allows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rayjet.api import AckPolicy, DeliverPolicy
from rayjet.engine.consumer.engine import ConsumerEngine
from rayjet.engine.consumer.ops import ResetOp, decode_consumer_op, encode_consumer_op
from rayjet.errors import APIError


def reset(c, seq=0):
    op, to = c.engine.prepare_reset(seq, c.now)
    c.commit([op])
    return to


def test_the_op_round_trips():
    assert decode_consumer_op(encode_consumer_op(ResetOp(42))) == ResetOp(42)


def test_reset_to_a_sequence_forgets_pending_and_starts_consumer_seqs_again(make, clock):
    c = make(ack_policy=AckPolicy.EXPLICIT, ack_wait=1.0, followers=2)
    for _ in range(6):
        c.pub()
    c.fetch(4)
    c.ack(1)
    c.tick(2)
    c.fetch(1)  # a redelivery
    assert reset(c, 2) == 2
    assert c.row() == ("0/1", "0/1", 0, 0, 5)
    assert c.replicas_agree()
    msgs = c.fetch(2)
    assert [(m.stream_seq, m.consumer_seq, m.num_delivered) for m in msgs] == [
        (2, 1, 1), (3, 2, 1)]
    c.tick(5)  # the forgotten deliveries are not redelivered; these two are
    assert [m.stream_seq for m in c.fetch(5)] == [2, 3, 4, 5, 6]
    assert c.replicas_agree()


def test_reset_without_a_sequence_goes_back_to_just_past_the_ack_floor(make):
    c = make(ack_policy=AckPolicy.EXPLICIT, followers=1)
    for _ in range(5):
        c.pub()
    c.fetch(3)
    c.ack(1)
    c.ack(2)
    assert reset(c) == 3
    assert c.row() == ("0/2", "0/2", 0, 0, 3)
    assert [m.stream_seq for m in c.fetch(1)] == [3]
    assert c.replicas_agree()


def test_reset_past_the_end_of_the_stream(make):
    c = make()
    for _ in range(3):
        c.pub()
    assert reset(c, 100) == 100
    assert c.row() == ("0/99", "0/99", 0, 0, 0)
    assert c.fetch(1) == []


def test_a_new_leader_starts_from_the_reset_position(make):
    c = make(followers=1)
    for _ in range(5):
        c.pub()
    c.fetch(5)
    reset(c, 3)
    follower: ConsumerEngine = c.followers[0]
    c.engine.set_follower()
    follower.set_leader(c.now)
    msgs = follower.next_batch(c.now, 2).messages
    assert [(m.stream_seq, m.consumer_seq) for m in msgs] == [(3, 1), (4, 2)]


def test_a_snapshot_keeps_the_reset(make):
    c = make()
    for _ in range(4):
        c.pub()
    c.fetch(4)
    reset(c, 2)
    other = c._engine(1)
    other.restore(c.engine.snapshot())
    assert other.state.same_as(c.engine.state)


@pytest.mark.parametrize("policy, cfg, seq, error", [
    (DeliverPolicy.LAST, {}, 2, "invalid reset: not allowed"),
    (DeliverPolicy.NEW, {}, 2, "invalid reset: not allowed"),
    (DeliverPolicy.BY_START_SEQUENCE, {"opt_start_seq": 3}, 2, "invalid reset: below start seq"),
    (DeliverPolicy.BY_START_SEQUENCE, {"opt_start_seq": 3}, 3, None),
    (DeliverPolicy.LAST, {}, 0, None),
])
def test_which_sequences_a_deliver_policy_allows(make, policy, cfg, seq, error):
    c = make(deliver_policy=policy, **cfg)
    for _ in range(5):
        c.pub()
    if error is None:
        reset(c, seq)
        return
    with pytest.raises(APIError) as info:
        c.engine.prepare_reset(seq, c.now)
    assert info.value.err_code == 10204 and info.value.description == error


def test_a_by_start_time_consumer_resets_no_earlier_than_its_start(make, clock):
    c = make(start=False)
    c.pub()
    clock.advance(10)
    start = datetime.fromtimestamp(clock.now_ns() / 1e9, UTC)
    c.pub()
    c.pub()
    c = make(store=c.store, deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start)
    with pytest.raises(APIError, match="below start time"):
        c.engine.prepare_reset(1, c.now)
    assert reset(c, 3) == 3
