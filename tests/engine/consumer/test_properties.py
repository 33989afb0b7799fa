"""Random deliver/ack/nak/term/timer sequences keep the consumer invariants."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayjet.clock import ManualClock
from tests.engine.consumer.conftest import Consumer

ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("pub"), st.integers(1, 3)),
    st.tuples(st.just("fetch"), st.integers(1, 4)),
    st.tuples(st.just("ack"), st.integers(0, 20)),
    st.tuples(st.just("nak"), st.integers(0, 20)),
    st.tuples(st.just("nakd"), st.integers(0, 20)),
    st.tuples(st.just("wpi"), st.integers(0, 20)),
    st.tuples(st.just("term"), st.integers(0, 20)),
    st.tuples(st.just("tick"), st.integers(1, 3)),
    st.tuples(st.just("failover"), st.integers(0, 3)),
), max_size=60)


def check(c: Consumer) -> None:
    s = c.engine.state
    assert s.acseq <= s.dcseq and s.asseq <= s.dsseq
    assert all(s.asseq < seq <= s.dsseq for seq in s.pending)
    assert all(p[0] <= s.dcseq for p in s.pending.values())
    assert list(s.pending) == sorted(s.pending)
    assert c.replicas_agree()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=ACTIONS, policy=st.sampled_from(["explicit", "all"]))
def test_random_histories_keep_invariants(actions, policy):
    clock = ManualClock()
    c = Consumer(clock, followers=1, ack_policy=policy, ack_wait=1.0, max_deliver=3,
                 filter_subjects=("ORDERS.a", "ORDERS.c"))
    delivered: dict[int, int] = {}  # stream seq -> deliveries seen
    settled: set[int] = set()  # acked or terminated (explicit: exactly those)
    subjects = ["ORDERS.a", "ORDERS.b", "ORDERS.c"]
    for kind, arg in actions:
        if kind == "pub":
            for i in range(arg):
                c.pub(subjects[(c.store.fast_state().last_seq + i) % 3])
        elif kind == "fetch":
            for m in c.fetch(arg):
                assert m.stream_seq not in settled, "a settled message came back"
                assert m.num_delivered == delivered.get(m.stream_seq, 0) + 1
                delivered[m.stream_seq] = m.num_delivered
                assert m.subject in ("ORDERS.a", "ORDERS.c")
        elif kind in ("ack", "term"):
            if arg in delivered:
                was_pending = arg in c.engine.view.pending
                (c.ack if kind == "ack" else c.term)(arg)
                if policy == "explicit":
                    if was_pending or kind == "ack":
                        settled.add(arg)
                else:
                    settled.update(s for s in delivered if s <= arg)
        elif kind == "nak":
            c.nak(arg)
        elif kind == "nakd":
            c.nak(arg, delay=0.5)
        elif kind == "wpi":
            c.progress(arg)
        elif kind == "tick":
            c.tick(arg * 0.5)
        elif kind == "failover":
            old, new = c.engine, c.followers[0]
            if arg:  # the old leader decided a batch that never committed (never sent)
                old.next_batch(c.now, arg)
                old.prepare_acks(list(delivered), c.now)
            old.set_follower()
            c.engine, c.followers = new, [old]
            c.commit(new.set_leader(c.now))
        check(c)
    # drain: every delivered message not settled comes back until max_deliver, then stops
    for _ in range(8):
        c.tick(1)
        for m in c.fetch(100):
            assert m.stream_seq not in settled
            delivered[m.stream_seq] = m.num_delivered
        check(c)
    s = c.engine.state
    assert not s.pending
    for seq, n in delivered.items():
        if seq not in settled:
            assert n == 3, (seq, n)
