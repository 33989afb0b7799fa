"""A durable consumer's replicas change with its config (num_replicas), as in nats-server:
R1 -> R3 -> R1, its delivery state kept, the removed replicas stopped, no id reused."""

from __future__ import annotations

import asyncio

from rayjet import ConsumerConfig, StorageType
from rayjet.actors.names import consumer_actor_name
from rayjet.actors.replica_collection import running_replicas
from rayjet.api import AckPolicy
from tests.cluster.conftest import drop_new_streams, js, stream_name  # noqa: F401


def _replicas(js, stream, name):  # noqa: F811
    ca = js._meta_call("consumer_assignment", stream, name)
    return ca["group"], [rid for rid, _ in ca["peers"]]


def _running(group):
    prefix = consumer_actor_name(group, "")
    # a generous timeout: a host busy under load answers late, and one that does not answer
    # in time contributes nothing to the listing
    running = asyncio.run(running_replicas(timeout=30.0))
    return sorted(n for n in running if n.startswith(prefix))


def test_consumer_replicas_grow_and_shrink_with_its_config(js, stream_name,  # noqa: F811
                                                           drop_new_streams):  # noqa: F811
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3,
                  storage=StorageType.FILE)
    for i in range(20):
        js.publish(f"{stream_name}.a", b"m%d" % i, timeout=20)
    cfg = ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT, num_replicas=1)
    js.add_consumer(stream_name, cfg)
    sub = js.pull_subscribe(f"{stream_name}.>", durable="C", stream=stream_name)
    for m in sub.fetch(5, timeout=10):
        m.ack_sync()
    group, r1 = _replicas(js, stream_name, "C")
    assert len(r1) == 1

    grown = js.update_consumer(stream_name, ConsumerConfig(
        durable_name="C", ack_policy=AckPolicy.EXPLICIT, num_replicas=3))
    _, r3 = _replicas(js, stream_name, "C")
    assert len(r3) == 3 and r3[0] == r1[0]
    assert grown.config.num_replicas == 3
    assert len(_running(group)) == 3
    assert grown.ack_floor.stream_seq == 5 and grown.num_pending == 15
    # the grown group works: deliveries and acks go on, every replica has the state
    for m in sub.fetch(5, timeout=10):
        m.ack_sync()
    info = js.consumer_info(stream_name, "C")
    assert info.ack_floor.stream_seq == 10
    assert info.cluster is None or len([info.cluster.leader, *info.cluster.replicas]) == 3
    # its leader can go: another replica leads with the same state
    js.consumer_leader_stepdown(stream_name, "C")
    for m in sub.fetch(2, timeout=20):
        m.ack_sync()
    assert js.consumer_info(stream_name, "C").ack_floor.stream_seq == 12

    shrunk = js.update_consumer(stream_name, ConsumerConfig(
        durable_name="C", ack_policy=AckPolicy.EXPLICIT, num_replicas=1))
    _, again = _replicas(js, stream_name, "C")
    assert len(again) == 1 and shrunk.ack_floor.stream_seq == 12
    assert len(_running(group)) == 1
    # growing again takes ids never used before
    js.update_consumer(stream_name, ConsumerConfig(
        durable_name="C", ack_policy=AckPolicy.EXPLICIT, num_replicas=3))
    _, later = _replicas(js, stream_name, "C")
    assert len(later) == 3 and not (set(later) - set(again)) & set(r3)
    assert [m.data for m in sub.fetch(3, timeout=20)] == [b"m12", b"m13", b"m14"]
