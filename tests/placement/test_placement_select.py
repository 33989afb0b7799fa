"""select_peers: cluster, tags, unique tag, load, keep-existing, colocation, errors."""

from __future__ import annotations

import random

import pytest

from rayjet.api import Placement, StorageType
from rayjet.errors import APIError, ClusterNoPeersError
from rayjet.placement import ServerInfo, select_peers, unique_value


def srv(node_id, cluster="c1", tags=(), **kw):
    return ServerInfo(node_id, cluster=cluster, tags=frozenset(tags), **kw)


def three_az(cluster="c1", prefix="n", load=0):
    return [srv(f"{prefix}{i}", cluster, {f"az:{z}"}, load=load) for i, z in enumerate("abc")]


def no_peers(**kw) -> ClusterNoPeersError:
    servers = kw.pop("servers")
    with pytest.raises(ClusterNoPeersError) as info:
        select_peers(servers, **kw)
    err = info.value
    assert err.err_code == 10005 and err.code == 400
    assert isinstance(err, APIError)
    return err


# -- cluster and tags ------------------------------------------------------------------------
def test_picks_distinct_nodes_in_stable_order():
    servers = [srv("n3"), srv("n1"), srv("n2"), srv("n4")]
    assert select_peers(servers, replicas=3, placement=None) == ["n1", "n2", "n3"]
    assert select_peers(servers, replicas=1, placement=None) == ["n1"]


def test_placement_cluster_restricts():
    servers = three_az("east", "e") + three_az("west", "w")
    got = select_peers(servers, replicas=3, placement=Placement(cluster="west"))
    assert got == ["w0", "w1", "w2"]


def test_without_cluster_all_replicas_in_one_cluster_default_first():
    servers = three_az("east", "e") + three_az("west", "w")
    assert select_peers(servers, replicas=3, placement=None, default_cluster="west") == [
        "w0", "w1", "w2"]
    # No default: clusters by name, first that fits.
    assert select_peers(servers, replicas=3, placement=None) == ["e0", "e1", "e2"]
    # A cluster too small is skipped for the next one.
    small = [srv("a", "aaa")] + three_az("zzz", "z")
    assert select_peers(small, replicas=3, placement=None) == ["z0", "z1", "z2"]


def test_required_and_excluded_tags():
    servers = [srv("n1", tags={"ssd"}), srv("n2", tags={"ssd", "gpu"}),
               srv("n3", tags={"hdd"}), srv("n4", tags={"SSD"})]
    assert select_peers(servers, replicas=3, placement=Placement(tags=("ssd",))) == [
        "n1", "n2", "n4"]
    assert select_peers(servers, replicas=2, placement=Placement(tags=("ssd", "!gpu"))) == [
        "n1", "n4"]
    assert select_peers(servers, replicas=1, placement=Placement(tags=("Ssd", "gpu"))) == ["n2"]


def test_tags_and_cluster_together():
    servers = [srv("e1", "east", {"ssd"}), srv("w1", "west", {"ssd"}), srv("w2", "west")]
    got = select_peers(servers, replicas=1, placement=Placement(cluster="west", tags=("ssd",)))
    assert got == ["w1"]


# -- unique tag ------------------------------------------------------------------------------
def test_unique_tag_forces_distinct_values():
    servers = [srv("n1", tags={"az:a"}), srv("n2", tags={"az:a"}), srv("n3", tags={"az:b"}),
               srv("n4", tags={"az:c"})]
    got = select_peers(servers, replicas=3, placement=None, unique_tag="az")
    assert got == ["n1", "n3", "n4"]
    assert len({unique_value(s, "az") for s in servers if s.node_id in got}) == 3


def test_unique_tag_server_without_it_is_not_eligible():
    servers = [srv("n1", tags={"az:a"}), srv("n2"), srv("n3", tags={"az:b"})]
    assert select_peers(servers, replicas=2, placement=None, unique_tag="az") == ["n1", "n3"]
    err = no_peers(servers=servers, replicas=3, placement=None, unique_tag="az")
    assert "server tag not unique" in err.description
    assert "unique tag 'az'" in err.description
    assert "2 distinct 'az' values -> 2 usable" in err.description


