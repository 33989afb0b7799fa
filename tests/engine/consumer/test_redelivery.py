"""Ack wait, backoff, nak (with delay), in progress, term, max_deliver and their advisories."""

from __future__ import annotations

from rayjet.engine.consumer.ops import MaxDeliveredOp, decode_consumer_op
from rayjet.engine.consumer.types import (
    MAX_DELIVER_TYPE,
    NAK_TYPE,
    TERM_REASON_DELETED,
    TERMINATED_TYPE,
)


def kinds(c) -> list[str]:
    return [a.body["type"] for a in c.advisories]


def test_redelivery_after_ack_wait(make):
    c = make(ack_wait=10.0)
    c.pub()
    c.pub()
    c.fetch(2)
    c.tick(9.9)
    assert c.fetch() == [] and c.engine.next_redelivery_ns() > c.now
    c.ack(2)
    c.tick(0.2)
    [m] = c.fetch(5)
    assert (m.stream_seq, m.consumer_seq, m.num_delivered) == (1, 3, 2)


def test_redeliveries_go_before_new_messages(make):
    c = make(ack_wait=5.0)
    c.pub()
    c.fetch()
    c.pub()
    c.tick(5)
    assert [(m.stream_seq, m.num_delivered) for m in c.fetch(5)] == [(1, 2), (2, 1)]


def test_backoff_steps(make):
    c = make(backoff=(1.0, 5.0, 20.0), max_deliver=5)
    assert c.engine.config.ack_wait == 1.0
    c.pub()
    c.fetch()
    waits = []
    for _ in range(4):
        start = c.now
        for _ in range(100):
            if c.fetch():
                break
            c.tick(0.5)
        waits.append((c.now - start) / 1e9)
    # backoff[0], backoff[1], backoff[2], then the last step again
    assert waits == [1.0, 5.0, 20.0, 20.0]
    c.tick(20)
    assert c.fetch() == []  # 5 deliveries made: max_deliver
    assert [a.body["deliveries"] for a in c.advisories] == [5]
    assert c.engine.info(c.now).num_redelivered == 1


def test_max_deliver_stops_and_advises(make):
    c = make(ack_wait=1.0, max_deliver=3, followers=1)
    c.pub()
    c.pub()
    counts = []
    for _ in range(6):
        counts += [(m.stream_seq, m.num_delivered) for m in c.fetch(5)]
        c.ack(2)
        c.tick(1)
    assert counts == [(1, 1), (2, 1), (1, 2), (1, 3)]
    assert kinds(c) == [MAX_DELIVER_TYPE]
    adv = c.advisories[0]
    assert adv.subject == "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ORDERS.DISPATCH"
    assert adv.body["stream_seq"] == 1 and adv.body["deliveries"] == 3
    # the ack floor stays below the message that ran out (nats-server 2.15.1)
    assert c.row() == ("4/2", "0/0", 0, 1, 0)
    assert any(isinstance(decode_consumer_op(buf), MaxDeliveredOp) for buf in c.log)
    assert c.replicas_agree()


def test_max_deliver_one_reports_no_redelivered(make):
    c = make(ack_wait=1.0, max_deliver=1)
    c.pub()
    c.fetch()
    c.tick(1)
    assert c.fetch() == []
    assert c.row() == ("1/1", "0/0", 0, 0, 0)


def test_max_deliver_ends_a_message_at_the_next_delivery_attempt(make):
    """As nats-server 2.15.1: past its last delivery's ack wait a message is queued once
    more and stays pending until the consumer next tries to deliver; then it leaves
    pending (advisory), the ack floor where it was. Only an ack moves the floor: past it
    once it is not the next one, to the last delivered once nothing is pending."""
    c = make(ack_wait=1.0, max_deliver=2)
    for _ in range(3):
        c.pub()
    assert [m.stream_seq for m in c.fetch(3)] == [1, 2, 3]
    c.ack(2)
    c.ack(3)
    c.tick(1)
    assert [(m.stream_seq, m.num_delivered) for m in c.fetch(3)] == [(1, 2)]
    c.tick(1)
    c.tick(5)
    assert c.row() == ("4/3", "0/0", 1, 1, 0) and kinds(c) == []
    assert c.fetch(3) == []
    assert c.row() == ("4/3", "0/0", 0, 1, 0)
    assert [(a.body["stream_seq"], a.body["deliveries"]) for a in c.advisories] == [(1, 2)]
    c.pub()
    [m] = c.fetch()
    c.ack(m.stream_seq)
    assert c.row() == ("5/4", "5/4", 0, 1, 0)


