from __future__ import annotations

import random

import pytest

from rayjet.raft import Entry, HardState, Message, MessageType, Role
from rayjet.sim.checker import Checker, Violation
from rayjet.sim.disk import Disk
from rayjet.sim.network import Network, NetworkFaults


def test_disk_sync_makes_writes_durable() -> None:
    d = Disk()
    d.write_entries([Entry(1, 1, b"a"), Entry(1, 2, b"b")])
    d.write_hard_state(HardState(1, "x", 2))
    d.sync()
    assert d.durable.last_index() == 2 and d.durable.hard_state.commit == 2


def test_crash_keeps_only_a_prefix_of_unsynced_writes() -> None:
    seen = set()
    for seed in range(40):
        d = Disk()
        d.write_entries([Entry(1, 1, b"a")])
        d.sync()
        d.write_entries([Entry(1, 2, b"b"), Entry(1, 3, b"c")])
        d.write_hard_state(HardState(1, None, 3))
        how = d.crash(random.Random(seed))
        last, commit = d.durable.last_index(), d.durable.hard_state.commit
        # Ordered prefix: the hard state never survives without the entries before it.
        assert last >= 1 and (commit == 0 or last == 3)
        seen.add(how.split()[0])
        assert d.pending == []
    assert {"lost", "torn", "unsynced"} <= seen


def test_disk_replays_truncation_in_order() -> None:
    d = Disk()
    d.write_entries([Entry(1, 1), Entry(1, 2), Entry(1, 3)])
    d.write_entries([Entry(2, 2, b"new")])
    d.sync()
    assert [(e.index, e.term) for e in d.durable.all_entries()] == [(1, 1), (2, 2)]


def test_network_partitions_and_one_way_links() -> None:
    net = Network(random.Random(0))
    net.partition([["a"], ["b", "c"]])
    assert net.is_blocked("a", "b") and net.is_blocked("c", "a")
    assert not net.is_blocked("b", "c")
    net.heal()
    net.block_one_way("a", "b")
    assert net.is_blocked("a", "b") and not net.is_blocked("b", "a")


def test_network_delays_reorders_drops_and_duplicates() -> None:
    net = Network(random.Random(1), NetworkFaults(drop=0.2, duplicate=0.2, max_delay=3))
    for i in range(200):
        net.send(Message(MessageType.HEARTBEAT, "b", "a", term=i), now=0)
    got = []
    for t in range(4):
        got.extend(m.term for m in net.due(t))
    assert net.dropped > 0 and net.duplicated > 0
    assert len(got) == 200 - net.dropped + net.duplicated
    assert got != sorted(got)


class _FakeLog:
    def __init__(self, terms: dict[int, int]) -> None:
        self.terms = terms
        self.committed = max(terms)

    def first_index(self) -> int:
        return min(self.terms)

    def term(self, i: int) -> int:
        return self.terms[i]

    def slice(self, lo: int, hi: int):
        return [Entry(self.terms[i], i, b"d%d" % self.terms[i]) for i in range(lo, hi)]


class _FakeRaft:
    def __init__(self, term: int, terms: dict[int, int]) -> None:
        self.term = term
        self.role = Role.LEADER
        self.log = _FakeLog(terms)


def test_checker_flags_two_leaders_in_one_term() -> None:
    c = Checker()
    c.check_role("a", _FakeRaft(3, {1: 1}))
    with pytest.raises(Violation, match="two leaders"):
        c.check_role("b", _FakeRaft(3, {1: 1}))


def test_checker_flags_a_changed_committed_entry_and_an_incomplete_leader() -> None:
    c = Checker()
    c.on_commit("a", _FakeRaft(2, {1: 1, 2: 2}), 1)
    with pytest.raises(Violation, match="committed entry changed"):
        c.on_commit("b", _FakeRaft(3, {1: 1, 2: 3}), 1)
    with pytest.raises(Violation, match="leader completeness"):
        c.on_leader("b", 3, _FakeRaft(3, {1: 1, 2: 3}))


def test_checker_flags_log_matching_and_stale_reads() -> None:
    c = Checker()
    c.on_new_entries("a", [Entry(2, 5, b"x")], prev_term=1)
    with pytest.raises(Violation, match="log matching"):
        c.on_new_entries("b", [Entry(2, 5, b"y")], prev_term=1)
    with pytest.raises(Violation, match="stale read"):
        c.on_read_state("a", 4, required=5)