def test_unique_tag_key_is_not_a_bare_prefix():
    servers = [srv("n1", tags={"az:a"}), srv("n2", tags={"azure:x"})]
    err = no_peers(servers=servers, replicas=2, placement=None, unique_tag="az")
    assert "server tag not unique" in err.description
    # A prefix ending in ':' matches by prefix, as nats-server's unique_tag does.
    assert select_peers([srv("n1", tags={"az:a"}), srv("n2", tags={"az:b"})], replicas=2,
                        placement=None, unique_tag="az:") == ["n1", "n2"]


def test_placement_tag_on_unique_key_pins_it_and_disables_uniqueness():
    servers = [srv("n1", tags={"az:a"}), srv("n2", tags={"az:a"}), srv("n3", tags={"az:b"})]
    got = select_peers(servers, replicas=2, placement=Placement(tags=("az:a",)), unique_tag="az")
    assert got == ["n1", "n2"]


def test_unique_over_regions_spanning_clusters():
    servers = (three_az("east", "e") + three_az("west", "w")
               + [srv("c0", "central", {"az:a"})])
    with pytest.raises(ClusterNoPeersError):  # one cluster never has 3 regions
        select_peers(servers, replicas=3, placement=None, unique_tag="rayjet.cluster")
    labelled = [ServerInfo(s.node_id, cluster=s.cluster,
                           tags=s.tags | {f"rayjet.cluster:{s.cluster}"}) for s in servers]
    got = select_peers(labelled, replicas=3, placement=None, unique_tag="rayjet.cluster",
                       span_clusters=True)
    assert sorted(next(s.cluster for s in labelled if s.node_id == n) for n in got) == [
        "central", "east", "west"]


# -- load spreading and stable order -----------------------------------------------------------
def test_fewest_replicas_first_then_node_id():
    servers = [srv("n1", load=5), srv("n2", load=1), srv("n3", load=0), srv("n4", load=1)]
    assert select_peers(servers, replicas=3, placement=None) == ["n3", "n2", "n4"]


def test_rng_breaks_ties_deterministically():
    servers = [srv(f"n{i}") for i in range(8)] + [srv("busy", load=9)]
    a = select_peers(servers, replicas=3, placement=None, rng=random.Random(7))
    b = select_peers(servers, replicas=3, placement=None, rng=random.Random(7))
    assert a == b and "busy" not in a
    seen = {tuple(select_peers(servers, replicas=3, placement=None, rng=random.Random(s)))
            for s in range(10)}
    assert len(seen) > 1


def test_load_spreading_with_unique_tag_prefers_idle_node_per_zone():
    servers = [srv("a1", tags={"az:a"}, load=3), srv("a2", tags={"az:a"}, load=0),
               srv("b1", tags={"az:b"}, load=1), srv("c1", tags={"az:c"}, load=2)]
    assert select_peers(servers, replicas=3, placement=None, unique_tag="az") == [
        "a2", "b1", "c1"]


# -- keeping existing peers -----------------------------------------------------------------
def test_scale_up_keeps_existing_and_adds_least_loaded():
    servers = [srv("n1", load=0), srv("n2", load=0), srv("n3", load=9), srv("n4", load=1),
               srv("n5", load=2)]
    assert select_peers(servers, replicas=3, placement=None, existing=["n3"]) == [
        "n3", "n1", "n2"]
    r5 = select_peers(servers, replicas=5, placement=None, existing=["n3", "n1", "n2"])
    assert r5[:3] == ["n3", "n1", "n2"] and sorted(r5) == ["n1", "n2", "n3", "n4", "n5"]


def test_scale_down_keeps_the_first_existing():
    servers = [srv(f"n{i}") for i in range(5)]
    assert select_peers(servers, replicas=3, placement=None,
                        existing=["n4", "n2", "n0", "n1", "n3"]) == ["n4", "n2", "n0"]


def test_existing_that_no_longer_fits_is_replaced():
    servers = [srv("n1", tags={"ssd"}), srv("n2"), srv("n3", tags={"ssd"}),
               srv("n4", tags={"ssd"}, draining=True), srv("n5", tags={"ssd"})]
    got = select_peers(servers, replicas=3, placement=Placement(tags=("ssd",)),
                       existing=["n2", "n1", "n4", "gone"])
    assert got == ["n1", "n3", "n5"]


def test_cluster_move_replaces_everything():
    servers = three_az("east", "e") + three_az("west", "w")
    got = select_peers(servers, replicas=3, placement=Placement(cluster="west"),
                       existing=["e0", "e1", "e2"])
    assert got == ["w0", "w1", "w2"]


