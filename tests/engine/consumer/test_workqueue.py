"""Work-queue and interest streams: each message to one worker, removed once acked."""

from __future__ import annotations

import random

from rayjet.api import ConsumerConfig
from rayjet.engine.consumer.engine import ConsumerEngine
from rayjet.engine.consumer.reader import StoreReader
from rayjet.engine.consumer.types import PullRequest
from tests.engine.conftest import Harness


def _setup(clock, retention: str, names=("WORK",)):
    h = Harness(clock, name="JOBS", subjects=["jobs.>"], retention=retention)
    engines = {}
    for name in names:
        h.apply(h.engine.prepare_consumer(name, (), 1))
        e = ConsumerEngine(ConsumerConfig(durable_name=name, ack_wait=5.0), h.config,
                           StoreReader(h.store), clock, rng=random.Random(0))
        for op in e.set_leader(clock.now_ns()):
            e.apply(op)
        engines[name] = e
    return h, engines


def _commit(h, e, name, ops):
    removed = 0
    for op in ops:
        for seq in e.apply(op).acked:  # forwarded to the stream after the consumer commits
            removed += bool(h.apply(h.engine.prepare_ack(name, seq)).value)
    return removed


def test_ten_workers_get_distinct_messages_and_the_stream_ends_empty(clock):
    h, engines = _setup(clock, "workqueue")
    e = engines["WORK"]
    for i in range(100):
        h.pub(f"jobs.{i % 7}", f"job {i}".encode())
    now = clock.now_ns()
    held: dict[str, list[int]] = {f"w{w}": [] for w in range(10)}
    seen: list[int] = []
    for _ in range(5):
        for w in held:
            out = e.prepare_acks(held[w], now)  # ack what this worker got, then ask again
            _commit(h, e, "WORK", [out.op] if out.op is not None else [])
            held[w] = []
            b = e.request(PullRequest(reply=w, batch=3, expires=30.0), now)
            _commit(h, e, "WORK", b.ops)
            for reply, m in b.deliveries:
                held[reply].append(m.stream_seq)
                seen.append(m.stream_seq)
    for w in held:
        out = e.prepare_acks(held[w], now)
        _commit(h, e, "WORK", [out.op] if out.op is not None else [])
    assert sorted(seen) == list(range(1, 101))  # every job once, to one worker
    st = h.store.state()
    assert st.msgs == 0 and st.last_seq == 100
    i = e.info(now)
    assert (i.num_ack_pending, i.num_pending, i.ack_floor.stream_seq) == (0, 0, 100)


def test_waiting_workers_share_a_burst(clock):
    h, engines = _setup(clock, "workqueue")
    e = engines["WORK"]
    now = clock.now_ns()
    for w in range(10):
        b = e.request(PullRequest(reply=f"w{w}", batch=10, expires=60.0), now)
        assert b.deliveries == []
    for i in range(50):
        h.pub("jobs.x", str(i).encode())
    b = e.serve(now)
    _commit(h, e, "WORK", b.ops)
    per: dict[str, list[int]] = {}
    for reply, m in b.deliveries:
        per.setdefault(reply, []).append(m.stream_seq)
    assert len(per) == 10 and all(len(v) == 5 for v in per.values())
    assert sorted(s for v in per.values() for s in v) == list(range(1, 51))
    assert h.store.state().msgs == 50  # nothing removed before an ack
    assert e.info(now).num_ack_pending == 50


def test_interest_stream_removes_when_every_consumer_acked(clock):
    h, engines = _setup(clock, "interest", names=("A", "B"))
    h.pub("jobs.1", b"x")
    now = clock.now_ns()
    for name, e in engines.items():
        _commit(h, e, name, e.next_batch(now, 1).ops)
    a, b = engines["A"], engines["B"]
    assert _commit(h, a, "A", [a.prepare_ack(1, now).op]) == 0
    assert h.store.state().msgs == 1
    assert _commit(h, b, "B", [b.prepare_ack(1, now).op]) == 1
    assert h.store.state().msgs == 0


def test_ack_none_on_interest_stream_releases_on_delivery(clock):
    h = Harness(clock, name="JOBS", subjects=["jobs.>"], retention="interest")
    h.apply(h.engine.prepare_consumer("N", (), 1))
    e = ConsumerEngine(ConsumerConfig(durable_name="N", ack_policy="none"), h.config,
                       StoreReader(h.store), clock)
    for op in e.set_leader():
        e.apply(op)
    h.pub("jobs.1")
    h.pub("jobs.2")
    assert _commit(h, e, "N", e.next_batch(clock.now_ns(), 5).ops) == 2
    assert h.store.state().msgs == 0
