"""plan_move: one raft membership change per step, never below the smaller group size."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayjet.api import Placement
from rayjet.placement import ADD, REMOVE, ServerInfo, plan_move, plan_update, quorum


def ft(size):
    return size - quorum(size)


def sizes(current, steps):
    return [len(current)] + [len(s.members) for s in steps]


def test_scale_up_r1_r3_r5_and_back():
    up = plan_move(["a"], ["a", "b", "c"])
    assert [(s.op, s.peer) for s in up] == [(ADD, "b"), (ADD, "c")]
    assert up[-1].members == ("a", "b", "c")
    up5 = plan_move(["a", "b", "c"], ["a", "b", "c", "d", "e"])
    assert [s.peer for s in up5] == ["d", "e"]
    down = plan_move(["a", "b", "c", "d", "e"], ["a", "b", "c"], leader="a")
    assert [(s.op, s.peer) for s in down] == [(REMOVE, "d"), (REMOVE, "e")]
    assert plan_move(["a", "b", "c"], ["a"])[-1].members == ("a",)


def test_move_adds_before_removing_and_leader_goes_last():
    steps = plan_move(["a", "b", "c"], ["d", "e", "f"], leader="a")
    assert [str(s)[0] for s in steps] == ["+", "-", "+", "-", "+", "-"]
    assert steps[-1].peer == "a" and steps[-1].stepdown
    assert not any(s.stepdown for s in steps[:-1])
    assert sizes(["a", "b", "c"], steps) == [3, 4, 3, 4, 3, 4, 3]
    assert "leader steps down first" in str(steps[-1])


def test_no_change_is_no_steps():
    assert plan_move(["a", "b"], ["b", "a"]) == []


def test_new_group_and_empty_target():
    assert [s.peer for s in plan_move([], ["a", "b", "c"])] == ["a", "b", "c"]
    with pytest.raises(ValueError):
        plan_move(["a"], [])


def test_colocated_replicas_are_a_multiset():
    steps = plan_move(["n1", "n1", "n1"], ["n1", "n2", "n3"])
    assert [(s.op, s.peer) for s in steps] == [(ADD, "n2"), (REMOVE, "n1"), (ADD, "n3"),
                                               (REMOVE, "n1")]
    assert Counter(steps[-1].members) == Counter(["n1", "n2", "n3"])


def test_plan_update_keeps_what_fits():
    servers = [ServerInfo(f"n{i}", tags=frozenset({f"az:{'abcab'[i]}"})) for i in range(5)]
    target, steps = plan_update(servers, current=["n0", "n1", "n2"], replicas=5, leader="n1")
    assert target[0] == "n1" and sorted(target) == ["n0", "n1", "n2", "n3", "n4"]
    assert [s.op for s in steps] == [ADD, ADD]
    target, steps = plan_update(servers, current=target, replicas=3, leader="n1",
                                placement=Placement(tags=("az:a",)), allow_colocate=True)
    assert sorted(set(target)) == ["n0", "n3"]
    assert all(s.peer != "n1" or s.stepdown for s in steps if s.op == REMOVE)


peer_names = st.sampled_from([f"n{i}" for i in range(8)])


@settings(max_examples=300, deadline=None)
@given(
    current=st.lists(peer_names, min_size=0, max_size=5),
    target=st.lists(peer_names, min_size=1, max_size=5),
    leader_pick=st.integers(min_value=0, max_value=9),
    unique=st.booleans(),
)
def test_plan_move_invariants(current, target, leader_pick, unique):
    if unique:
        current, target = list(dict.fromkeys(current)), list(dict.fromkeys(target))
    leader = current[leader_pick % len(current)] if current else None
    steps = plan_move(current, target, leader=leader)

    cur, tgt = Counter(current), Counter(target)
    # Minimal: one step per differing replica; ends exactly at the target.
    assert len(steps) == sum(((cur - tgt) + (tgt - cur)).values())
    end = Counter(steps[-1].members) if steps else cur
    assert end == tgt

    low, high = min(len(current), len(target)), max(len(current), len(target)) + 1
    prev = Counter(current)
    kept = cur & tgt
    for step in steps:
        now = Counter(step.members)
        # Exactly one replica changes per step.
        delta = (now - prev) + (prev - now)
        assert sum(delta.values()) == 1 and list(delta) == [step.peer]
        assert (step.op == ADD) == (sum(now.values()) > sum(prev.values()))
        # Size stays within bounds: never below the smaller group once it was reached.
        assert len(step.members) <= high
        if current:
            assert len(step.members) >= low
            # Failures tolerated never drop below what the smaller group tolerates.
            size = len(step.members)
            assert size - quorum(size) >= min(ft(len(current)), ft(len(target)))
        # Replicas on both sides never leave.
        assert all(now[p] >= kept[p] for p in kept)
        prev = now
    if leader is not None and tgt[leader] < cur[leader]:
        last_leader = [s for s in steps if s.op == REMOVE and s.peer == leader]
        assert last_leader[-1] is [s for s in steps if s.op == REMOVE][-1]
        if tgt[leader] == 0:
            assert last_leader[-1].stepdown
