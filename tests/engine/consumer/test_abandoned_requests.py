"""Pull requests whose client gave up: they expire or are cancelled, and get nothing more.

nats-server 2.15.1, with max_ack_pending=3 and ten messages: fetch(10) gets 1-3 and its
request waits until its expiry; a second fetch gets nothing; after two acks a third fetch
gets 4 and 5 (delivered 5/5, 3 ack pending, nothing waiting once the fetch is over).
"""

from __future__ import annotations


def _seqs(batch) -> list[int]:
    return [m.stream_seq for m in batch.messages]


def _codes(batch) -> list[tuple[str, int, str]]:
    return [(s.reply, s.code, s.description) for s in batch.statuses]


def test_held_back_request_expires_and_gets_nothing_after(make, clock):
    c = make(max_ack_pending=3)
    for _ in range(10):
        c.pub()
    b = c.request(batch=10, reply="f1", no_wait=True, expires=1.0)
    assert _seqs(b) == [1, 2, 3]
    assert b.statuses == []  # held back by max_ack_pending, not at the stream's end
    assert c.engine.info(c.now).num_waiting == 1
    clock.advance(1.0)
    b = c.request(batch=10, reply="f2", no_wait=True, expires=1.0)  # f1 expires first
    assert _seqs(b) == [] and _codes(b) == [("f1", 408, "Request Timeout")]
    clock.advance(1.0)
    c.ack(1)
    c.ack(2)
    b = c.serve()  # the acks made room: f2 expired, so nobody takes 4 and 5
    assert _seqs(b) == [] and _codes(b) == [("f2", 408, "Request Timeout")]
    i = c.engine.info(c.now)
    assert (i.delivered.stream_seq, i.num_ack_pending, i.num_waiting) == (3, 1, 0)
    b = c.request(batch=10, reply="f3", no_wait=True, expires=1.0)
    assert [(r, m.stream_seq) for r, m in b.deliveries] == [("f3", 4), ("f3", 5)]
    i = c.engine.info(c.now)
    assert (i.delivered.consumer_seq, i.delivered.stream_seq) == (5, 5)
    assert (i.num_ack_pending, i.num_waiting, i.num_pending) == (3, 1, 5)
    clock.advance(1.0)
    assert c.engine.info(c.now).num_waiting == 0


def test_expired_request_is_never_served(make, clock):
    c = make()
    c.request(batch=5, reply="gone", expires=1.0)
    clock.advance(1.0)
    c.pub()
    b = c.serve()
    assert b.deliveries == [] and _codes(b) == [("gone", 408, "Request Timeout")]
    assert c.engine.info(c.now).delivered.stream_seq == 0


def test_cancelled_request_gets_nothing(make):
    c = make(max_ack_pending=3)
    for _ in range(10):
        c.pub()
    b = c.request(batch=10, reply="f1", no_wait=True)  # no expiry: waits for acks
    assert _seqs(b) == [1, 2, 3] and b.statuses == []
    assert c.engine.cancel_request("f1") is True
    assert c.engine.cancel_request("f1") is False  # already gone
    c.ack(1)
    c.ack(2)
    b = c.serve()
    assert b.deliveries == [] and b.statuses == []
    i = c.engine.info(c.now)
    assert (i.delivered.stream_seq, i.num_ack_pending, i.num_waiting) == (3, 1, 0)
