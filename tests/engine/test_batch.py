"""Atomic batch publish: one op, all or nothing."""

from __future__ import annotations

from rayjet.engine import BatchCollector, BatchOp

from .conftest import refused


def test_batch_is_one_op_and_stores_everything(make):
    h = make(allow_atomic_publish=True)
    op = h.engine.prepare_batch([("s.a", b"1"), ("s.b", b"2", {"X": "y"}), ("s.a", b"3")], "b1")
    assert isinstance(op, BatchOp) and [m.seq for m in op.msgs] == [1, 2, 3]
    res = h.apply(op)
    assert res.ok and res.ack.batch == "b1" and res.ack.count == 3 and res.ack.seq == 3
    assert [m.data for m in h.msgs()] == [b"1", b"2", b"3"]


def test_batch_disabled(make):
    h = make()
    with refused(10174):
        h.engine.prepare_batch([("s.a", b"1")])


def test_a_refused_message_refuses_the_whole_batch(make):
    h = make(allow_atomic_publish=True)
    with refused(10071):
        h.engine.prepare_batch([("s.a", b"1"),
                                ("s.b", b"2", {"Nats-Expected-Last-Subject-Sequence": "9"})])
    assert h.engine.pending.next_seq == 1 and len(h.engine.pending) == 0
    assert h.pub("s.a").seq == 1


def test_batch_limits(make):
    h = make(allow_atomic_publish=True)
    with refused(10199):
        h.engine.prepare_batch([("s.a", b"")] * 1001)
    with refused(10179):
        h.engine.prepare_batch([("s.a", b"")], "x" * 65)


def test_duplicate_ids_in_a_batch(make):
    h = make(allow_atomic_publish=True)
    with refused(10201):
        h.engine.prepare_batch([("s.a", b"", {"Nats-Msg-Id": "1"}), ("s.a", b"", {"Nats-Msg-Id": "1"})])
    h.pub("s.a", b"", {"Nats-Msg-Id": "1"})
    with refused(10201):
        h.engine.prepare_batch([("s.a", b"", {"Nats-Msg-Id": "1"})])


def test_expected_last_sequence_only_on_the_first_message(make):
    h = make(allow_atomic_publish=True)
    h.apply(h.engine.prepare_batch([("s.a", b"", {"Nats-Expected-Last-Sequence": "0"})]))
    with refused(10164):
        h.engine.prepare_batch([("s.a", b""), ("s.a", b"", {"Nats-Expected-Last-Sequence": "1"})])


def test_unsupported_header(make):
    h = make(allow_atomic_publish=True)
    with refused(10177, "Nats-Expected-Last-Msg-Id"):
        h.engine.prepare_batch([("s.a", b"", {"Nats-Expected-Last-Msg-Id": "x"})])


def test_rollup_rules_inside_a_batch(make):
    h = make(allow_atomic_publish=True, allow_rollup_hdrs=True)
    with refused(10111, "rollup all"):
        h.engine.prepare_batch([("s.a", b""), ("s.b", b"", {"Nats-Rollup": "all"})])
    with refused(10111, "rollup sub"):
        h.engine.prepare_batch([("s.a", b""), ("s.a", b"", {"Nats-Rollup": "sub"})])
    h.pub("s.a")
    h.apply(h.engine.prepare_batch([("s.a", b"r", {"Nats-Rollup": "sub"}), ("s.b", b"")]))
    assert [m.data for m in h.msgs("s.a")] == [b"r"]


def test_batch_discard_new_counts_the_whole_batch(make):
    h = make(allow_atomic_publish=True, max_msgs=2, discard="new")
    with refused(10077):
        h.engine.prepare_batch([("s.a", b"")] * 3)
    h.apply(h.engine.prepare_batch([("s.a", b"")] * 2))


def test_batch_counters_run_through_the_batch(make):
    h = make(allow_atomic_publish=True, allow_msg_counter=True)
    op = h.engine.prepare_batch([("s.a", b"", {"Nats-Incr": "2"}), ("s.a", b"", {"Nats-Incr": "3"})])
    assert op.msgs[1].data == b'{"val":"5"}'


def test_stale_batch_is_skipped_whole(make):
    h = make(allow_atomic_publish=True)
    op = h.engine.prepare_batch([("s.a", b"1"), ("s.a", b"2")])
    h.engine.set_leader(2)  # a new leadership: the state moved on without this batch
    h.pub("s.b")
    res = h.apply(op)
    assert not res.ok and res.error.err_code == 10063
    assert h.seqs() == [1]


def test_collector_assembles_wire_batches():
    c = BatchCollector()
    assert c.add("s.a", b"1", {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "1"}) is None
    out = c.add("s.a", b"2", {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "2",
                              "Nats-Batch-Commit": "1", "X": "y"})
    assert out == [("s.a", b"1", {}), ("s.a", b"2", {"X": "y"})]
    assert c.add("s.a", b"3", {"Nats-Batch-Id": "c", "Nats-Batch-Sequence": "1"}) is None
    assert c.add("s.a", b"", {"Nats-Batch-Id": "c", "Nats-Batch-Sequence": "2",
                              "Nats-Batch-Commit": "eob"}) == [("s.a", b"3", {})]


def test_collector_refusals():
    with refused(10175):
        BatchCollector().add("s.a", b"", {"Nats-Batch-Id": "b"})
    with refused(10176):
        BatchCollector().add("s.a", b"", {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "2"})
    with refused(10200):
        BatchCollector().add("s.a", b"", {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "1",
                                          "Nats-Batch-Commit": "yes"})
    with refused(10179):
        BatchCollector().add("s.a", b"", {"Nats-Batch-Id": "", "Nats-Batch-Sequence": "1"})
