"""Which host of a node's pool runs a replica: a group's replicas spread over the pool."""

from __future__ import annotations

from rayjet.actors.host_pools import host_index
from rayjet.actors.names import consumer_actor_name, stream_actor_name


def test_a_groups_replicas_get_distinct_hosts_while_the_pool_allows():
    for group in ("G1", "KV_config", "abcdef0123", "OBJ_assets"):
        for pool in (3, 5):
            names = [stream_actor_name(group, f"r{i}") for i in range(3)]
            assert len({host_index(n, pool) for n in names}) == 3
        assert {host_index(stream_actor_name(group, f"r{i}"), 3) for i in range(3, 6)} == {0, 1, 2}


def test_the_index_is_stable_and_in_range():
    name = consumer_actor_name("C9", "r1")
    assert host_index(name, 3) == host_index(name, 3)
    assert all(0 <= host_index(stream_actor_name(f"G{i}", "r0"), 3) < 3 for i in range(50))
    assert 0 <= host_index("not-a-replica-name", 3) < 3
    assert host_index(stream_actor_name("G1", "r0"), 1) == 0
