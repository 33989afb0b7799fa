"""Placement on labelled Ray nodes: by cluster, by tags, under the unique tag, and the
error (10005) when nothing fits."""

from __future__ import annotations

import json

import pytest

from rayjet import StorageType, StreamConfig
from rayjet.api.stream import Placement
from rayjet.errors import ClusterNoPeersError
from rayjet.placement import CLUSTER_LABEL
from tests.multinode.conftest import wait_for
from tests.multinode.support import all_placed, replica_labels

MEM = StorageType.MEMORY


def add(js, name, replicas, placement, storage=MEM):
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=replicas,
                               storage=storage, placement=placement))
    return wait_for(lambda: all_placed(js, name, replicas), 30, f"{name}'s replicas")


def test_by_cluster_with_the_unique_tag(js, stream_name):
    placed = add(js, stream_name, 3, Placement(cluster="west"))
    assert {lab[CLUSTER_LABEL] for lab in placed.values()} == {"west"}
    # w3 and w4 share zone w-c: the unique tag allows only one of them
    assert sorted(lab["az"] for lab in placed.values()) == ["w-a", "w-b", "w-c"]
    assert len({lab["host"] for lab in placed.values()}) == 3
    ack = js.publish(f"{stream_name}.x", b"1")
    assert ack.seq == 1 and ack.stream == stream_name


def test_by_tags_and_excluded_tags(js, stream_name):
    one = add(js, stream_name, 1, Placement(tags=["az:c-a"]))
    assert [lab["host"] for lab in one.values()] == ["c1"]

    other = stream_name + "X"
    two = add(js, other, 2, Placement(cluster="west", tags=["!az:w-a"]))
    hosts = sorted(lab["host"] for lab in two.values())
    assert "w1" not in hosts and len({lab["az"] for lab in two.values()}) == 2
    assert hosts[0] == "w2" and hosts[1] in ("w3", "w4")


def test_unsatisfiable_placements_name_what_was_asked_and_what_exists(js, stream_name):
    # four west nodes, but only three distinct zones
    with pytest.raises(ClusterNoPeersError) as err:
        js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"],
                                   num_replicas=4, placement=Placement(cluster="west")))
    text = str(err.value)
    assert err.value.err_code == 10005
    assert "asked for 4 replicas in cluster 'west'" in text
    assert "unique tag 'az'" in text and "server tag not unique" in text
    assert "4 servers" in text and "3 distinct 'az' values" in text
    for cluster in ("west", "central", "east"):
        assert f"cluster {cluster!r}:" in text
    assert stream_name not in js.stream_names()

    with pytest.raises(ClusterNoPeersError) as err:
        js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"],
                                   placement=Placement(cluster="east", tags=["ssd"])))
    assert "tags not matched ['ssd']" in str(err.value)
    assert "cluster 'east': 1 servers" in str(err.value)

    with pytest.raises(ClusterNoPeersError) as err:
        js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"],
                                   placement=Placement(cluster="mars")))
    assert "in cluster 'mars'" in str(err.value) and "cluster 'mars': 0 servers" in str(err.value)


def _autoscaler_request() -> list[dict]:
    """What ``request_resources`` last asked for, as the autoscaler reads it."""
    from ray.autoscaler._private.constants import AUTOSCALER_RESOURCE_REQUEST_CHANNEL
    from ray.autoscaler.v2.utils import is_autoscaler_v2
    from ray.experimental.internal_kv import _internal_kv_get

    if is_autoscaler_v2():
        pytest.skip("this cluster runs the v2 autoscaler; its requests are not in the KV")
    raw = _internal_kv_get(AUTOSCALER_RESOURCE_REQUEST_CHANNEL)
    return json.loads(raw) if raw else []


def test_a_placement_needing_more_nodes_asks_the_autoscaler(js, stream_name):
    with pytest.raises(ClusterNoPeersError):
        js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"],
                                   num_replicas=3, placement=Placement(cluster="east")))
    assert _autoscaler_request() == [{"CPU": 1}] * 3
    # once a placement fits again the request is withdrawn (it would keep nodes up)
    add(js, stream_name, 1, Placement(cluster="east"))
    assert _autoscaler_request() == []


def test_replicas_stay_in_their_region_when_their_node_dies(mn, js, stream_name):
    placed = add(js, stream_name, 1, Placement(cluster="central"), storage=StorageType.FILE)
    assert [lab["host"] for lab in placed.values()] == ["c1"]
    js.publish(f"{stream_name}.x", b"before")
    mn.remove("c1")
    # west and east have room, but the replica belongs to central: it waits for a node
    # there instead of restarting elsewhere
    with pytest.raises(AssertionError):
        wait_for(lambda: replica_labels(js, stream_name), 4, "no replica outside central")
    mn.add("c1")
    back = wait_for(lambda: all_placed(js, stream_name, 1), 30, "the replica back in central")
    assert [lab[CLUSTER_LABEL] for lab in back.values()] == ["central"]
    assert js.publish(f"{stream_name}.x", b"after").seq == 2


def test_peer_removal_places_the_new_replica_on_another_node(js, stream_name):
    before = add(js, stream_name, 2, Placement(cluster="west"), storage=StorageType.FILE)
    for i in range(5):
        js.publish(f"{stream_name}.x", str(i).encode())
    removed_host = before["r0"]["host"]

    info = js.stream_peer_remove(stream_name, "r0")

    assert info.state.messages == 5
    after = wait_for(lambda: (lambda got: got if got and "r0" not in got else None)(
        all_placed(js, stream_name, 2)), 30, "the new replica running, r0 gone")
    (new_rid,) = set(after) - set(before)
    # a fitting west node other than r0's was free, so the new replica went there (the
    # unique tag still holds: one replica per zone)
    assert after[new_rid]["host"] != removed_host
    assert {lab[CLUSTER_LABEL] for lab in after.values()} == {"west"}
    assert len({lab["az"] for lab in after.values()}) == 2
    assert js.stream_info(stream_name).state.messages == 5