def test_existing_cluster_is_tried_first_without_placement():
    servers = three_az("east", "e") + three_az("west", "w")
    got = select_peers(servers, replicas=3, placement=None, existing=["w2"])
    assert got == ["w2", "w0", "w1"]


def test_existing_duplicate_unique_value_is_dropped():
    servers = [srv("n1", tags={"az:a"}), srv("n2", tags={"az:a"}), srv("n3", tags={"az:b"}),
               srv("n4", tags={"az:c"})]
    got = select_peers(servers, replicas=3, placement=None, unique_tag="az",
                       existing=["n1", "n2", "n3"])
    assert got == ["n1", "n3", "n4"]


def test_offline_existing_is_kept_but_not_chosen_new():
    servers = [srv("n1", offline=True), srv("n2"), srv("n3"), srv("n4", offline=True)]
    got = select_peers(servers, replicas=3, placement=None, existing=["n1"])
    assert got == ["n1", "n2", "n3"]
    err = no_peers(servers=servers, replicas=4, placement=None)
    assert "peer offline" in err.description


def test_quorum_of_online_peers_required():
    servers = [srv("n1", offline=True), srv("n2", offline=True), srv("n3")]
    err = no_peers(servers=servers, replicas=3, placement=None, existing=["n1", "n2"])
    assert "peer offline" in err.description


def test_exclude_and_dead():
    servers = [srv("n1"), srv("n2", alive=False), srv("n3"), srv("n4")]
    assert select_peers(servers, replicas=2, placement=None, exclude=["n1"],
                        existing=["n1", "n2"]) == ["n3", "n4"]


def test_preferred_goes_first():
    servers = [srv("n1"), srv("n2"), srv("n3", name="host-3", load=4), srv("n4")]
    assert select_peers(servers, replicas=3, placement=None, preferred="host-3")[0] == "n3"
    got = select_peers(servers, replicas=3, placement=Placement(preferred="n4"),
                       existing=["n1", "n2", "n4"])
    assert got == ["n4", "n1", "n2"]
    # A preferred node that does not fit is ignored.
    assert "n9" not in select_peers(servers, replicas=2, placement=None, preferred="n9")


def test_storage_capacity_when_known():
    servers = [srv("n1", disk=10, memory=1000), srv("n2", disk=1000, memory=10), srv("n3")]
    assert select_peers(servers, replicas=2, placement=None, max_bytes=100) == ["n2", "n3"]
    assert select_peers(servers, replicas=2, placement=None, max_bytes=100,
                        storage=StorageType.MEMORY) == ["n1", "n3"]
    err = no_peers(servers=servers, replicas=3, placement=None, max_bytes=100)
    assert "insufficient storage" in err.description
    assert "100 bytes of file storage" in err.description and "2 with room" in err.description


# -- colocation ------------------------------------------------------------------------------
def test_single_node_hosts_only_r1_without_colocation():
    solo = [srv("only")]
    assert select_peers(solo, replicas=1, placement=None) == ["only"]
    err = no_peers(servers=solo, replicas=3, placement=None)
    assert "one replica per node" in err.description
    assert "-> 1 usable" in err.description


def test_colocation_on_one_node():
    solo = [srv("only")]
    assert select_peers(solo, replicas=3, placement=None, allow_colocate=True) == ["only"] * 3


def test_colocation_uses_distinct_nodes_first_then_least_busy():
    servers = [srv("n1", load=2), srv("n2", load=0)]
    got = select_peers(servers, replicas=5, placement=None, allow_colocate=True)
    assert sorted(set(got)) == ["n1", "n2"]
    assert got[:2] == ["n2", "n1"] and got.count("n2") == 3 and got.count("n1") == 2
    # Enough nodes: colocation changes nothing.
    many = [srv(f"n{i}") for i in range(5)]
    assert select_peers(many, replicas=3, placement=None, allow_colocate=True) == [
        "n0", "n1", "n2"]


def test_colocation_still_requires_matching_nodes():
    servers = [srv("n1", cluster="east")]
    err = no_peers(servers=servers, replicas=3, placement=Placement(cluster="west"),
                   allow_colocate=True)
    assert "cluster 'west': 0 servers" in err.description
    assert "colocation allowed" in err.description


