"""Acks from consumers to interest / work-queue streams: summaries, the outbox, reconciling.

The property: whatever acks got lost on the way (a stream or consumer leader died with
them), once each consumer reconciled with its replicated ack summary the stream holds
exactly the messages some consumer that wants them has not acked (and those nobody wants).
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayjet.api import ConsumerConfig
from rayjet.clock import ManualClock
from rayjet.engine.ack_sync import AckOutbox, AckSummary, kept, sync_seqs
from rayjet.engine.consumer.engine import ConsumerEngine
from rayjet.engine.consumer.reader import StoreReader
from rayjet.engine.consumer.state import ACK_ALL, ACK_EXPLICIT, ConsumerState
from rayjet.engine.retention import Interest
from tests.engine.conftest import Harness

# -- the summary -------------------------------------------------------------------------------


def test_summary_settles_delivered_seqs_that_are_not_pending():
    s = ConsumerState(ACK_EXPLICIT)
    s.asseq, s.dsseq = 3, 9
    s.pending = {5: [4, 0], 8: [6, 0]}
    s.redelivered = {2: 3}  # past max_deliver below the floor: still held
    summ = s.ack_summary()
    assert summ == AckSummary(3, 9, frozenset({2, 5, 8}))
    assert [q for q in range(12) if summ.acked(q)] == [1, 3, 4, 6, 7, 9]
    assert AckSummary.from_list(summ.to_list()) == summ


def test_ack_all_settles_only_up_to_the_floor():
    s = ConsumerState(ACK_ALL)
    s.asseq, s.dsseq, s.pending = 4, 9, {6: [5, 0]}
    assert [q for q in range(12) if s.ack_summary().acked(q)] == [1, 2, 3, 4]


@settings(max_examples=150, deadline=None)
@given(floor=st.integers(0, 20), extra=st.integers(0, 20),
       pend=st.sets(st.integers(1, 40)), red=st.sets(st.integers(1, 40)),
       mode=st.sampled_from([ACK_EXPLICIT, ACK_ALL]))
def test_summary_agrees_with_needs_ack(floor, extra, pend, red, mode):
    s = ConsumerState(mode)
    s.asseq, s.dsseq = floor, floor + extra
    s.pending = {q: [q, 0] for q in sorted(pend) if floor < q <= floor + extra}
    s.redelivered = {q: 1 for q in red if q <= floor + extra}
    summ = s.ack_summary()
    for q in range(1, 45):
        assert summ.acked(q) == (q <= summ.last and not s.needs_ack(q)), q


# -- the outbox --------------------------------------------------------------------------------


def test_outbox_keeps_acks_until_confirmed_and_retries_failures():
    box = AckOutbox()
    box.add([1, 2, 3])
    send = box.next(2)
    assert send.seqs == (1, 2) and box.next(2) is None  # one send at a time
    box.done(send, False)  # the stream leader died: they go again, first
    assert len(box) == 3
    send = box.next(10)
    assert send.seqs == (1, 2, 3)
    box.add([4])
    box.done(send, True)
    assert box.next(10).seqs == (4,)


def test_outbox_reconciliation_stands_in_for_the_list_and_bounds_it():
    box = AckOutbox(limit=5)
    box.add(range(1, 6))
    assert not box.need_sync
    box.add([6])  # over the bound: the summary covers them all
    assert box.need_sync and len(box) == 0
    send = box.next(10)
    assert send.sync and send.seqs == ()
    box.add([7])  # acked after the summary was read: kept one by one
    box.done(send, False)
    assert box.need_sync and len(box) == 0  # a failed reconciliation is owed again
    assert box.next(10).sync


def test_outbox_ignores_answers_from_an_earlier_leadership():
    box = AckOutbox()
    box.add([1])
    send = box.next(10)
    box.clear()  # lost leadership: hold nothing
    box.done(send, False)
    assert len(box) == 0 and not box.busy


# -- the stream's side -------------------------------------------------------------------------


def _stream(clock, retention, names, filters=None):
    h = Harness(clock, name="JOBS", subjects=["jobs.>"], retention=retention)
    engines = {}
    for name in names:
        f = (filters or {}).get(name, ())
        h.apply(h.engine.prepare_consumer(name, f, 1))
        cfg = ConsumerConfig(durable_name=name, ack_wait=5.0,
                             filter_subjects=tuple(f) if f else ())
        e = ConsumerEngine(cfg, h.config, StoreReader(h.store), clock, rng=random.Random(0))
        for op in e.set_leader(clock.now_ns()):
            e.apply(op)
        engines[name] = e
    return h, engines


def _reconcile(h, name, e):
    summ = e.state.ack_summary()
    start = 0
    while True:
        ops, start = h.engine.prepare_consumer_sync(name, summ, start, limit=7)
        for op in ops:
            h.apply(op)
        if not start:
            return


def test_work_queue_reconciles_acks_the_stream_never_saw(clock):
    h, engines = _stream(clock, "workqueue", ["W"])
    e = engines["W"]
    for i in range(30):
        h.pub(f"jobs.{i}")
    now = clock.now_ns()
    b = e.next_batch(now, 30)
    for op in b.ops:
        e.apply(op)
    got = [d.stream_seq for _, d in b.deliveries]
    e.apply(e.prepare_acks(got[:25], now).op)  # acked on the consumer, never forwarded
    assert h.store.state().msgs == 30
    _reconcile(h, "W", e)
    assert h.seqs() == list(range(26, 31))
    _reconcile(h, "W", e)  # again: nothing changes
    assert h.seqs() == list(range(26, 31))


def test_reconciling_scans_only_up_to_what_the_consumer_settled(clock):
    h, engines = _stream(clock, "workqueue", ["W"])
    for i in range(10):
        h.pub(f"jobs.{i}")
    ops, nxt = h.engine.prepare_consumer_sync("W", AckSummary(4, 4), 0, limit=3)
    assert [o.seq for o in ops] == [1, 2, 3] and nxt == 4
    ops, nxt = h.engine.prepare_consumer_sync("W", AckSummary(4, 4), nxt, limit=3)
    assert [o.seq for o in ops] == [4] and nxt == 0
    assert h.engine.prepare_consumer_sync("X", AckSummary(4, 4)) == ([], 0)  # unknown


def test_sync_seqs_skips_what_is_recorded_or_not_wanted():
    interest = Interest()
    from rayjet.api.enums import RetentionPolicy

    interest.retention = RetentionPolicy.INTEREST
    interest.register("A", ("jobs.a",), 1)
    interest.consumers["A"].acked.add(2)
    msgs = [(1, "jobs.a"), (2, "jobs.a"), (3, "jobs.b"), (4, "jobs.a")]
    assert sync_seqs(interest, "A", AckSummary(4, 4), msgs) == [1, 4]
    assert sync_seqs(interest, "B", AckSummary(4, 4), msgs) == []


SUBJECTS = ["jobs.a", "jobs.b", "jobs.c"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(retention=st.sampled_from(["workqueue", "interest"]),
       pubs=st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=40),
       steps=st.lists(st.tuples(st.integers(0, 1), st.integers(1, 8), st.floats(0, 1),
                                st.booleans()), max_size=25),
       order=st.permutations([0, 1]))
def test_reconciled_stream_holds_exactly_the_unacked(retention, pubs, steps, order):
    clock = ManualClock()
    names = ["A", "B"]
    # work queue: disjoint filters (one consumer per subject); interest: overlapping ones
    filters = ({"A": ("jobs.a", "jobs.b"), "B": ("jobs.c",)} if retention == "workqueue"
               else {"A": ("jobs.a", "jobs.b"), "B": ("jobs.b", "jobs.c")})
    h, engines = _stream(clock, retention, names, filters)
    for subj in pubs:
        h.pub(subj)
    expected_subjects = {seq: subj for seq, subj in enumerate(pubs, 1)}
    held: dict[str, list[int]] = {n: [] for n in names}
    for who, n, frac, lose in steps:
        name = names[who]
        e = engines[name]
        now = clock.now_ns()
        b = e.next_batch(now, n)
        for op in b.ops:
            e.apply(op)
        held[name].extend(d.stream_seq for _, d in b.deliveries)
        k = int(len(held[name]) * frac)
        acking, held[name] = held[name][:k], held[name][k:]
        out = e.prepare_acks(acking, now)
        if out.op is None:
            continue
        for seq in e.apply(out.op).acked:
            if not lose:  # forwarded and applied; otherwise lost with a leader
                h.apply(h.engine.prepare_ack(name, seq))
    for i in order:
        _reconcile(h, names[i], engines[names[i]])
    summaries = {n: engines[n].state.ack_summary() for n in names}
    want = [seq for seq, subj in expected_subjects.items()
            if kept(h.engine.interest, seq, subj, summaries)]
    assert h.seqs() == want
