"""Stream replicas in-process: engine + store + raft driver, with restarts and catch-up."""

from __future__ import annotations

from rayjet.api import StorageType, StreamConfig
from rayjet.clock import ManualClock
from rayjet.engine import store_config
from rayjet.replication import FileLogStorage, GroupOptions, MemoryLog, ReplicaGroup
from rayjet.replication.stream_machine import StreamMachine, decode_entry, encode_entry
from rayjet.storage import FileStore, MemStore
from tests.replication.test_group import Net

CFG = StreamConfig(name="ORDERS", subjects=["orders.*"])


def make_replica(name, names, tmp_path=None, clock=None, **opts):
    clock = clock or ManualClock()
    if tmp_path is None:
        store, log = MemStore(store_config(CFG, storage=StorageType.MEMORY), clock=clock), MemoryLog()
    else:
        store = FileStore(str(tmp_path / name / "store"), store_config(CFG), clock=clock)
        log = FileLogStorage(tmp_path / name / "raft")
    return ReplicaGroup(name, log, StreamMachine(CFG, store, clock), voters=names,
                        options=GroupOptions(**opts))


def leader_publish(net, leader, msgs):
    engine = leader.sm.engine
    if not engine.is_leader:
        engine.set_leader(leader.term)
    ops = [engine.prepare_publish(s, d) for s, d in msgs]
    index, _ = leader.propose(encode_entry(ops))
    net.run()
    results = {a.index: a.result for out in net.outputs[leader.id] for a in out.applied}
    return [r.ack.seq for r in results[index]]


def contents(group):
    store = group.sm.store
    st = store.state()
    return [(m.seq, m.subject, m.data) for m in
            (store.load_msg(s) for s in range(st.first_seq, st.last_seq + 1))]


def test_entry_codec_round_trip():
    clock = ManualClock()
    eng = StreamMachine(CFG, MemStore(store_config(CFG, storage=StorageType.MEMORY), clock=clock), clock).engine
    eng.set_leader(1)
    ops = [eng.prepare_publish("orders.new", b"a"), eng.prepare_purge()]
    assert decode_entry(encode_entry(ops)) == ops


def test_replicas_store_the_same_messages():
    names = ["a", "b", "c"]
    net = Net({n: make_replica(n, names) for n in names})
    leader = net.elect()
    seqs = leader_publish(net, leader, [("orders.new", b"%d" % i) for i in range(50)])
    assert seqs == list(range(1, 51))
    expected = contents(leader)
    assert len(expected) == 50
    for g in net.groups.values():
        assert contents(g) == expected


def test_restart_rolls_back_the_store_and_replays_exactly(tmp_path):
    names = ["a", "b", "c"]
    build = lambda: Net({n: make_replica(n, names, tmp_path, sync_always=True,  # noqa: E731
                                          snapshot_every=3) for n in names})
    net = build()
    leader = net.elect()
    for i in range(10):
        leader_publish(net, leader, [("orders.new", b"m%d" % i)])
    before = contents(leader)
    for g in net.groups.values():
        g.sm.store.close()
        g.storage.close()
    net = build()
    leader = net.elect()
    leader_publish(net, leader, [("orders.new", b"after")])
    for g in net.groups.values():
        assert contents(g) == before + [(11, "orders.new", b"after")]


def test_lagging_replica_catches_up_from_the_leaders_full_state():
    names = ["a", "b", "c"]
    net = Net({n: make_replica(n, names, snapshot_every=2) for n in names})
    leader = net.elect()
    lagger = next(n for n in names if n != leader.id)
    net.down.add(lagger)
    for i in range(12):
        leader_publish(net, leader, [("orders.new", b"m%d" % i)])
    net.down.discard(lagger)
    net.tick(5)
    assert contents(net.groups[lagger]) == contents(leader)
    leader_publish(net, leader, [("orders.x", b"next")])
    assert contents(net.groups[lagger])[-1] == (13, "orders.x", b"next")


def test_follower_that_installed_a_snapshot_restarts(tmp_path):
    """A follower behind the compaction point installs the leader's snapshot (state only)
    and copies the store; killed and restarted over its own directories it comes back with
    every message, and copies again when its store directory or whole disk was lost."""
    import shutil

    names = ["a", "b", "c"]
    opts = {"snapshot_every": 5, "sync_always": True}
    net = Net({n: make_replica(n, names, tmp_path, **opts) for n in names})
    leader = net.elect()
    lagger = next(n for n in names if n != leader.id)
    net.down.add(lagger)
    for i in range(4):
        leader_publish(net, leader, [("orders.new", b"%d-%d" % (i, j)) for j in range(5)])
    assert leader.storage.first_index() > 2  # compacted past what the lagger has
    net.down.discard(lagger)
    net.tick(5)
    expected = contents(leader)
    assert len(expected) == 20 and contents(net.groups[lagger]) == expected

    for lost in ("nothing", "store", "everything"):
        old = net.groups[lagger]
        old.storage.close()
        old.sm.store.close()
        if lost == "store":
            shutil.rmtree(tmp_path / lagger / "store")
        if lost == "everything":  # a replaced disk: the leader's snapshot brings it back
            shutil.rmtree(tmp_path / lagger)
        restarted = make_replica(lagger, names, tmp_path, **opts)
        net.groups[lagger] = restarted
        if lost == "nothing":
            assert contents(restarted) == expected
        else:  # a copy from the leader brings the store back; an idle group learns of a
            # replaced disk from heartbeats alone
            assert restarted.copying == (lost == "store")
            net.tick(5)
            assert not restarted.copying
            assert contents(restarted) == contents(leader)
        leader_publish(net, leader, [("orders.new", b"after-" + lost.encode())])
        net.tick(5)
        assert contents(net.groups[lagger]) == contents(leader)
