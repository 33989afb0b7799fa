"""ReplicaGroup driven in-process: three replicas, an in-memory network, a list machine."""

from __future__ import annotations

import msgpack
import pytest

from rayjet.errors import BadRequestError
from rayjet.raft import (
    ConfChange,
    ConfChangeType,
    Entry,
    Message,
    MessageType,
    ProposalDroppedError,
    Role,
)
from rayjet.replication import FileLogStorage, GroupOptions, MemoryLog, ReplicaGroup


class ListMachine:
    """Appends values; like a stream store, its durable state may run ahead of a snapshot."""

    def __init__(self, durable=None):
        self.items: list[tuple[int, bytes]] = durable if durable is not None else []
        self.synced = 0
        self.restores = []
        self.fail_with: Exception | None = None  # this replica's disk failing

    def apply(self, index, data):
        assert not self.items or index > self.items[-1][0], "replay must be exact"
        if data == b"boom":
            raise BadRequestError("refused")
        if self.fail_with is not None:
            raise self.fail_with
        self.items.append((index, data))
        return len(self.items)

    def snapshot(self):
        return msgpack.packb(self.items[-1][0] if self.items else 0)

    def full_snapshot(self):
        return msgpack.packb([list(x) for x in self.items])

    def restore(self, data, *, full):
        self.restores.append(full)
        if full:
            self.items = [tuple(x) for x in msgpack.unpackb(data)]
        else:  # roll durable state back to the snapshot point
            upto = msgpack.unpackb(data) if data else 0
            self.items[:] = [x for x in self.items if x[0] <= upto]

    def sync(self):
        self.synced += 1


class Net:
    def __init__(self, groups):
        self.groups = groups
        self.down: set[str] = set()
        self.outputs = {n: [] for n in groups}
        self.auto_copy = True  # replicas copying a store do it at once (see ``copy``)

    def run(self, rounds=50):
        for _ in range(rounds):
            moved = False
            for name, g in list(self.groups.items()):
                if name in self.down:
                    continue
                out = g.process()
                if g.copying and self.auto_copy:
                    out.applied += self.copy(g)
                self.outputs[name].append(out)
                for peer in out.snapshots_sent:
                    g.report_snapshot(peer, True)
                for m in out.messages:
                    if m.to in self.down or m.to not in self.groups:
                        continue
                    self.groups[m.to].step([m])
                    moved = True
            if not moved:
                return

    def copy(self, copier, chunk_bytes=256):
        """What a replica actor does after installing a state-only snapshot, in one go:
        copy the store from the leader in chunks, then its seal."""
        from rayjet.replication.stream_machine import StoreCopy

        source = self.leader()
        if source is None or source is copier:
            return []
        client = StoreCopy(copier.sm, chunk_bytes)
        while True:
            kind, arg = client.next_request()
            if kind == "chunk":
                client.on_chunk(*source.sm.copy_chunk(arg, chunk_bytes))
            elif client.on_seal(source.sm.copy_seal(arg)):
                return copier.finish_copy(source.applied)

    def tick(self, n=1):
        for _ in range(n):
            for name, g in self.groups.items():
                if name not in self.down:
                    g.tick()
            self.run()

    def leader(self):
        leaders = [g for n, g in self.groups.items() if n not in self.down and g.is_leader]
        return leaders[0] if len(leaders) == 1 else None

    def elect(self):
        for _ in range(100):
            if self.leader():
                return self.leader()
            self.tick()
        raise AssertionError("no leader elected")


def make(names, storage=MemoryLog, **opts):
    groups = {n: ReplicaGroup(n, storage(), ListMachine(), voters=names,
                              options=GroupOptions(**opts)) for n in names}
    return Net(groups)


def applied_results(net, name):
    return {a.index: a for out in net.outputs[name] for a in out.applied}


def test_elects_replicates_and_answers_the_proposer():
    net = make(["a", "b", "c"])
    leader = net.elect()
    index, term = leader.propose(b"x")
    net.run()
    for g in net.groups.values():
        assert [d for _, d in g.sm.items] == [b"x"]
    answer = applied_results(net, leader.id)[index]
    assert (answer.term, answer.result) == (term, 1)


def test_state_machine_errors_reach_the_proposer_and_replicas_agree():
    net = make(["a", "b", "c"])
    leader = net.elect()
    index, _ = leader.propose(b"boom")
    net.run()
    assert isinstance(applied_results(net, leader.id)[index].result, BadRequestError)
    assert all(g.sm.items == [] for g in net.groups.values())


def test_followers_refuse_proposals_with_a_leader_hint():
    net = make(["a", "b", "c"])
    leader = net.elect()
    follower = next(g for g in net.groups.values() if g is not leader)
    with pytest.raises(ProposalDroppedError):
        follower.propose(b"x")
    assert follower.leader == leader.id


def test_leader_loss_elects_another_and_committed_data_stays():
    net = make(["a", "b", "c"])
    leader = net.elect()
    for i in range(5):
        leader.propose(b"v%d" % i)
    net.run()
    net.down.add(leader.id)
    new = net.elect()
    assert new.id != leader.id and new.role == Role.LEADER
    new.propose(b"after")
    net.run()
    for name, g in net.groups.items():
        if name != leader.id:
            assert [d for _, d in g.sm.items] == [b"v0", b"v1", b"v2", b"v3", b"v4", b"after"]


