"""The calls the replica classes inherit from ReplicaShell reach them through Ray: a
dedicated stream replica's actor, a consumer replica inside it, and the meta members."""

from __future__ import annotations

import pytest
import ray

from rayjet import ConsumerConfig, StorageType, StreamConfig
from rayjet.actors.host import HostedHandle
from rayjet.actors.names import META_MEMBERS, NAMESPACE, meta_actor_name, meta_member_id
from rayjet.api import AckPolicy
from tests.replicas import consumer_replicas, stream_replicas

pytestmark = pytest.mark.usefixtures("drop_new_streams")


def test_each_kind_of_replica_answers_ping(js, stream_name):
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=1,
                               storage=StorageType.MEMORY, hosting="dedicated"))
    js.add_consumer(name, ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT))
    ((rid, stream),) = stream_replicas(js, name).items()
    assert not isinstance(stream, HostedHandle)  # an actor of its own: Ray wraps the class
    assert ray.get(stream.ping.remote(), timeout=30) == rid
    ((cid, consumer),) = consumer_replicas(js, name, "D").items()
    assert ray.get(consumer.ping.remote(), timeout=30) == cid
    for i in range(META_MEMBERS):
        member = ray.get_actor(meta_actor_name(meta_member_id(i)), namespace=NAMESPACE)
        assert ray.get(member.ping.remote(), timeout=30) == meta_member_id(i)
