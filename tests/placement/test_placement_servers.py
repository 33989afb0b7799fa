"""Ray nodes seen as servers: labels become cluster and tags."""

from __future__ import annotations

import pytest

from rayjet.placement import (
    DEFAULT_CLUSTER,
    ServerInfo,
    cluster_of,
    clusters,
    label_selector_for,
    loads_from_assignments,
    servers_from_ray_nodes,
    servers_in_cluster,
    tags_from_labels,
    with_loads,
)


def node(node_id, labels=None, alive=True, **resources):
    return {
        "NodeID": node_id,
        "Alive": alive,
        "NodeManagerAddress": f"10.0.0.{len(node_id)}",
        "NodeName": f"host-{node_id}",
        "Labels": labels or {},
        "Resources": resources,
    }


def test_labels_become_cluster_and_tags():
    nodes = [
        node("b2", {"rayjet.cluster": "west", "az": "us-west-2a",
                    "rayjet.tags": "SSD, fast,,ssd", "ray.io/node-id": "b2"},
             CPU=4.0, memory=8e9, disk=1e12),
        node("a1"),
    ]
    servers = servers_from_ray_nodes(nodes)
    assert [s.node_id for s in servers] == ["a1", "b2"]  # sorted by id
    plain, west = servers
    assert plain.cluster == DEFAULT_CLUSTER and plain.tags == frozenset()
    assert west.cluster == "west"
    assert west.tags == {"az:us-west-2a", "rayjet.cluster:west", "ssd", "fast"}
    assert not any(t.startswith("ray.io/node-id") for t in west.tags)
    assert (west.cpu, west.memory, west.disk) == (4.0, 8_000_000_000, 10**12)
    assert west.name == "host-b2"
    assert west.labels["az"] == "us-west-2a"
    assert plain.memory is None and plain.disk is None


def test_custom_cluster_label_and_default():
    nodes = [node("n1", {"region": "east"}), node("n2", {})]
    servers = servers_from_ray_nodes(nodes, cluster_label="region", default_cluster="home")
    assert [s.cluster for s in servers] == ["east", "home"]
    assert servers[0].has_tag("REGION:east")


def test_dead_nodes_dropped_unless_asked_and_alive_record_wins():
    nodes = [node("n1", alive=False), node("n2", alive=False), node("n1")]
    assert [s.node_id for s in servers_from_ray_nodes(nodes)] == ["n1"]
    both = servers_from_ray_nodes(nodes, include_dead=True)
    assert [(s.node_id, s.alive) for s in both] == [("n1", True), ("n2", False)]


def test_drain_label_and_loads():
    nodes = [node("n1", {"rayjet.drain": "true"}), node("n2")]
    servers = servers_from_ray_nodes(nodes, loads={"n2": 3})
    assert servers[0].draining and not servers[0].selectable and not servers[0].keepable
    assert servers[1].load == 3
    loads = loads_from_assignments([("n1", "n2"), ("n2",), ("n2", "n2")])
    assert loads == {"n1": 1, "n2": 4}
    assert [s.load for s in with_loads(servers, loads)] == [1, 4]


def test_server_flags():
    off = ServerInfo("x", offline=True)
    assert not off.selectable and off.keepable
    dead = ServerInfo("y", alive=False)
    assert not dead.selectable and not dead.keepable
    assert "offline" in off.describe() and "dead" in dead.describe()
    with pytest.raises(ValueError):
        ServerInfo("")


def test_tags_from_labels_is_sorted_and_lowercase():
    assert tags_from_labels({"Z": "1", "a": "B", "rayjet.tags": "X"}) == ["a:b", "x", "z:1"]


def test_region_helpers():
    servers = [ServerInfo("a", cluster="west"), ServerInfo("b", cluster="east"),
               ServerInfo("c", cluster="west", offline=True)]
    assert cluster_of(servers[0]) == "west"
    assert cluster_of(node("n", {"rayjet.cluster": "central"})) == "central"
    assert cluster_of(node("n")) == DEFAULT_CLUSTER
    assert cluster_of(node("n", {"region": "r1"}), cluster_label="region") == "r1"
    assert [s.node_id for s in servers_in_cluster(servers, "west")] == ["a", "c"]
    assert [s.node_id for s in servers_in_cluster(servers, "west", selectable_only=True)] == ["a"]
    assert list(clusters(servers)) == ["east", "west"]


def test_label_selector_for_pins_a_node():
    assert label_selector_for("abc") == {"ray.io/node-id": "abc"}