def test_restart_from_disk_replays_without_duplicates(tmp_path):
    names = ["a", "b", "c"]
    net = Net({n: ReplicaGroup(n, FileLogStorage(tmp_path / n), ListMachine(), voters=names,
                               options=GroupOptions(sync_always=True)) for n in names})
    leader = net.elect()
    for i in range(10):
        leader.propose(b"v%d" % i)
    net.run()
    # "crash" everyone: new objects over the same directories; each machine keeps its
    # durable items, which run ahead of the (absent) snapshot and are rolled back to it
    kept = {}
    for n in names:
        net.groups[n].storage.close()
        kept[n] = list(net.groups[n].sm.items)
    net = Net({n: ReplicaGroup(n, FileLogStorage(tmp_path / n), ListMachine(kept[n]),
                               options=GroupOptions(sync_always=True)) for n in names})
    assert all(net.groups[n].sm.restores == [False] for n in names)
    leader = net.elect()
    leader.propose(b"more")
    net.run()
    for g in net.groups.values():
        assert [d for _, d in g.sm.items] == [b"v%d" % i for i in range(10)] + [b"more"]


def test_lagging_follower_catches_up_from_a_snapshot():
    net = make(["a", "b", "c"], snapshot_every=5)
    leader = net.elect()
    lagger = next(n for n in net.groups if n != leader.id)
    net.down.add(lagger)
    for i in range(20):
        leader.propose(b"v%d" % i)
        net.run()
    assert leader.storage.first_index() > 2  # the log was compacted past what lagger has
    assert leader.sm.synced > 0  # compaction made the machine durable first
    net.down.discard(lagger)
    net.tick(5)
    assert [d for _, d in net.groups[lagger].sm.items] == [b"v%d" % i for i in range(20)]
    assert True in net.groups[lagger].sm.restores  # it got the leader's full state
    leader.propose(b"after")
    net.run()
    assert net.groups[lagger].sm.items[-1][1] == b"after"


def test_membership_change_adds_a_replica_that_catches_up():
    net = make(["a", "b", "c"])
    leader = net.elect()
    for i in range(3):
        leader.propose(b"v%d" % i)
    net.run()
    net.groups["d"] = ReplicaGroup("d", MemoryLog(), ListMachine(), voters=["a", "b", "c"])
    net.outputs["d"] = []
    leader.propose_conf_change(ConfChange(ConfChangeType.ADD_VOTER, "d"))
    net.run()
    net.tick(3)
    assert set(leader.conf_state.voters) == {"a", "b", "c", "d"}
    assert [d for _, d in net.groups["d"].sm.items] == [b"v0", b"v1", b"v2"]


def test_restart_after_compaction_rolls_back_to_the_snapshot_and_replays(tmp_path):
    names = ["a", "b", "c"]

    def build(kept=None):
        return Net({n: ReplicaGroup(n, FileLogStorage(tmp_path / n),
                                    ListMachine(None if kept is None else kept[n]), voters=names,
                                    options=GroupOptions(sync_always=True, snapshot_every=4))
                    for n in names})

    net = build()
    leader = net.elect()
    for i in range(11):
        leader.propose(b"v%d" % i)
        net.run()
    assert all(g.snapshot_index > 0 for g in net.groups.values())
    kept = {}
    for n, g in net.groups.items():
        g.storage.close()
        kept[n] = list(g.sm.items)
    net = build(kept)
    net.elect().propose(b"more")
    net.run()
    for g in net.groups.values():
        assert [d for _, d in g.sm.items] == [b"v%d" % i for i in range(11)] + [b"more"]


class SyncRecordingLog(MemoryLog):
    """A memory log that remembers the hard state each fsync made durable."""

    def __init__(self):
        super().__init__()
        self.durable_term = 0

    def sync(self):
        self.durable_term = self.initial_state()[0].term


def test_a_new_term_that_arrives_with_entries_is_fsynced():
    """A follower that learns a new term from an append carrying entries (one Ready with
    both) makes the term durable before it answers, even without sync_always: otherwise a
    crash could let it vote a second time in that term."""
    net = make(["a", "b", "c"], storage=SyncRecordingLog)
    leader = net.elect()
    follower = net.groups[next(n for n in net.groups if n != leader.id)]
    term, last = follower.term, follower.storage.last_index()
    append = Message(MessageType.APP, to=follower.id, frm="c", term=term + 1, log_term=term,
                     index=last, entries=[Entry(term + 1, last + 1, b"x")], commit=last)
    follower.step([append])
    out = follower.process()
    assert follower.term == term + 1 and follower.storage.last_index() == last + 1
    assert any(m.type == MessageType.APP_RESP and not m.reject for m in out.messages)
    assert follower.storage.durable_term == term + 1


def test_the_log_is_compacted_by_bytes_as_well_as_entries():
    """Few but large entries still compact: the log's memory is bounded by bytes."""
    net = make(["a", "b", "c"], snapshot_every=1000, snapshot_bytes=10_000)
    leader = net.elect()
    for i in range(12):
        leader.propose(b"%02d" % i + b"." * 2_000)
        net.run()
    for g in net.groups.values():
        assert g.storage.first_index() > 5  # compacted long before 1000 entries
        kept = sum(len(e.data) for e in g.storage.entries(g.storage.first_index(),
                                                           g.storage.last_index() + 1))
        assert kept < 10_000 + 2_100
        assert [d[:2] for _, d in g.sm.items] == [b"%02d" % i for i in range(12)]