def test_colocation_with_unique_tag_prefers_distinct_zones_then_nodes():
    servers = [srv("a1", tags={"az:a"}), srv("a2", tags={"az:a"})]
    got = select_peers(servers, replicas=3, placement=None, unique_tag="az", allow_colocate=True)
    assert got[:2] == ["a1", "a2"] and len(got) == 3


def test_colocated_group_spreads_when_nodes_appear():
    servers = [srv("n1"), srv("n2"), srv("n3")]
    got = select_peers(servers, replicas=3, placement=None, existing=["n1", "n1", "n1"],
                       allow_colocate=True)
    assert got == ["n1", "n2", "n3"]
    # With only two nodes, the existing shared replica stays where it was.
    got = select_peers(servers[:2], replicas=3, placement=None, existing=["n1", "n1", "n1"],
                       allow_colocate=True)
    assert got == ["n1", "n2", "n1"]


# -- error text ------------------------------------------------------------------------------
def test_error_lists_what_was_asked_and_what_exists():
    servers = [srv("e1", "east", {"az:a", "ssd"}), srv("e2", "east", {"az:a"}),
               srv("w1", "west", {"az:b", "ssd"})]
    err = no_peers(servers=servers, replicas=3,
                   placement=Placement(cluster="east", tags=("ssd", "nvme")), unique_tag="az")
    text = err.description
    assert text.startswith("no suitable peers for placement")
    assert "tags not matched ['nvme', 'ssd']" in text
    assert "asked for 3 replicas in cluster 'east' with tags ['nvme', 'ssd']" in text
    assert "unique tag 'az'" in text
    assert "cluster 'east': 2 servers, 2 available, 0 with the tags" in text
    assert "e1 [az:a, ssd]" in text and "w1 [az:b, ssd]" in text and "cluster 'west'" in text
    assert err.fields["replicas"] == 3 and err.fields["cluster"] == "east"
    assert err.fields["servers"] == {"east": ["e1", "e2"], "west": ["w1"]}
    assert "10005" in str(err)
    assert err.to_wire()["err_code"] == 10005


def test_error_for_unknown_cluster_and_empty_inventory():
    err = no_peers(servers=three_az(), replicas=1, placement=Placement(cluster="mars"))
    assert "cluster 'mars': 0 servers" in err.description
    assert "cluster 'c1': n0 [az:a]" in err.description
    err = no_peers(servers=[], replicas=1, placement=None)
    assert "no servers known" in err.description and "servers: none" in err.description


def test_error_excluded_tags_and_draining():
    servers = [srv("n1", tags={"spot"}), srv("n2", draining=True)]
    err = no_peers(servers=servers, replicas=1, placement=Placement(tags=("!spot",)))
    assert "tags excluded ['spot']" in err.description
    assert "peer excluded or draining" in err.description
    assert "n2 [] (draining)" in err.description


def test_error_lists_a_bounded_number_of_servers():
    servers = [srv(f"n{i:02d}") for i in range(30)]
    err = no_peers(servers=servers, replicas=1, placement=Placement(tags=("x",)))
    assert "and 18 more" in err.description


def test_bad_replica_count():
    with pytest.raises(ValueError):
        select_peers([srv("n1")], replicas=0, placement=None)


# -- from Ray node dicts to a placement ----------------------------------------------------
def test_ray_nodes_end_to_end_with_az_unique_tag():
    from rayjet.placement import servers_from_ray_nodes

    def node(i, region, az):
        return {"NodeID": f"id{i}", "Alive": True, "NodeManagerAddress": "127.0.0.1",
                "Labels": {"rayjet.cluster": region, "az": az}, "Resources": {"CPU": 1.0}}

    nodes = [node(0, "west", "w1"), node(1, "west", "w1"), node(2, "west", "w2"),
             node(3, "west", "w3"), node(4, "east", "e1")]
    servers = servers_from_ray_nodes(nodes, loads={"id0": 2})
    got = select_peers(servers, replicas=3, placement=Placement(cluster="west"), unique_tag="az")
    assert got == ["id1", "id2", "id3"]
    err = no_peers(servers=servers, replicas=3, placement=Placement(cluster="east"),
                   unique_tag="az")
    assert "id4 [az:e1, rayjet.cluster:east]" in err.description


def test_placement_package_never_imports_ray():
    import subprocess
    import sys

    code = "import sys, rayjet.placement; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
