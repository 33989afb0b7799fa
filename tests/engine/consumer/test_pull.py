"""Waiting pull requests: queueing, round robin, limits, expiry, no_wait, max_bytes."""

from __future__ import annotations

import pytest

from rayjet.engine.consumer.types import PullRequest
from rayjet.errors import NotLeaderError


def codes(batch) -> list[tuple[str, int, str]]:
    return [(s.reply, s.code, s.description) for s in batch.statuses]


def test_request_waits_then_gets_new_messages(make):
    c = make()
    b = c.request(batch=3, expires=5.0)
    assert b.deliveries == [] and b.statuses == []
    assert c.engine.info(c.now).num_waiting == 1
    c.pub()
    c.pub()
    b = c.serve()
    assert [(r, m.stream_seq) for r, m in b.deliveries] == [("r1", 1), ("r1", 2)]
    c.pub()
    b = c.serve()
    assert [(r, m.stream_seq) for r, m in b.deliveries] == [("r1", 3)]
    assert c.engine.num_waiting == 0  # batch complete


def test_request_expires_with_408(make, clock):
    c = make()
    c.pub()
    c.request(batch=5, expires=2.0)
    clock.advance(2)
    assert c.engine.next_request_deadline() == c.now
    st = c.engine.expire_requests(c.now)
    assert [(s.code, s.description, s.pending_msgs) for s in st] == [(408, "Request Timeout", 4)]
    assert c.engine.num_waiting == 0


def test_round_robin_between_waiting_requests(make):
    c = make()
    c.request(batch=3, reply="a")
    c.request(batch=3, reply="b")
    for _ in range(4):
        c.pub()
    b = c.serve()
    assert [(r, m.stream_seq) for r, m in b.deliveries] == [("a", 1), ("b", 2), ("a", 3), ("b", 4)]


def test_no_wait(make):
    c = make()
    b = c.request(batch=5, no_wait=True)
    assert codes(b) == [("r1", 404, "No Messages")]
    c.pub()
    c.pub()
    b = c.request(batch=5, no_wait=True)
    assert [m.stream_seq for m in b.messages] == [1, 2]
    assert codes(b) == [("r1", 404, "No Messages")]  # the rest of the batch: nothing
    assert c.engine.num_waiting == 0


def test_no_wait_with_expiry_waits_when_empty(make):
    c = make()
    b = c.request(batch=2, no_wait=True, expires=1.0)
    assert b.statuses == [] and c.engine.num_waiting == 1
    c.pub()
    b = c.serve()
    assert [m.stream_seq for m in b.messages] == [1]
    assert codes(b) == [("r1", 404, "No Messages")]


def test_request_limits(make):
    c = make(max_request_batch=10, max_request_expires=2.0, max_request_max_bytes=100)
    assert codes(c.request(batch=11)) == [("r1", 409, "Exceeded MaxRequestBatch of 10")]
    assert codes(c.request(expires=3.0)) == [("r1", 409, "Exceeded MaxRequestExpires of 2s")]
    assert codes(c.request(max_bytes=101)) == [("r1", 409, "Exceeded MaxRequestMaxBytes of 100")]
    assert codes(c.request(expires=1.0, heartbeat=0.6))[0][1:] == (
        400, "Bad Request - heartbeat value too large")
    assert c.engine.num_waiting == 0


def test_max_waiting(make):
    c = make(max_waiting=2)
    assert codes(c.request(reply="a", expires=5)) == []
    assert codes(c.request(reply="b", expires=5)) == []
    assert codes(c.request(reply="c", expires=5)) == [("c", 409, "Exceeded MaxWaiting")]
    # a client with heartbeats gets no 409: it relies on the missing heartbeats
    assert codes(c.request(reply="d", expires=5, heartbeat=1)) == []
    assert c.engine.num_waiting == 2


def test_max_bytes(make):
    c = make()
    c.pub(data=b"x" * 50)
    c.pub(data=b"y" * 500)
    b = c.request(batch=10, max_bytes=400, expires=5)
    [(reply, m)] = b.deliveries
    size = m.size
    assert m.stream_seq == 1 and size < 400
    assert codes(b) == [("r1", 409, "Message Size Exceeds MaxBytes")]
    assert b.statuses[0].pending_bytes == 400 - size
    # the big one is still there for a request that can take it
    b = c.request(batch=1, max_bytes=10_000, reply="r2")
    assert [m.stream_seq for m in b.messages] == [2]


def test_next_batch_max_bytes_refuses_first_message(make):
    c = make()
    c.pub(data=b"z" * 100)
    b = c.engine.next_batch(c.now, 5, max_bytes=10, reply="x")
    assert b.messages == [] and [s.code for s in b.statuses] == [409]


def test_heartbeats(make, clock):
    c = make()
    c.request(batch=1, expires=10.0, heartbeat=2.0)
    clock.advance(2)
    st = c.engine.expire_requests(c.now)
    assert [(s.code, s.description, s.done) for s in st] == [(100, "Idle Heartbeat", False)]
    assert c.engine.num_waiting == 1


def test_push_consumer_refuses_pull_requests(make):
    c = make(deliver_subject="out.orders")
    assert codes(c.request()) == [("r1", 409, "Consumer is push based")]
    c.pub()
    assert [m.stream_seq for m in c.fetch(5)] == [1]  # push delivery is next_batch


def test_waiting_requests_end_on_leader_change(make):
    c = make()
    c.request(batch=2, expires=10, reply="a")
    st = c.engine.set_follower()
    assert [(s.reply, s.code) for s in st] == [("a", 409)]
    with pytest.raises(NotLeaderError):
        c.engine.next_batch(c.now)
    with pytest.raises(NotLeaderError):
        c.engine.request(PullRequest(), c.now)


def test_ack_next(make):
    c = make()
    for _ in range(3):
        c.pub()
    c.fetch()
    ack, b = c.engine.prepare_ack_next(1, PullRequest(reply="n", batch=2), c.now)
    c.commit([ack.op])
    c.take(b)
    assert [m.stream_seq for m in b.messages] == [2, 3]
    assert c.row() == ("3/3", "1/1", 2, 0, 0)


def test_requests_pending_for_no_wait(make):
    c = make()
    c.pub()
    c2 = make(store=c.store, durable_name="OTHER", max_ack_pending=1)
    c2.fetch()  # stalls at max_ack_pending; one message pending in the stream
    c2.pub()
    c2.request(batch=5, expires=10, reply="a")
    assert codes(c2.request(batch=5, no_wait=True, reply="b")) == [
        ("b", 408, "Requests Pending")]


def test_inactive_threshold(make, clock):
    c = make(durable_name=None, name="eph", inactive_threshold=5.0)
    clock.advance(4)
    assert not c.engine.is_inactive(c.now)
    c.request(expires=3.0)
    clock.advance(3)
    assert not c.engine.is_inactive(c.now)  # a request was waiting
    c.engine.expire_requests(c.now)
    clock.advance(4.9)
    assert not c.engine.is_inactive(c.now)
    clock.advance(0.2)
    assert c.engine.is_inactive(c.now)
