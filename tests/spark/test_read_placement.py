"""Where read_stream's tasks run and how they ask for pages: beside their replica (soft
node affinity), over the data plane, with the actor call when no connection can be made."""

from __future__ import annotations

import dataclasses
import time

import ray

from rayjet.actors import direct
from rayjet.spark import read_stream
from rayjet.spark.source import ReadPlan, dataset_of, make_plan, read_piece
from tests.spark.test_read import _stream


def _plan(nodes: tuple, replicas=("r1", "r2", "r3"), start=1, end=100) -> ReadPlan:
    return ReadPlan(stream="S", group="g", replicas=replicas, start_seq=start, end_seq=end,
                    nodes=nodes)


def test_pieces_are_grouped_by_the_node_of_the_replica_they_read_first():
    plan = _plan(("n1", "n2", "n1"))
    placed = plan.placed_pieces(6)
    assert set(placed) == {"n1", "n2"}
    got = sorted(p for pieces in placed.values() for p in pieces)
    assert [(lo, hi) for lo, hi, _ in got] == plan.pieces(6)  # each range once
    for node, pieces in placed.items():
        assert all(plan.nodes[preferred] == node for _, _, preferred in pieces)
    assert sorted(p for _, _, p in got) == [0, 0, 1, 1, 2, 2]  # round robin over replicas
    # a replica whose node is not known: its pieces are not placed
    assert set(_plan(("n1", None, "n1")).placed_pieces(3)) == {"n1", None}
    assert _plan(()).placed_pieces(2) == {None: [(1, 50, 0), (51, 100, 1)]}
    assert _plan(("n1",), start=5, end=4).placed_pieces(3) == {}  # an empty read


def test_a_plan_knows_where_each_replica_runs(js, stream_name):
    s = _stream(js, stream_name, 10, replicas=3)
    plan = make_plan(js, s)
    here = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(plan.nodes) == 3 and set(plan.nodes) <= here
    # a node's pieces carry its affinity; the read still covers the range once
    ds = dataset_of(plan, parallelism=3)
    assert sorted(r["seq"] for r in ds.take_all()) == list(range(1, 11))
    gone = dataclasses.replace(plan, nodes=("ab" * 28,) * 3)  # a node not alive
    assert sorted(r["seq"] for r in dataset_of(gone).take_all()) == list(range(1, 11))


def test_pages_go_over_the_data_plane_and_fall_back_to_actor_calls(js, stream_name,
                                                                    monkeypatch):
    s = _stream(js, stream_name, 3000, replicas=1)
    plan = make_plan(js, s, page_msgs=500)
    deadline = time.monotonic() + 30
    while True:  # until a page went direct: the replica's address is known from here on
        before = direct.stats()["direct"]
        list(read_piece(plan, 1, 10, 0))
        if direct.stats()["direct"] > before:
            break
        assert time.monotonic() < deadline, direct.stats()
    before = direct.stats()["direct"]
    blocks = list(read_piece(plan, 1, 3000, 0))
    assert sum(b.num_rows for b in blocks) == 3000
    # a request per page of 500 (6); one may take the actor call when the replica's
    # address is being read again
    assert direct.stats()["direct"] - before >= 5, direct.stats()
    monkeypatch.setattr(direct, "enabled", lambda: False)
    before = direct.stats()["direct"]
    blocks = list(read_piece(plan, 1, 3000, 0))
    assert sum(b.num_rows for b in blocks) == 3000
    assert direct.stats()["direct"] == before
    assert [r["seq"] for r in read_stream(s, end_seq=5, js=js).take_all()] == [1, 2, 3, 4, 5]
