"""A consumer takes a backup's delivery state whole (restoring a stream's consumers)."""

from __future__ import annotations

import pytest

from rayjet.api import AckPolicy
from rayjet.engine.consumer.ops import RestoreStateOp, decode_consumer_op, encode_consumer_op
from rayjet.errors import BadRequestError


def restore(c, doc):
    return c._outcome(c.engine.prepare_restore_state(doc))


def test_the_restored_consumer_resumes_where_the_original_was(make, clock):
    orig = make(ack_wait=1.0)
    for _ in range(10):
        orig.pub()
    orig.fetch(6)
    for s in (1, 2, 4):
        orig.ack(s)
    orig.tick(2)
    orig.fetch(1)  # seq 3 redelivered
    doc = orig.engine.state.to_doc()

    copy = make(ack_wait=1.0, store=orig.store, followers=2)
    op = RestoreStateOp(doc)
    assert decode_consumer_op(encode_consumer_op(op)) == op
    restore(copy, doc)
    assert copy.row() == orig.row()
    assert copy.replicas_agree()
    assert copy.engine.state.to_doc() == doc
    # new deliveries continue after the restored delivered sequence
    assert [m.stream_seq for m in copy.fetch(2)] == [7, 8]
    # the pending ones come back after their ack wait
    due = copy.tick(2).messages + copy.fetch(10)
    assert sorted(m.stream_seq for m in due) == [3, 5, 6, 7, 8, 9, 10]


def test_a_restored_ack_all_floor_holds(make):
    orig = make(ack_policy=AckPolicy.ALL)
    for _ in range(5):
        orig.pub()
    orig.fetch(3)
    orig.ack(3)
    copy = make(ack_policy=AckPolicy.ALL, store=orig.store)
    copy.fetch(1)  # delivered before the state arrived: the restored state wins
    restore(copy, orig.engine.state.to_doc())
    assert copy.row() == ("3/3", "3/3", 0, 0, 2)
    assert [m.stream_seq for m in copy.fetch(5)] == [4, 5]


def test_a_malformed_state_is_refused(make):
    c = make()
    with pytest.raises(BadRequestError):
        c.engine.prepare_restore_state({"delivered": "nonsense"})
    assert c.row() == ("0/0", "0/0", 0, 0, 0)
