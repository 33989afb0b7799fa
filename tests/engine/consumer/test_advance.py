"""Advancing an ack-all consumer's floor in one op (a bulk reader's durable cursor)."""

from __future__ import annotations

import pytest

from rayjet.api import AckPolicy, RetentionPolicy, StreamConfig
from rayjet.engine.consumer.types import PullRequest
from rayjet.errors import BadRequestError


def advance(c, seq):
    return c._outcome(c.engine.prepare_advance(seq, c.now))


def test_advance_settles_undelivered_messages_in_one_op(make):
    c = make(ack_policy=AckPolicy.ALL, followers=2)
    for _ in range(1000):
        c.pub()
    log_before = len(c.log)
    advance(c, 700)
    assert len(c.log) == log_before + 1
    assert c.row() == ("700/700", "700/700", 0, 0, 300)
    assert c.replicas_agree()
    # delivery goes on right after the advanced floor, with consumer seqs continuing
    msgs = c.fetch(2)
    assert [(m.stream_seq, m.consumer_seq) for m in msgs] == [(701, 701), (702, 702)]


def test_advance_counts_only_matching_messages(make):
    c = make(ack_policy=AckPolicy.ALL, filter_subject="ORDERS.a", followers=1)
    for i in range(1, 21):
        c.pub("ORDERS.a" if i % 2 else "ORDERS.b")
    assert [m.stream_seq for m in c.fetch(2)] == [1, 3]
    advance(c, 14)  # 5, 7, 9, 11, 13 skipped: consumer seq 2 + 5
    assert c.row() == ("7/14", "7/14", 0, 0, 3)
    assert [(m.stream_seq, m.consumer_seq) for m in c.fetch(1)] == [(15, 8)]
    assert c.replicas_agree()


def test_advance_drops_pending_and_redeliveries(make, clock):
    c = make(ack_policy=AckPolicy.ALL, ack_wait=1.0, followers=1)
    for _ in range(10):
        c.pub()
    c.fetch(4)
    c.tick(2)
    assert [m.stream_seq for m in c.fetch(2)] == [1, 2]  # redeliveries; 3, 4 queued
    advance(c, 6)
    # consumer seqs 1-6 went to 4 deliveries and 2 redeliveries; 5 and 6 are skipped
    assert c.row() == ("8/6", "8/6", 0, 0, 4)
    c.tick(5)
    msgs = c.fetch(2)  # nothing below 7 comes back
    assert [(m.stream_seq, m.consumer_seq) for m in msgs] == [(7, 9), (8, 10)]
    assert c.replicas_agree()


def test_advance_inside_delivered_range_is_an_ack_all(make):
    c = make(ack_policy=AckPolicy.ALL)
    for _ in range(5):
        c.pub()
    c.fetch(5)
    advance(c, 3)
    assert c.row() == ("5/5", "3/3", 2, 0, 0)
    advance(c, 2)  # below the floor: nothing changes
    assert c.row() == ("5/5", "3/3", 2, 0, 0)


def test_advance_serves_waiting_requests_after_the_floor(make):
    c = make(ack_policy=AckPolicy.ALL)
    for _ in range(6):
        c.pub()
    advance(c, 4)
    b = c.engine.request(PullRequest(reply="r", batch=5, no_wait=True), c.now)
    c.take(b)
    assert [m.stream_seq for _, m in b.deliveries] == [5, 6]


def test_advance_survives_snapshot_and_leader_change(make):
    c = make(ack_policy=AckPolicy.ALL, followers=1)
    for _ in range(8):
        c.pub()
    advance(c, 5)
    snap = c.engine.snapshot()
    follower = c.followers[0]
    follower.restore(snap)
    c.engine.set_follower()
    c.commit(follower.set_leader(c.now))
    batch = follower.next_batch(c.now, 10)
    assert [m.stream_seq for m in batch.messages] == [6, 7, 8]
    assert [m.consumer_seq for m in batch.messages] == [6, 7, 8]


@pytest.mark.parametrize("kw, stream", [
    ({"ack_policy": AckPolicy.EXPLICIT}, None),
    ({"ack_policy": AckPolicy.NONE}, None),
    ({"ack_policy": AckPolicy.ALL},
     StreamConfig(name="ORDERS", subjects=["ORDERS.*"], retention=RetentionPolicy.INTEREST)),
])
def test_advance_refused_where_it_would_hide_acks(make, kw, stream):
    c = make(stream=stream, **kw)
    c.pub()
    with pytest.raises(BadRequestError) as exc:
        c.engine.prepare_advance(1, c.now)
    assert exc.value.err_code == 10003
    assert c.row()[1] == "0/0"


def test_advance_past_the_stream_end_refused(make):
    c = make(ack_policy=AckPolicy.ALL)
    c.pub()
    for bad in (0, 2, -1):
        with pytest.raises(BadRequestError, match="last sequence is 1"):
            c.engine.prepare_advance(bad, c.now)
    assert c.row() == ("0/0", "0/0", 0, 0, 1)