def test_acks_move_the_floor_past_messages_that_ran_out(make):
    """Measured on nats-server 2.15.1: an ack of the message just above the floor moves it
    to below the next pending one, past those that ran out; with one that ran out just
    above the floor, the floor waits until nothing is pending."""
    c = make(ack_wait=1.0, max_deliver=1)
    for _ in range(3):
        c.pub()
    c.fetch(3)
    c.ack(1)
    c.tick(1)  # 2 and 3 run out at their ack wait (max_deliver 1)
    assert c.row() == ("3/3", "1/1", 0, 0, 0)
    c.pub()
    c.pub()
    c.fetch(2)
    c.ack(4)
    assert c.row() == ("5/5", "1/1", 1, 0, 0)
    c.ack(5)
    assert c.row() == ("5/5", "5/5", 0, 0, 0)
    for _ in range(3):
        c.pub()
    c.fetch(3)  # stream seqs 6, 7, 8
    c.tick(0.5)
    c.progress(6)
    c.progress(8)
    c.tick(0.6)  # 7 runs out
    assert c.row() == ("8/8", "5/5", 2, 0, 0)
    c.ack(6)
    assert c.row() == ("8/8", "7/7", 1, 0, 0)


def test_nak_redelivers_at_once(make):
    c = make()
    c.pub()
    c.pub()
    c.fetch(2)
    out = c.nak(1)
    assert out.op is None  # a queue on the leader, nothing to replicate
    assert kinds(c) == [NAK_TYPE]
    [m] = c.fetch()
    assert (m.stream_seq, m.num_delivered, m.consumer_seq) == (1, 2, 3)


def test_nak_with_delay(make):
    c = make(ack_wait=30.0, followers=1)
    c.pub()
    c.fetch()
    c.nak(1, delay=5.0)
    c.tick(4.9)
    assert c.fetch() == []
    c.tick(0.1)
    [m] = c.fetch()
    assert m.num_delivered == 2
    assert c.replicas_agree()


def test_nak_max_deliver(make):
    c = make(max_deliver=2)
    c.pub()
    c.fetch()
    c.nak(1)
    assert [m.num_delivered for m in c.fetch()] == [2]
    c.nak(1)
    assert c.fetch() == []
    assert kinds(c)[-1] == MAX_DELIVER_TYPE
    assert c.row()[2] == 0


def test_in_progress_extends_ack_wait(make):
    c = make(ack_wait=10.0, followers=1)
    c.pub()
    c.fetch()
    c.tick(8)
    c.progress(1)
    c.tick(8)
    assert c.fetch() == []
    c.tick(2)
    assert [m.num_delivered for m in c.fetch()] == [2]
    assert c.progress(99).ok is False
    assert c.replicas_agree()


def test_term_stops_redelivery_with_reason(make):
    c = make(ack_wait=1.0)
    c.pub()
    c.pub()
    c.fetch(2)
    c.term(1, "bad payload")
    assert c.row() == ("2/2", "1/1", 1, 0, 0)
    c.tick(1)
    assert [m.stream_seq for m in c.fetch(5)] == [2]
    t = [a for a in c.advisories if a.body["type"] == TERMINATED_TYPE]
    assert t[0].body["reason"] == "bad payload" and t[0].body["stream_seq"] == 1
    assert t[0].subject == "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ORDERS.DISPATCH"


def test_redelivery_of_a_message_the_stream_dropped(make):
    c = make(ack_wait=1.0)
    c.pub()
    c.pub()
    c.fetch(2)
    c.store.remove_msg(1)
    c.tick(1)
    assert [m.stream_seq for m in c.fetch(5)] == [2]
    t = [a for a in c.advisories if a.body["type"] == TERMINATED_TYPE]
    assert t and t[0].body["reason"] == TERM_REASON_DELETED
    assert c.row()[2] == 1  # only 2 still pending


def test_acked_message_never_redelivered(make):
    c = make(ack_wait=1.0)
    for _ in range(3):
        c.pub()
    c.fetch(3)
    c.nak(2)
    c.ack(2)
    c.tick(1)
    c.ack(1)
    assert [m.stream_seq for m in c.fetch(5)] == [3]


def test_max_ack_pending_stalls_until_acked(make):
    c = make(max_ack_pending=2)
    for _ in range(5):
        c.pub()
    b = c.engine.next_batch(c.now, 5)
    c.take(b)
    assert [m.stream_seq for m in b.messages] == [1, 2] and b.stalled
    assert c.fetch(5) == []
    c.ack(1)
    assert [m.stream_seq for m in c.fetch(5)] == [3]


def test_max_ack_pending_minus_one_means_no_limit(make):
    c = make(max_ack_pending=-1)
    for _ in range(30):
        c.pub()
    assert len(c.fetch(30)) == 30
