"""Ephemeral consumers run inside their stream leader's actor: no process of their own,
the same consumer API, and gone with that leader (ordered ones re-create themselves)."""

from __future__ import annotations

import asyncio
import time

import pytest
import ray

from rayjet import ConsumerConfig, StreamConfig
from rayjet.actors.host import find_replica
from rayjet.actors.names import stream_actor_name
from rayjet.actors.replica_collection import running_replicas
from rayjet.api import AckPolicy, DeliverPolicy, RetentionPolicy
from rayjet.errors import (
    BadRequestError,
    ConsumerNameExistsError,
    ConsumerNotFoundError,
    MaximumConsumersError,
    NoMessagesError,
)

pytestmark = pytest.mark.usefixtures("drop_new_streams")


def consumer_actors(name: str) -> list[str]:
    """Named consumer actors of consumer ``name`` (their names carry its raft group)."""
    running = asyncio.run(running_replicas())  # dedicated or hosted
    return [n for n in running if n.startswith("rayjet.consumer") and f"-{name}-" in n]


def leader_handle(js, stream):
    assignment, _ = js._stream(stream, refresh=True)
    for rid, _node in assignment["peers"]:
        h = find_replica(stream_actor_name(assignment["group"], rid))  # dedicated or hosted
        st = ray.get(h.status.remote(), timeout=30)
        if st["role"] == "Leader" and st["writable"]:
            return rid, h, [r for r, _ in assignment["peers"] if r != rid]
    return None, None, []


def move_leader(js, stream):
    """Transfer the stream's leadership to another replica and wait until it leads."""
    rid, handle, others = leader_handle(js, stream)
    assert rid is not None, "no leader"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # raft gives a transfer up after an election timeout when its target did not catch
        # up in time (a slow process): ask again until the leadership moved
        ray.get(handle.transfer_leadership.remote(others[0]), timeout=30)
        again = time.monotonic() + 3
        while time.monotonic() < min(again, deadline):
            new, _, _ = leader_handle(js, stream)
            if new not in (None, rid):
                return new
            time.sleep(0.05)
    raise AssertionError("the leadership did not move")


def test_an_ephemeral_pull_consumer_runs_in_the_stream_leader(js, stream_name):
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=1))
    for i in range(10):
        js.publish(f"{name}.a", b"m%d" % i)
    sub = js.pull_subscribe(f"{name}.>", stream=name,
                            config=ConsumerConfig(ack_wait=0.5, max_deliver=3))
    assert consumer_actors(sub.name) == []  # no process of its own
    assert sub.name in js.consumer_names(name)
    assert js.stream_info(name).state.consumer_count == 1

    first = sub.fetch(4, timeout=5)
    assert [m.data for m in first] == [b"m0", b"m1", b"m2", b"m3"]
    for m in first[:3]:
        m.ack_sync()
    info = js.consumer_info(name, sub.name)
    assert info.ack_floor.stream_seq == 3 and info.num_ack_pending == 1
    assert info.num_pending == 6
    rest = sub.fetch(6, timeout=5)
    assert [m.data for m in rest] == [b"m%d" % i for i in range(4, 10)]
    for m in rest:
        m.ack_sync()
    # m3 was not acked: it comes again once its ack_wait ran out
    again = sub.fetch(1, timeout=5)
    assert again[0].data == b"m3" and again[0].metadata.num_delivered == 2

    sub.unsubscribe()
    assert sub.name not in js.consumer_names(name)
    with pytest.raises(ConsumerNotFoundError):
        js.consumer_info(name, sub.name)


def test_an_ordered_subscription_follows_a_leader_change(js, stream_name):
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3))
    for i in range(50):
        js.publish(f"{name}.a", b"%d" % i)
    sub = js.subscribe(f"{name}.>", stream=name, ordered_consumer=True)
    first_name = sub.name
    got = [sub.next_msg(timeout=10).data for _ in range(50)]
    move_leader(js, name)
    for i in range(50, 100):
        js.publish(f"{name}.a", b"%d" % i, timeout=30)
    got += [sub.next_msg(timeout=30).data for _ in range(50)]
    assert got == [b"%d" % i for i in range(100)]  # in order, each once
    assert sub.name != first_name  # re-created on the new leader
    with pytest.raises(Exception):  # noqa: B017,PT011 - nothing more: no duplicate comes
        sub.next_msg(timeout=1)
    sub.unsubscribe()


