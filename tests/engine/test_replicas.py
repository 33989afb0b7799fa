"""Replicas agree: the same committed ops give the same state on every store; stale ops are
skipped the same way everywhere; snapshots and restarts recover the engine state."""

from __future__ import annotations

import dataclasses

import pytest

from rayjet.api import StreamConfig
from rayjet.clock import ManualClock
from rayjet.engine import MsgOp, StreamEngine, decode_op, encode_op, store_config
from rayjet.errors import APIError
from rayjet.storage import FileStore, MemStore

CFG = dict(name="S", subjects=["s.>"], allow_rollup_hdrs=True, allow_msg_ttl=True,
           allow_msg_counter=False, allow_atomic_publish=True, max_msgs_per_subject=3,
           max_msgs=50)


def _replicas(tmp_path, clock, **over):
    cfg = StreamConfig(**{**CFG, **over})
    mem_cfg = dataclasses.replace(cfg, storage="memory")
    out = [
        StreamEngine(mem_cfg, MemStore(store_config(mem_cfg), clock=clock), clock),
        StreamEngine(cfg, FileStore(str(tmp_path / "f1"), store_config(cfg), clock=clock), clock),
        StreamEngine(cfg, FileStore(str(tmp_path / "f2"), store_config(cfg), clock=clock), clock),
    ]
    return out


def _content(engine):
    store, out, seq = engine.store, [], 0
    while True:
        try:
            m, seq = store.load_next_msg(">", True, seq + 1)
        except Exception:
            break
        out.append((m.seq, m.subject, m.hdr, m.data, m.ts))
    st = store.state()
    return out, (st.msgs, st.bytes, st.first_seq, st.last_seq, st.deleted, st.num_subjects)


def _workload(leader, clock):
    """Leader-side ops of a mixed workload, each encoded and decoded like a raft entry."""
    ops = []
    e = leader

    def prop(op):
        op = decode_op(encode_op(op))
        ops.append(op)
        return op

    for i in range(40):
        clock.advance(0.01)
        hdr = {"Nats-Msg-Id": f"id{i}"} if i % 3 == 0 else None
        prop(e.prepare_publish(f"s.{i % 5}", b"m%d" % i, hdr))
    prop(e.prepare_publish("s.ttl", b"", {"Nats-TTL": "5s"}))
    prop(e.prepare_publish("s.1", b"roll", {"Nats-Rollup": "sub"}))
    batch = prop(e.prepare_batch([("s.b", b"1"), ("s.b", b"2", {"X": "y"})], "batch"))
    prop(e.prepare_skip(2))
    prop(e.prepare_purge(subject="s.2", keep=1))
    prop(e.prepare_delete(batch.msgs[0].seq))
    prop(e.prepare_update(dataclasses.replace(e.config, max_msgs=20)))
    for i in range(10):
        prop(e.prepare_publish("s.after", b"%d" % i))
    return ops


def test_replicas_agree(tmp_path):
    clock = ManualClock()
    engines = _replicas(tmp_path, clock)
    leader = engines[0]
    leader.set_leader(1)
    ops = _workload(leader, clock)
    # the leader applies one by one, the followers in commit-sized chunks
    results = [leader.apply(op) for op in ops]
    assert all(r.ok for r in results)
    engines[1].apply_batch(ops)
    for i in range(0, len(ops), 7):
        engines[2].apply_batch(ops[i:i + 7])
    clock.advance(10)
    for e in engines:
        e.expire()
    first = _content(engines[0])
    assert first[1][0] > 0
    for e in engines[1:]:
        assert _content(e) == first
        assert e.snapshot() == engines[0].snapshot()


def test_stale_ops_are_skipped_identically(tmp_path):
    clock = ManualClock()
    engines = _replicas(tmp_path, clock)
    old, new = engines[0], engines[1]
    old.set_leader(1)
    stale = [old.prepare_publish("s.a", b"old%d" % i) for i in range(3)]
    # a new leader (same applied state) proposes first; its entries commit before the old ones
    new.set_leader(2)
    fresh = [new.prepare_publish("s.a", b"new%d" % i) for i in range(2)]
    log = [fresh[0], stale[0], stale[1], fresh[1], stale[2]]
    results = [e.apply_batch(log) for e in engines]
    for res in results:
        assert [r.ok for r in res] == [True, False, False, True, False]
        assert {r.error.err_code for r in res if not r.ok} == {10063}
    contents = [_content(e) for e in engines]
    assert contents[0] == contents[1] == contents[2]
    assert [m[3] for m in contents[0][0]] == [b"new0", b"new1"]


