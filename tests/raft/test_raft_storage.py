from __future__ import annotations

import pytest

from rayjet.raft import (
    CompactedError,
    ConfState,
    Entry,
    HardState,
    MemoryLogStorage,
    RaftError,
    Snapshot,
    SnapshotMeta,
    SnapshotOutOfDateError,
    UnavailableError,
    bootstrap,
)
from rayjet.raft.log import RaftLog


def ents(pairs):
    return [Entry(term=t, index=i, data=b"x%d" % i) for i, t in pairs]


def test_memory_storage_append_truncates_conflicting_tail() -> None:
    st = MemoryLogStorage()
    st.append(ents([(1, 1), (2, 1), (3, 1)]))
    st.append(ents([(2, 2), (3, 2), (4, 2)]))
    assert [(e.index, e.term) for e in st.all_entries()] == [(1, 1), (2, 2), (3, 2), (4, 2)]
    with pytest.raises(RaftError):
        st.append(ents([(9, 3)]))  # a gap


def test_memory_storage_bounds_and_byte_limit() -> None:
    st = MemoryLogStorage()
    st.append(ents([(i, 1) for i in range(1, 11)]))
    assert (st.first_index(), st.last_index()) == (1, 10)
    assert len(st.entries(1, 11)) == 10
    # Never fewer than one entry, even when the first alone is over the limit.
    assert len(st.entries(1, 11, max_bytes=1)) == 1
    assert len(st.entries(1, 11, max_bytes=2 * (2 + 16))) == 2
    with pytest.raises(UnavailableError):
        st.entries(5, 12)
    with pytest.raises(UnavailableError):
        st.term(11)


def test_compaction_needs_a_snapshot_and_keeps_the_boundary_term() -> None:
    st = MemoryLogStorage()
    st.append(ents([(i, 1 + i // 5) for i in range(1, 11)]))
    with pytest.raises(RaftError):
        st.compact(5)
    snap = st.create_snapshot(6, ConfState(("a",)), b"state")
    assert (snap.index, snap.term) == (6, 2)
    st.compact(5)
    assert st.first_index() == 6
    assert st.term(5) == 2  # still answers for first_index - 1
    with pytest.raises(CompactedError):
        st.term(4)
    with pytest.raises(CompactedError):
        st.entries(5, 7)
    with pytest.raises(SnapshotOutOfDateError):
        st.create_snapshot(5, ConfState(("a",)), b"older")
    again = st.create_snapshot(6, ConfState(("a",)), b"again")  # the same state, re-cut
    assert (again.index, again.term, again.data) == (6, 2, b"again")
    assert st.snapshot() is again and st.first_index() == 6


def test_apply_snapshot_replaces_the_log() -> None:
    st = MemoryLogStorage()
    st.append(ents([(1, 1), (2, 1)]))
    st.apply_snapshot(Snapshot(SnapshotMeta(50, 3, ConfState(("a", "b"))), b"s"))
    assert (st.first_index(), st.last_index(), st.term(50)) == (51, 50, 3)
    assert st.initial_state()[1].voters == ("a", "b")
    assert st.hard_state.commit == 50


def test_bootstrap_puts_the_membership_in_a_snapshot() -> None:
    st = MemoryLogStorage()
    bootstrap(st, ["a", "b", "c"])
    hs, cs = st.initial_state()
    assert hs == HardState(term=1, vote=None, commit=1)
    assert cs.voters == ("a", "b", "c")
    assert st.first_index() == 2


def test_raft_log_unstable_tail_and_conflicts() -> None:
    st = MemoryLogStorage()
    st.append(ents([(1, 1), (2, 1), (3, 1)]))
    log = RaftLog(st)
    assert log.last_index() == 3
    # Follower gets entries 3..5 of term 2 after 2@1: entry 3 conflicts and is replaced.
    last = log.maybe_append(2, 1, 0, ents([(3, 2), (4, 2), (5, 2)]))
    assert last == 5
    assert [e.index for e in log.unstable_entries()] == [3, 4, 5]
    assert log.term(3) == 2 and log.term(2) == 1
    # A mismatching previous entry is refused.
    assert log.maybe_append(5, 1, 0, []) is None
    # Hint for a rejection: the largest index <= 5 whose term is <= 1.
    assert log.find_conflict_by_term(5, 1) == (2, 1)
    log.stable_to(5, 2)
    assert log.unstable_entries() == []


def test_raft_log_refuses_to_rewrite_committed_entries() -> None:
    st = MemoryLogStorage()
    st.append(ents([(1, 1), (2, 1)]))
    log = RaftLog(st)
    log.commit_to(2)
    with pytest.raises(RaftError):
        log.maybe_append(1, 1, 2, ents([(2, 5)]))


def test_raft_log_slices_across_storage_and_unstable_with_a_byte_limit() -> None:
    st = MemoryLogStorage()
    st.append(ents([(i, 1) for i in range(1, 6)]))
    log = RaftLog(st)
    log.append(ents([(i, 1) for i in range(6, 11)]))
    assert [e.index for e in log.slice(3, 9)] == [3, 4, 5, 6, 7, 8]
    one = ents([(1, 1)])[0].size()
    assert [e.index for e in log.slice(3, 9, max_bytes=4 * one)] == [3, 4, 5, 6]
    assert [e.index for e in log.slice(4, 9, max_bytes=1)] == [4]


def test_large_appends_are_linear() -> None:
    # 200k entries appended in batches of 1000 through the log and storage: a quadratic
    # implementation would take minutes; this must finish in well under a second or two.
    st = MemoryLogStorage()
    log = RaftLog(st)
    n = 0
    for _ in range(200):
        batch = [Entry(1, n + i + 1, b"p") for i in range(1000)]
        n += 1000
        log.append(batch)
        st.append(log.unstable_entries())
        log.stable_to(n, 1)
    assert st.last_index() == n and log.last_index() == n
    assert len(log.entries(n - 2500)) == 2501
