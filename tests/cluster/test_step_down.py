"""Leader step-downs ($JS.API.*.LEADER.STEPDOWN): leadership moves to another replica,
nothing acknowledged is lost, and work goes on with the new leader."""

from __future__ import annotations

import pytest

from rayjet import ConsumerConfig, StorageType
from rayjet.api import AckPolicy
from rayjet.errors import ConsumerNotFoundError, StreamNotFoundError

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
