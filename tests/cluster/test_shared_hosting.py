"""Replicas in shared host actors: many groups in one process, the same behaviour, and a
killed host loses nothing acknowledged."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import threading
import time

import pytest
import ray

import rayjet
from rayjet import ConsumerConfig, StreamConfig
from rayjet.actors import stream_replicas
from rayjet.actors.host import find_replica, hosted_names
from rayjet.actors.host_pools import host_on
from rayjet.actors.names import NAMESPACE
from rayjet.actors.replica_actors import stop_replica
from rayjet.api import AckPolicy
from rayjet.errors import BadRequestError, InvalidConfigError
from rayjet.meta import StreamAssignment
from tests.cluster.test_quiescence import publish_retrying
from tests.waiting import wait_for

pytestmark = pytest.mark.usefixtures("drop_new_streams")


def actor_names() -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}


def hosted_of(stream: str) -> dict[str, str]:
    return {name: host for name, host in hosted_names().items() if f".{stream}-" in name}


def stored(js, stream):
    """msg id -> count of the messages the stream holds, read from its leader."""
    info = js.stream_info(stream)
    _, router = js._stream(stream)
    got = router.call("read_range", 1, info.state.last_seq, max_msgs=1_000_000, timeout=30)
    counts: dict[bytes, int] = {}
    for data in got["data"]:
        counts[data] = counts.get(data, 0) + 1
    return counts


class Publisher(threading.Thread):
    """Publishes distinct payloads with a Nats-Msg-Id, retrying each until acked."""

    def __init__(self, js, subject: str) -> None:
        super().__init__(daemon=True)
        self.js, self.subject = js, subject
        self.acked: list[bytes] = []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            data = b"%s-%d" % (self.subject.encode(), i)
            try:
                self.js.publish(self.subject, data, headers={"Nats-Msg-Id": data.decode()},
                                timeout=20)
            except Exception:  # noqa: BLE001 - the host is restarting: the same id again
                continue
            self.acked.append(data)
            i += 1

    def wait_count(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < n:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acked"
            time.sleep(0.05)


def test_a_shared_stream_and_its_consumers_run_in_hosts(js, stream_name):
    name = stream_name
    info = js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3,
                                      hosting="shared"))
    assert info.config.hosting == "shared"
    js.add_consumer(name, ConsumerConfig(durable_name="D", ack_policy=AckPolicy.EXPLICIT))
    hosted = hosted_of(name)
    assert len([n for n in hosted if n.startswith("rayjet.stream.")]) == 3
    assert len([n for n in hosted if n.startswith("rayjet.consumer.")]) == 3
    assert not set(hosted) & actor_names()  # no actor of their own
    assert set(hosted.values()) <= actor_names()  # their hosts
    for i in range(20):
        js.publish(f"{name}.a", b"%d" % i)
    sub = js.pull_subscribe(durable="D", stream=name)
    msgs = sub.fetch(20, timeout=10)
    assert [m.data for m in msgs] == [b"%d" % i for i in range(20)]
    for m in msgs:
        m.ack_sync()
    assert js.consumer_info(name, "D").ack_floor.stream_seq == 20
    some, host = next(iter(hosted.items()))
    handle = ray.get_actor(host, namespace=NAMESPACE)
    for method in ("no_such_method", "_stop"):
        with pytest.raises(BadRequestError):
            ray.get(handle.call.remote(some, method, (), {}), timeout=30)

    js.delete_stream(name)
    assert hosted_of(name) == {}


def test_hosting_defaults_and_rules(js, stream_name, ray_session, tmp_path):
    name = stream_name
    plain = rayjet.connect(data_dir=js.data_dir)  # rayjet's defaults, whatever the suite's
    try:
        assert plain.add_stream(name=name, subjects=[f"{name}.>"]).config.hosting == "shared"
        assert hosted_of(name)  # its replica runs in a replica host (recorded at once)
        with pytest.raises(InvalidConfigError):
            plain.update_stream(name=name, subjects=[f"{name}.>"], hosting="dedicated")
        # an update that leaves hosting unset keeps the stream's own
        assert plain.update_stream(name=name, subjects=[f"{name}.>"],
                                   max_msgs=5).config.hosting == "shared"
        with pytest.raises(InvalidConfigError):
            plain.add_stream(name=name + "X", subjects=[f"{name}x.>"], hosting="everywhere")
        kv = plain.create_key_value(bucket=name + "KV")
        assert js.stream_info(f"KV_{name}KV").config.hosting == "shared"
        kv.put("k", b"v")
        assert kv.get("k").value == b"v"
        assert plain.create_key_value(bucket=name + "KV").get("k").value == b"v"  # same one
    finally:
        plain.close()
    dedicated = rayjet.connect(data_dir=js.data_dir, hosting="dedicated")
    try:
        dedicated.create_key_value(bucket=name + "KD")
        assert js.stream_info(f"KV_{name}KD").config.hosting is None
        assert not hosted_of(f"KV_{name}KD")
    finally:
        dedicated.close()


def test_killing_a_shared_host_under_load_loses_no_acked_message(js, stream_name):
    names = [f"{stream_name}A", f"{stream_name}B"]
    for name in names:
        js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3,
                                   hosting="shared"))
    r1 = f"{stream_name}C"  # a single replica: it is down until its host is back
    js.add_stream(StreamConfig(name=r1, subjects=[f"{r1}.>"], hosting="shared"))
    names.append(r1)
    pubs = [Publisher(js, f"{name}.x") for name in names]
    for p in pubs:
        p.start()
    try:
        for p in pubs:
            p.wait_count(30)
        victim = hosted_of(r1)[next(iter(hosted_of(r1)))]
        ray.kill(ray.get_actor(victim, namespace=NAMESPACE), no_restart=False)
        at_kill = [len(p.acked) for p in pubs]
        for p, n in zip(pubs, at_kill, strict=True):
            p.wait_count(n + 30, timeout=90)
    finally:
        for p in pubs:
            p.stop.set()
        for p in pubs:
            p.join(timeout=60)
    for name, p in zip(names, pubs, strict=True):
        counts = stored(js, name)
        assert all(counts.get(data) == 1 for data in p.acked), name  # each acked one once
        assert js.stream_info(name).state.messages >= len(p.acked)


def test_a_shared_stream_scales_up_and_down_live(js, stream_name):
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], hosting="shared"))
    for i in range(10):
        js.publish(f"{name}.a", b"%d" % i)
    cfg = js.stream_info(name).config
    js.update_stream(dataclasses.replace(cfg, num_replicas=3))
    assert len(hosted_of(name)) == 3
    for i in range(10, 20):
        js.publish(f"{name}.a", b"%d" % i)
    js.update_stream(dataclasses.replace(cfg, num_replicas=1))
    assert len(hosted_of(name)) == 1  # the removed replicas left their hosts
    assert stored(js, name) == {b"%d" % i: 1 for i in range(20)}


def _assignment(js, name: str) -> StreamAssignment:
    a = js._meta_call("stream_assignment", name)
    return StreamAssignment(StreamConfig.from_dict(a["config"]), a["created_ns"], a["group"],
                            tuple((rid, node) for rid, node in a["peers"]))


def _group_members(sa: StreamAssignment) -> tuple[set[str], set[str]]:
    async def progress():
        _, leader = await stream_replicas.find_leader(sa)
        return await leader.progress.remote()
    p = asyncio.run(progress())
    return set(p["voters"]), set(p["learners"])


def test_a_change_cut_short_is_finished_by_the_next(js, stream_name):
    """A membership change that stopped half way (a retried call, a meta leader gone) leaves
    replicas the catalogue does not name; the next update keeps or removes them."""
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], hosting="shared"))
    for i in range(5):
        js.publish(f"{name}.a", b"%d" % i)
    data_dir = js._meta_call("cluster_info")["data_dir"]
    sa = _assignment(js, name)
    (_, node), = sa.peers
    # the first steps of a change to R2 ran (replica r7 joined as a voter); its commit did not
    two = dataclasses.replace(sa.config, num_replicas=2)
    asyncio.run(stream_replicas.apply_stream_update(sa, two, (*sa.peers, ("r7", node)), data_dir))
    assert _group_members(sa) == ({"r0", "r7"}, set())
    assert len(hosted_of(name)) == 2

    js.update_stream(dataclasses.replace(sa.config, num_replicas=3))
    sa = _assignment(js, name)
    peers = {rid for rid, _ in sa.peers}
    assert len(peers) == 3 and "r7" in peers  # the leftover voter was kept, not duplicated
    assert _group_members(sa) == (peers, set())
    assert len(hosted_of(name)) == 3

    # a learner left by a cut-short growth is dropped by the next change of any kind
    extra = stream_replicas.create_replica(sa, "r9", node, data_dir)
    ray.get(extra.ping.remote(), timeout=60)
    _, leader = asyncio.run(stream_replicas.find_leader(sa))
    ray.get(leader.change_membership.remote("learner", "r9"), timeout=30)
    assert _group_members(sa) == (peers, {"r9"})
    js.update_stream(dataclasses.replace(sa.config, description="again"))
    assert _group_members(_assignment(js, name)) == (peers, set())
    assert len(hosted_of(name)) == 3
    js.publish(f"{name}.a", b"5")
    assert stored(js, name) == {b"%d" % i: 1 for i in range(6)}


def test_a_removal_cut_short_grows_the_group_again(js, stream_name):
    """The converse: a removal ran in the stream's group but its catalogue commit did not.
    The catalogue still names the replica; the next update counts it as gone, places the
    stream again and stops the removed replica, so group and catalogue agree."""
    name = stream_name
    js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3,
                               hosting="shared"))
    for i in range(3):
        publish_retrying(js, f"{name}.a", b"%d" % i, f"m{i}")
    data_dir = js._meta_call("cluster_info")["data_dir"]
    sa = _assignment(js, name)
    kept = sa.peers[:2]
    two = dataclasses.replace(sa.config, num_replicas=2)
    removed = asyncio.run(stream_replicas.apply_stream_update(sa, two, kept, data_dir))
    assert _group_members(sa) == ({rid for rid, _ in kept}, set())
    assert len(removed) == 1 and removed[0] in hosted_of(name)  # cut short before its stop

    js.update_stream(dataclasses.replace(sa.config, description="after the cut"))
    sa = _assignment(js, name)
    peers = {rid for rid, _ in sa.peers}
    assert len(peers) == 3 and removed[0].rsplit(".", 1)[1] not in peers
    assert _group_members(sa) == (peers, set())
    assert removed[0] not in hosted_of(name)
    assert len([n for n in hosted_of(name) if n.startswith("rayjet.stream.")]) == 3
    publish_retrying(js, f"{name}.a", b"3", "m3")
    assert stored(js, name) == {b"%d" % i: 1 for i in range(4)}


def hosted_statuses(stream: str) -> dict[str, dict]:
    """Status of each stream replica of ``stream`` (replica name -> status)."""
    names = [n for n in hosted_of(stream) if n.startswith("rayjet.stream.")]
    return {n: ray.get(find_replica(n).status.remote(), timeout=30) for n in names}


def test_a_paused_host_holds_up_none_of_its_groups(js, stream_name):
    """SIGSTOP is no death Ray reports: the groups with a replica in the paused host
    elect leaders in the other hosts and take writes; the paused replicas catch up."""
    names = [f"{stream_name}A", f"{stream_name}B"]
    for name in names:
        js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3,
                                   hosting="shared"))
        for i in range(3):
            publish_retrying(js, f"{name}.a", b"%d" % i, f"m{i}")
    hosts = hosted_of(names[0])
    assert len({h for n, h in hosts.items() if n.startswith("rayjet.stream.")}) == 3
    lead = next(n for n, st in hosted_statuses(names[0]).items() if st["role"] == "Leader")
    host = ray.get_actor(hosts[lead], namespace=NAMESPACE)
    pid = ray.get(host.__ray_call__.remote(lambda self: os.getpid()), timeout=30)
    os.kill(pid, signal.SIGSTOP)
    try:
        for name in names:
            ack = publish_retrying(js, f"{name}.a", b"while paused", "paused", timeout=90)
            assert ack.seq == 4
    finally:
        os.kill(pid, signal.SIGCONT)
    for name in names:
        deadline = time.monotonic() + 60
        while True:
            seqs = {n: st["last_seq"] for n, st in hosted_statuses(name).items()}
            if set(seqs.values()) == {4}:
                break
            assert time.monotonic() < deadline, seqs
            time.sleep(0.2)
        assert stored(js, name) == {b"0": 1, b"1": 1, b"2": 1, b"while paused": 1}


def test_stopping_a_replica_that_does_not_run_is_a_bad_request(js):
    with pytest.raises(BadRequestError):
        stop_replica("rayjet.stream.NOSUCHGROUP-1.r0")


@pytest.mark.parametrize("replicas", [1, 3])
def test_a_new_shared_stream_answers_with_what_its_leader_then_says(js, stream_name, replicas):
    """A new stream in shared hosts answers before its replicas run: the info it answers
    is what its leader says once it runs (defaults filled in, first_seq honoured), and the
    first publish right after is stored where first_seq says."""
    cfg = StreamConfig(name=stream_name, num_replicas=replicas, first_seq=41,
                       allow_msg_ttl=True, hosting="shared")
    created = js.add_stream(cfg)
    ack = js.publish(stream_name, b"first", timeout=20)
    assert ack.seq == 41
    later = js.stream_info(stream_name)
    assert created.config == later.config
    assert list(created.config.subjects) == [stream_name]  # a default filled in
    assert created.created == later.created
    assert (created.state.messages, created.state.first_seq, created.state.last_seq) == (0, 41, 40)
    assert (later.state.messages, later.state.first_seq, later.state.last_seq) == (1, 41, 41)
    # the same creation again is answered by the leader, as it stands now
    again = js.add_stream(cfg)
    assert again.state.messages == 1


def test_a_new_shared_stream_is_ready_for_a_consumer_at_once(js, stream_name):
    js.add_stream(name=stream_name, subjects=[f"{stream_name}.>"], hosting="shared")
    js.add_consumer(stream_name, ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))
    js.publish(f"{stream_name}.a", b"x", timeout=20)
    msgs = js.pull_subscribe(f"{stream_name}.a", "d", stream=stream_name).fetch(1, timeout=20)
    assert [m.data for m in msgs] == [b"x"]


def test_a_place_that_runs_after_its_remove_starts_nothing(js, stream_name):
    """Calls to a host may run out of order: a stream deleted right after its creation can
    have its replica removed before the place that starts it runs. That place starts
    nothing and leaves no record, instead of an orphan running until reconciliation."""
    from rayjet.actors.host import NotHostedError, hosted_on
    from rayjet.actors.names import stream_actor_name

    cfg = StreamConfig(name=stream_name, hosting="shared")
    group = f"{stream_name}-987654"
    name = stream_actor_name(group, "r0")
    node = ray.get_runtime_context().get_node_id()
    _, host = host_on(node, name, js.data_dir, cfg)
    assert ray.get(host.remove.remote(name), timeout=30) is False
    args = (cfg.to_dict(), group, "r0", ["r0"], str(js.data_dir))
    with pytest.raises(NotHostedError):
        ray.get(host.place.remote(name, "stream", args, {"created_ns": 1}), timeout=30)
    assert name not in ray.get(host.names.remote(), timeout=30)
    assert hosted_on(name) is None


def test_streams_deleted_as_soon_as_made_leave_no_replica(js, stream_name):
    names = [f"{stream_name}X{i}" for i in range(10)]
    for name in names:
        js.add_stream(name=name, subjects=[f"{name}.>"], hosting="shared")
        js.delete_stream(name)
    deadline = time.monotonic() + 30
    while any(hosted_of(n) for n in names):
        assert time.monotonic() < deadline, {n: hosted_of(n) for n in names if hosted_of(n)}
        time.sleep(0.1)


def test_a_host_created_again_under_its_name_is_listed(js, stream_name):
    """A listing that kept the handle of a host killed for good still finds the replicas
    its successor (created again under the same name) runs."""
    from rayjet.actors.replica_collection import running_replicas

    js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"],
                               hosting="shared"))
    js.publish(f"{stream_name}.a", b"before")
    (replica, host), = hosted_of(stream_name).items()
    assert replica in asyncio.run(running_replicas())  # keeps the host's handle
    ray.kill(ray.get_actor(host, namespace=NAMESPACE), no_restart=True)
    # the meta's reconciliation places the replica again, in a new host of the same name
    wait_for(lambda: ray.get(find_replica(replica).ping.remote(), timeout=10), timeout=60,
             what="the replica running again", retry_on=(ValueError, ray.exceptions.RayError))
    assert hosted_of(stream_name) == {replica: host}
    assert replica in asyncio.run(running_replicas())


def test_a_new_consumer_runs_in_its_stream_replicas_host(js, stream_name):
    """Its reads of the stream are then method calls, not requests to another process.
    (Hosts are picked per replica name otherwise: one in three would match by chance.)"""
    from rayjet.actors.host import hosted_on
    from rayjet.actors.names import consumer_actor_name, stream_actor_name

    names = [f"{stream_name}B{i}" for i in range(5)]
    try:
        for name in names:
            js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], hosting="shared"))
            js.add_consumer(name, ConsumerConfig(durable_name="D",
                                                 ack_policy=AckPolicy.EXPLICIT))
        for name in names:
            sa = js._meta_call("stream_assignment", name)
            ca = js._meta_call("consumer_assignment", name, "D")
            (srid, _), (crid, _) = sa["peers"][0], ca["peers"][0]
            stream_host = hosted_on(stream_actor_name(sa["group"], srid))
            assert stream_host is not None
            assert hosted_on(consumer_actor_name(ca["group"], crid)) == stream_host, name
        js.publish(f"{names[0]}.a", b"x")
        sub = js.pull_subscribe(durable="D", stream=names[0])
        assert [m.data for m in sub.fetch(1, timeout=10)] == [b"x"]
    finally:
        for name in names:
            js.delete_stream(name)
