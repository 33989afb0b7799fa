"""apply_batch through the stores' own store_raw_batch agrees with apply, op by op."""

from __future__ import annotations

import dataclasses

from rayjet.api import StreamConfig
from rayjet.api.headers import decode_headers
from rayjet.api.stream import RePublish
from rayjet.clock import ManualClock
from rayjet.engine import StreamEngine, store_config
from rayjet.storage import FileStore, MemStore
from tests.engine.test_replicas import CFG, _content, _workload


def _engine(cfg, kind, tmp_path, clock, name):
    if kind == "memory":
        cfg = dataclasses.replace(cfg, storage="memory")
        return StreamEngine(cfg, MemStore(store_config(cfg), clock=clock), clock)
    return StreamEngine(cfg, FileStore(str(tmp_path / name), store_config(cfg), clock=clock),
                        clock)


def _results(res):
    return [(r.ok, r.seq, r.value, r.val, r.count, r.error and r.error.err_code,
             [(p.subject, p.hdr, p.data) for p in r.republish]) for r in res]


def test_apply_batch_agrees_with_apply_on_both_stores(tmp_path):
    for kind in ("memory", "file"):
        clock = ManualClock()
        cfg = StreamConfig(**{**CFG, "duplicate_window": 60.0})
        leader = _engine(cfg, kind, tmp_path, clock, f"{kind}-l")
        leader.set_leader(1)
        ops = _workload(leader, clock)
        one = _engine(cfg, kind, tmp_path, clock, f"{kind}-1")
        batched = _engine(cfg, kind, tmp_path, clock, f"{kind}-b")
        singles = [one.apply(op) for op in ops]
        res = batched.apply_batch(ops)
        assert _results(res) == _results(singles)
        assert _content(batched) == _content(one)
        assert batched.snapshot() == one.snapshot()


def test_leader_apply_batch_republishes_like_apply(tmp_path):
    clock = ManualClock()
    cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory", max_msgs=4,
                       republish=RePublish(src="s.>", dest="rp.>"))
    a = _engine(cfg, "memory", tmp_path, clock, "a")
    b = _engine(cfg, "memory", tmp_path, clock, "b")
    for e in (a, b):
        e.set_leader(1)
    subjects = ["s.x", "s.y", "s.x", "s.x", "s.z", "s.y", "s.x"]
    one = [a.apply(a.prepare_publish(s, b"%d" % i)) for i, s in enumerate(subjects)]
    run = [b.prepare_publish(s, b"%d" % i) for i, s in enumerate(subjects)]
    res = b.apply_batch(run)
    assert _results(res) == _results(one)
    lasts = [decode_headers(r.republish[0].hdr)["Nats-Last-Sequence"] for r in res]
    # the subject's last seq before each message was stored, as nats-server reports it
    assert lasts == ["0", "0", "1", "3", "0", "2", "4"]
    assert len(b.pending) == 0


def test_expected_last_subject_sequence_uses_the_store(tmp_path):
    clock = ManualClock()
    cfg = StreamConfig(name="S", subjects=["s.>"], storage="memory")
    e = _engine(cfg, "memory", tmp_path, clock, "e")
    e.set_leader(1)
    e.apply_batch([e.prepare_publish("s.a", b"1"), e.prepare_publish("s.b", b"2")])
    assert e.store.last_seq_for_subject("s.a") == 1
    op = e.prepare_publish("s.a", b"3", {"Nats-Expected-Last-Subject-Sequence": "1"})
    assert e.apply(op).seq == 3
    op = e.prepare_publish("s.c", b"", {"Nats-Expected-Last-Subject-Sequence": "0"})
    assert e.apply(op).seq == 4
