"""Cluster administration: leader step-downs ($JS.API.*.LEADER.STEPDOWN) move the
leadership to another replica, and a peer removal ($JS.API.STREAM.PEER.REMOVE) swaps a
replica for a new one; nothing acknowledged is lost and work goes on."""

from __future__ import annotations

import pytest

from rayjet import ConsumerConfig, StorageType
from rayjet.api import AckPolicy
from rayjet.errors import APIError, BadRequestError, ConsumerNotFoundError, StreamNotFoundError
from tests.cluster.test_faults import wait_replicas_equal

pytestmark = pytest.mark.usefixtures("drop_new_streams")


def test_a_stream_leader_steps_down_and_publishing_goes_on(js, stream_name):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3,
                  storage=StorageType.FILE)
    for i in range(20):
        js.publish(f"{stream_name}.a", b"m%d" % i, timeout=20)
    before = js.stream_info(stream_name).cluster.leader
    after = js.stream_leader_stepdown(stream_name)
    assert after is not None and after != before
    assert js.stream_info(stream_name).cluster.leader == after
    ack = js.publish(f"{stream_name}.a", b"m20", timeout=20)
    assert ack.seq == 21
    assert [js.get_msg(stream_name, s).data for s in (1, 21)] == [b"m0", b"m20"]
    # and again: leadership keeps moving, each time to a replica that has everything
    again = js.stream_leader_stepdown(stream_name)
    assert again not in (None, after)
    assert js.stream_info(stream_name).state.messages == 21


def test_an_r1_stream_keeps_its_leader_and_unknown_names_are_not_found(js, stream_name):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    assert js.stream_leader_stepdown(stream_name) is None
    js.publish(f"{stream_name}.a", b"x", timeout=20)
    with pytest.raises(StreamNotFoundError):
        js.stream_leader_stepdown(stream_name + "NOPE")


def test_a_consumer_leader_steps_down_and_delivery_goes_on(js, stream_name):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3)
    for i in range(10):
        js.publish(f"{stream_name}.a", b"m%d" % i, timeout=20)
    js.add_consumer(stream_name, ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT,
                                                num_replicas=3))
    sub = js.pull_subscribe(f"{stream_name}.a", "d", stream=stream_name)
    first = sub.fetch(5, timeout=20)
    for m in first:
        m.ack_sync()
    moved = js.consumer_leader_stepdown(stream_name, "d")
    assert moved is not None
    rest = sub.fetch(5, timeout=20)
    assert [m.data for m in first + rest] == [b"m%d" % i for i in range(10)]
    for m in rest:
        m.ack_sync()
    info = js.consumer_info(stream_name, "d")
    assert (info.num_pending, info.num_ack_pending, info.ack_floor.stream_seq) == (0, 0, 10)
    with pytest.raises(ConsumerNotFoundError):
        js.consumer_leader_stepdown(stream_name, "nope")


def test_the_meta_leader_steps_down_and_the_catalogue_goes_on(js, stream_name):
    new = js.meta_leader_stepdown()
    assert new is not None
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"])
    assert stream_name in js.stream_names()


def test_a_removed_peer_is_replaced_and_the_stream_keeps_every_message(js, stream_name):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], num_replicas=3,
                  storage=StorageType.FILE)
    for i in range(30):
        js.publish(f"{stream_name}.a", b"m%d" % i, timeout=20)
    info = js.stream_info(stream_name)
    before = {info.cluster.leader, *(r.name for r in info.cluster.replicas)}
    victim = info.cluster.leader  # the hardest case: leadership moves off it first
    after = js.stream_peer_remove(stream_name, victim)
    now = {after.cluster.leader, *(r.name for r in after.cluster.replicas)}
    assert victim not in now and len(now) == 3 and len(now - before) == 1
    assert after.config.num_replicas == 3 and after.state.messages == 30
    js.publish(f"{stream_name}.a", b"m30", timeout=20)
    stored = wait_replicas_equal(js, stream_name, 31)
    assert [data for _, data in stored] == [b"m%d" % i for i in range(31)]
    with pytest.raises(APIError) as err:
        js.stream_peer_remove(stream_name, victim)  # gone now
    assert err.value.err_code == 10040
    with pytest.raises(BadRequestError):
        js.stream_peer_remove(stream_name, "")
    with pytest.raises(StreamNotFoundError):
        js.stream_peer_remove(stream_name + "NOPE", "r0")