def test_a_later_op_of_a_rejected_proposer_is_skipped_even_if_its_seq_fits(tmp_path):
    clock = ManualClock()
    engines = _replicas(tmp_path, clock)
    old, new = engines[0], engines[1]
    old.set_leader(1)
    a1 = old.prepare_publish("s.a", b"a1", {"Nats-Expected-Last-Sequence": "0"})
    a2 = old.prepare_publish("s.a", b"a2", {"Nats-Expected-Last-Sequence": "1"})
    new.set_leader(2)
    b1 = new.prepare_publish("s.a", b"b1")
    # b1 takes seq 1; a1 is stale; a2 (seq 2) fits but was checked against a1: skip it too
    for e in engines:
        assert [r.ok for r in e.apply_batch([b1, a1, a2])] == [True, False, False]
    assert [m[3] for m in _content(engines[2])[0]] == [b"b1"]


def test_leader_resyncs_after_its_own_op_is_rejected(tmp_path):
    clock = ManualClock()
    leader, other = _replicas(tmp_path, clock)[:2]
    leader.set_leader(1)
    mine = leader.prepare_publish("s.a", b"mine")
    foreign = MsgOp(1, clock.now_ns(), "s.a", data=b"foreign", pid=99)
    assert leader.apply(foreign).ok
    assert not leader.apply(mine).ok
    again = leader.prepare_publish("s.a", b"mine")
    assert again.seq == 2 and again.pid != mine.pid
    assert leader.apply(again).ok


def test_snapshot_restores_engine_state(tmp_path):
    clock = ManualClock()
    a, b = _replicas(tmp_path, clock)[:2]
    a.set_leader(1)
    a.register_consumer("C", ["s.a"])
    for op in _workload(a, clock):
        a.apply(op)
    b.store.restore(a.store.snapshot())
    b.restore(a.snapshot())
    assert b.snapshot() == a.snapshot()
    assert _content(b) == _content(a)
    b.set_leader(2)
    assert b.prepare_publish("s.x", b"", {"Nats-Msg-Id": "id39"}).duplicate


def test_restart_rebuilds_dedup_from_the_store(tmp_path, clock):
    cfg = StreamConfig(**{**CFG, "duplicate_window": 60.0})
    e = StreamEngine(cfg, FileStore(str(tmp_path / "r"), store_config(cfg), clock=clock), clock)
    e.set_leader(1)
    e.apply(e.prepare_publish("s.a", b"", {"Nats-Msg-Id": "old"}))
    clock.advance(100)
    e.apply(e.prepare_publish("s.a", b"", {"Nats-Msg-Id": "recent"}))
    e.store.close()
    clock.advance(1)
    e2 = StreamEngine(cfg, FileStore(str(tmp_path / "r"), store_config(cfg), clock=clock), clock)
    e2.set_leader(2)
    assert e2.last_seq == 2
    assert e2.prepare_publish("s.a", b"", {"Nats-Msg-Id": "recent"}).duplicate
    assert e2.prepare_publish("s.a", b"", {"Nats-Msg-Id": "old"}).seq == 3
    assert e2.pending.last_msg_id == "old"


class _BatchingStore(MemStore):
    """A MemStore with the raw batch write apply_batch uses when a store offers it."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.batches = 0

    def store_raw_batch(self, items):
        self.batches += 1
        for subject, hdr, data, seq, ts, ttl in items:
            self.store_raw(subject, hdr, data, seq, ts, ttl)


def test_apply_batch_writes_runs_in_one_call_and_agrees(tmp_path):
    clock = ManualClock()
    cfg = StreamConfig(**{**CFG, "storage": "memory"})
    plain = StreamEngine(cfg, MemStore(store_config(cfg), clock=clock), clock)
    batching = StreamEngine(cfg, _BatchingStore(store_config(cfg), clock=clock), clock)
    plain.set_leader(1)
    ops = _workload(plain, clock)
    for op in ops:
        assert plain.apply(op).ok
    res = batching.apply_batch(ops)
    assert all(r.ok for r in res) and len(res) == len(ops)
    assert batching.store.batches < len(ops) / 4
    assert _content(batching) == _content(plain)
    assert batching.snapshot() == plain.snapshot()


def test_a_restarted_projection_never_reuses_a_refused_proposer_id(tmp_path):
    """After a dropped proposal the leader projects again; were its new ops to carry the
    id of ops refused before, every publish after would be refused as stale too."""
    clock = ManualClock()
    leader = _replicas(tmp_path, clock)[0]
    leader.set_leader(1)
    first = leader.prepare_publish("s.a", b"first")
    foreign = MsgOp(1, clock.now_ns(), "s.a", data=b"foreign", pid=99)
    assert leader.apply(foreign).ok
    assert not leader.apply(first).ok  # refused: first.pid is marked stale
    dropped = leader.prepare_publish("s.a", b"dropped")  # raft drops this proposal
    leader.restart_projection()
    again = leader.prepare_publish("s.a", b"again")
    assert len({first.pid, dropped.pid, again.pid}) == 3
    assert again.seq == 2 and leader.apply(again).ok
    follower = _replicas(tmp_path / "f", clock)[0]
    with pytest.raises(APIError):
        follower.restart_projection()  # only a leader projects
