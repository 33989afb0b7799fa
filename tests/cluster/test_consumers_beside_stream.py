"""Durable consumers of a dedicated stream run inside their stream's replica actors: an R3
stream with R3 consumers is three processes, and a consumer replica whose stream replica
goes away runs on in its node's replica host with its state."""

from __future__ import annotations

import dataclasses
import time

import pytest
import ray

from rayjet import ConsumerConfig, StreamConfig
from rayjet.actors.host import HostedHandle, hosted_names
from rayjet.actors.names import stream_actor_name
from rayjet.api import AckPolicy
from tests.cluster.test_quiescence import publish_retrying
from tests.replicas import consumer_replicas, kill, pid, stream_replicas

pytestmark = pytest.mark.usefixtures("drop_new_streams")


def _stream(js, name: str, replicas: int = 3) -> None:
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=replicas,
                               hosting="dedicated"))
    for i in range(10):
        publish_retrying(js, f"{name}.a", b"%d" % i, f"m{i}")


def _fetch_ack(sub, count: int) -> list[int]:
    seqs = []
    while len(seqs) < count:
        for m in sub.fetch(count - len(seqs), timeout=10):
            m.ack_sync()
            seqs.append(m.metadata.sequence.stream)
    return seqs


def _wait_restarted(handle, old_pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if pid(handle, timeout=10) != old_pid:
                return
        except ray.exceptions.RayError:
            pass  # the old process is going, the new one is starting
        assert time.monotonic() < deadline, "the killed replica actor did not come back"
        time.sleep(0.05)


def test_an_r3_stream_with_r3_consumers_is_three_processes(js, stream_name):
    name = stream_name
    _stream(js, name)
    subs = {}
    for durable in ("A", "B"):
        js.add_consumer(name, ConsumerConfig(durable_name=durable,
                                             ack_policy=AckPolicy.EXPLICIT))
        subs[durable] = js.pull_subscribe(f"{name}.a", durable=durable, stream=name)
    assert _fetch_ack(subs["A"], 4) == [1, 2, 3, 4]
    assert _fetch_ack(subs["B"], 2) == [1, 2]

    streams = stream_replicas(js, name)
    consumers = [h for d in subs for h in consumer_replicas(js, name, d).values()]
    assert len(consumers) == 6
    assert all(isinstance(h, HostedHandle) for h in consumers)
    processes = {pid(h) for h in [*streams.values(), *consumers]}
    assert len(processes) == 3
    assert {pid(h) for h in streams.values()} == processes
    named = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert not [n for n in named if n.startswith("rayjet.consumer.")]

    # the state lives on: a stream actor (with the consumer replicas beside it) killed
    for handle in streams.values():
        before = pid(handle)
        kill(handle)
        # a kill is asynchronous: fetch only once the old process is gone, or it may
        # deliver 5 and 6 and die before answering (then they come back after ack_wait)
        _wait_restarted(handle, before)
        break
    assert _fetch_ack(subs["A"], 2) == [5, 6]
    assert js.consumer_info(name, "B").ack_floor.stream_seq == 2

    groups = {d: js._meta_call("consumer_assignment", name, d)["group"] for d in subs}
    js.delete_consumer(name, "A")
    assert not _hosted_of_group(groups["A"])
    assert len(_hosted_of_group(groups["B"])) == 3


def _hosted_of_group(group: str) -> dict[str, str]:
    """Replica name -> the process (host or stream replica actor) of consumer ``group``."""
    return {n: h for n, h in hosted_names().items() if n.startswith(f"rayjet.consumer.{group}.")}


def test_consumer_replicas_move_to_a_host_when_their_stream_replica_goes(js, stream_name):
    name = stream_name
    _stream(js, name)
    js.add_consumer(name, ConsumerConfig(durable_name="WORK", ack_policy=AckPolicy.EXPLICIT))
    sub = js.pull_subscribe(f"{name}.a", durable="WORK", stream=name)
    assert _fetch_ack(sub, 5) == [1, 2, 3, 4, 5]
    a = js._meta_call("stream_assignment", name)
    before = {stream_actor_name(a["group"], rid) for rid, _ in a["peers"]}

    js.update_stream(dataclasses.replace(js.stream_info(name).config, num_replicas=1))
    a = js._meta_call("stream_assignment", name)
    after = {stream_actor_name(a["group"], rid) for rid, _ in a["peers"]}
    gone = before - after
    assert len(gone) == 2
    group = js._meta_call("consumer_assignment", name, "WORK")["group"]
    where = _hosted_of_group(group)
    assert len(where) == 3
    assert not set(where.values()) & gone  # none is left in a replica that is gone
    assert len([h for h in where.values() if h.startswith("rayjet.host.")]) == 2

    info = js.consumer_info(name, "WORK")
    assert info.ack_floor.stream_seq == 5 and info.num_ack_pending == 0
    assert _fetch_ack(sub, 5) == [6, 7, 8, 9, 10]
    publish_retrying(js, f"{name}.a", b"10", "m10")
    assert _fetch_ack(sub, 1) == [11]
