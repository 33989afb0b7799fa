"""Replica actor names split back into kind, group and replica id (for orphan collection)."""

from rayjet.actors.names import consumer_actor_name, meta_actor_name, stream_actor_name
from rayjet.actors.replica_actors import ReplicaActor, parse_replica_name


def test_replica_names_round_trip():
    name = stream_actor_name("ORDERS-12", "r3")
    assert parse_replica_name(name) == ReplicaActor("stream", "ORDERS-12", "r3", name)
    name = consumer_actor_name("ORDERS-D_1-40", "r0")
    assert parse_replica_name(name) == ReplicaActor("consumer", "ORDERS-D_1-40", "r0", name)


def test_other_names_are_not_replicas():
    for name in (meta_actor_name("m0"), "rayjet.stream.", "rayjet.stream.G", "other.r0",
                 "rayjet.streamX.G.r0"):
        assert parse_replica_name(name) is None, name