def test_a_plain_ephemeral_is_gone_after_a_leader_change(js, stream_name):
    """As an R1 ephemeral goes with its server in nats-server: the client is told."""
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3))
    js.publish(f"{name}.a", b"x")
    sub = js.pull_subscribe(f"{name}.>", stream=name)
    assert len(sub.fetch(1, timeout=5)) == 1
    move_leader(js, name)
    with pytest.raises(ConsumerNotFoundError):
        sub.fetch(1, timeout=2)
    assert sub.name not in js.consumer_names(name)


def test_a_kv_watch_keeps_going_across_a_leader_change(js, stream_name):
    bucket = stream_name
    # history: a value replaced before the watch re-created itself still comes
    kv = js.create_key_value(bucket=bucket, replicas=3, history=10)
    kv.put("a", b"1")
    with kv.watch("a") as w:
        assert w.updates(10).value == b"1"
        assert w.updates(10) is None  # end of the initial values
        move_leader(js, f"KV_{bucket}")
        kv.put("a", b"2")
        kv.put("a", b"3")
        assert [w.updates(30).value, w.updates(30).value] == [b"2", b"3"]


def test_names_are_shared_with_durables_and_both_count_for_max_consumers(js, stream_name):
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], max_consumers=3))
    js.add_consumer(name, ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT))
    with pytest.raises(ConsumerNameExistsError):
        js.add_consumer(name, ConsumerConfig(name="D", ack_policy=AckPolicy.EXPLICIT))
    js.add_consumer(name, ConsumerConfig(name="E", ack_policy=AckPolicy.EXPLICIT))
    assert consumer_actors("E") == []
    with pytest.raises(ConsumerNameExistsError):
        js.add_consumer(name, ConsumerConfig(durable_name="E", ack_policy=AckPolicy.EXPLICIT))
    # the same named ephemeral again is the same consumer
    js.add_consumer(name, ConsumerConfig(name="E", ack_policy=AckPolicy.EXPLICIT))
    js.add_consumer(name, ConsumerConfig(ack_policy=AckPolicy.NONE))
    assert len(js.consumer_names(name)) == 3
    with pytest.raises(MaximumConsumersError):
        js.add_consumer(name, ConsumerConfig(ack_policy=AckPolicy.NONE))
    with pytest.raises(MaximumConsumersError):
        js.add_consumer(name, ConsumerConfig(durable_name="F", ack_policy=AckPolicy.EXPLICIT))
    assert js.delete_consumer(name, "E")
    js.add_consumer(name, ConsumerConfig(durable_name="F", ack_policy=AckPolicy.EXPLICIT))
    names = js.consumer_names(name)
    assert len(names) == 3 and {"D", "F"} <= set(names) and "E" not in names


def test_an_inactive_ephemeral_is_deleted(js, stream_name):
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    info = js.add_consumer(name, ConsumerConfig(inactive_threshold=0.3,
                                                ack_policy=AckPolicy.EXPLICIT))
    deadline = time.monotonic() + 20
    while info.name in js.consumer_names(name):
        assert time.monotonic() < deadline, "the inactive consumer is still there"
        time.sleep(0.1)
    with pytest.raises(ConsumerNotFoundError):
        js.consumer_info(name, info.name)


def test_consumers_of_interest_streams_and_replicated_ones_keep_their_actors(js, stream_name):
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3,
                               retention=RetentionPolicy.INTEREST))
    interest = js.add_consumer(name, ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
    assert len(consumer_actors(interest.name)) == 3
    js.delete_stream(name)
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3))
    replicated = js.add_consumer(name, ConsumerConfig(num_replicas=3,
                                                      deliver_policy=DeliverPolicy.ALL))
    assert len(consumer_actors(replicated.name)) == 3
    single = js.add_consumer(name, ConsumerConfig(num_replicas=1))
    assert consumer_actors(single.name) == []


def test_bad_calls_get_typed_errors(js, stream_name):
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
    info = js.add_consumer(name, ConsumerConfig(ack_policy=AckPolicy.NONE))
    _, router = js._stream(name)
    with pytest.raises(BadRequestError):
        router.call("leader_consumer_call", info.name, "destroy", (), {}, timeout=10)
    with pytest.raises(ConsumerNotFoundError):
        router.call("leader_consumer_call", "NOPE", "info", (), {}, timeout=10)
    with pytest.raises(ConsumerNotFoundError):
        js.delete_consumer(name, "NOPE")
    sub = js.pull_subscribe(stream=name, config=ConsumerConfig(name="P"))
    with pytest.raises(NoMessagesError):
        sub.fetch(1, timeout=0.2)
