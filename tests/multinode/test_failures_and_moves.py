"""Streams under node loss and placement changes on a labelled multi-node Ray cluster,
with a publisher running throughout: every acknowledged message is stored exactly once."""

from __future__ import annotations

import dataclasses

import pytest

from rayjet import StreamConfig
from rayjet.api.stream import Placement
from rayjet.placement import CLUSTER_LABEL
from tests.multinode.conftest import wait_for
from tests.multinode.support import (
    Publisher,
    all_placed,
    assert_exactly_once,
    assignment,
    leader,
    replica_labels,
    replica_nodes,
    statuses,
)


def caught_up(js, name, replicas):
    """Every replica answers and has applied as far as the leader."""
    st = statuses(js, name)
    if len(st) != replicas or not all(st.values()):
        return False
    return len({s["last_seq"] for s in st.values()}) == 1


def test_r3_keeps_serving_when_the_node_of_a_replica_is_removed(mn, js, stream_name):
    js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"],
                               num_replicas=3, placement=Placement(cluster="west")))
    wait_for(lambda: all_placed(js, stream_name, 3), 30, "three replicas")
    pub = Publisher(js, f"{stream_name}.a", "m")
    pub.start()
    try:
        pub.wait_count(50)
        rid, _ = leader(js, stream_name)
        victim = mn.host_of(replica_nodes(js, stream_name)[rid])
        mn.remove(victim)  # the leader's node: an election, then writes go on
        at_removal = len(pub.acked)
        pub.wait_count(at_removal + 100, timeout=60)
    finally:
        acked = pub.stop()
    assert_exactly_once(js, stream_name, acked)

    mn.add(victim)
    wait_for(lambda: caught_up(js, stream_name, 3), 60, "the third replica back and caught up")
    placed = replica_labels(js, stream_name)
    assert {lab[CLUSTER_LABEL] for lab in placed.values()} == {"west"}
    assert len({lab["az"] for lab in placed.values()}) == 3

    # the replica Ray restarted on another node is kept by a placement change that it
    # still fits, and the catalogue learns where it runs
    rids = {rid for rid, _ in assignment(js, stream_name)["peers"]}
    running = replica_nodes(js, stream_name)
    cfg = js.stream_info(stream_name).config
    js.update_stream(dataclasses.replace(
        cfg, placement=Placement(cluster="west", tags=[f"{CLUSTER_LABEL}:west"])))
    after = assignment(js, stream_name)
    assert {rid for rid, _ in after["peers"]} == rids
    assert dict(after["peers"]) == running == replica_nodes(js, stream_name)


@pytest.mark.parametrize("replicas,before,after", [
    (1, Placement(cluster="central"), Placement(cluster="east")),
    (2, Placement(cluster="west", tags=["!az:w-c"]), Placement(cluster="west", tags=["!az:w-a"])),
], ids=["region-to-region", "within-a-region"])
def test_placement_change_moves_replicas_under_load(js, stream_name, replicas, before, after):
    js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"],
                               num_replicas=replicas, placement=before))
    old = wait_for(lambda: all_placed(js, stream_name, replicas), 30, "the replicas")
    pub = Publisher(js, f"{stream_name}.a", "m")
    pub.start()
    try:
        pub.wait_count(50)
        cfg = js.stream_info(stream_name).config
        js.update_stream(dataclasses.replace(cfg, placement=after))
        moved = len(pub.acked)
        pub.wait_count(moved + 50, timeout=60)
    finally:
        acked = pub.stop()
    assert_exactly_once(js, stream_name, acked)

    placed = wait_for(lambda: all_placed(js, stream_name, replicas), 30, "the moved replicas")
    hosts = {lab["host"] for lab in placed.values()}
    if after.cluster == "east":
        assert hosts == {"e1"} and {lab["host"] for lab in old.values()} == {"c1"}
    else:
        assert "w1" not in hosts and len({lab["az"] for lab in placed.values()}) == 2
    assert js.stream_info(stream_name).config.placement == after
    assert js.stream_info(stream_name).state.messages == len(acked)
