"""A new R1 stream in a shared host rests, placed but not started, until something needs
more of it than its info: then it starts, stores and restarts like any replica."""

from __future__ import annotations

import time

import pytest
import ray

from rayjet import StreamConfig
from rayjet.actors.host import hosted_on
from rayjet.actors.names import NAMESPACE, stream_actor_name
from rayjet.actors.on_demand import replica_dir

pytestmark = pytest.mark.usefixtures("drop_new_streams")


def _replica(js, stream: str) -> tuple[str, str, object]:
    """(replica name, its host's name, its directory) of an R1 stream."""
    sa, _ = js._stream(stream, refresh=True)
    rid = sa["peers"][0][0]
    name = stream_actor_name(sa["group"], rid)
    data_dir = js.meta_cluster()["data_dir"]  # the cluster's, whatever this client's is
    return name, hosted_on(name), replica_dir(data_dir, sa["group"], rid)


def _host(host_name: str):
    return ray.get_actor(host_name, namespace=NAMESPACE)


def _wait_listed(host_name: str, name: str, listed: bool = True) -> None:
    """Until the host lists ``name`` (or no longer does): a place is not waited for."""
    deadline = time.monotonic() + 30
    while (name in ray.get(_host(host_name).names.remote(), timeout=30)) != listed:
        assert time.monotonic() < deadline, f"{host_name} listed={not listed} {name}"
        time.sleep(0.05)


def test_a_new_r1_stream_rests_until_a_publish_starts_it(js, stream_name):
    created = js.add_stream(StreamConfig(name=stream_name, subjects=[f"{stream_name}.>"],
                                         hosting="shared"))
    name, host_name, path = _replica(js, stream_name)
    _wait_listed(host_name, name)
    info = js.stream_info(stream_name)  # answered by the host from what it placed
    assert not path.exists()  # nothing started: no store, no raft log
    assert info.config == created.config and info.created == created.created
    assert (info.state.messages, info.state.last_seq) == (0, 0)
    assert info.cluster.leader == created.cluster.leader

    ack = js.publish(f"{stream_name}.a", b"one", timeout=20)
    assert ack.seq == 1
    assert path.exists()
    assert js.stream_info(stream_name).state.messages == 1


def test_a_resting_stream_is_deleted_and_made_again(js, stream_name):
    js.add_stream(StreamConfig(name=stream_name, hosting="shared"))
    name, host_name, _ = _replica(js, stream_name)
    _wait_listed(host_name, name)
    assert js.delete_stream(stream_name)
    _wait_listed(host_name, name, listed=False)
    assert hosted_on(name) is None
    js.add_stream(StreamConfig(name=stream_name, hosting="shared"))
    assert js.publish(stream_name, b"again", timeout=20).seq == 1


def test_a_restarted_host_keeps_resting_replicas_resting(js, stream_name):
    """A host restarted by Ray starts what ran (its data back) and leaves what rested at
    rest; both answer as before."""
    used, idle = f"{stream_name}U", f"{stream_name}I"
    for name in (used, idle):
        js.add_stream(StreamConfig(name=name, hosting="shared"))
    for i in range(3):
        js.publish(used, b"m%d" % i, timeout=20)
    hosts = {_replica(js, name)[1] for name in (used, idle)}
    for host_name in hosts:
        ray.kill(_host(host_name), no_restart=False)
    deadline = time.monotonic() + 90
    while True:  # the host comes back under its name (Ray restarts it)
        try:
            info = js.stream_info(used)
            break
        except Exception:  # noqa: BLE001 - restarting
            assert time.monotonic() < deadline, "the host did not come back"
            time.sleep(0.2)
    assert info.state.messages == 3
    _, _, idle_path = _replica(js, idle)
    assert js.stream_info(idle).state.messages == 0
    assert not idle_path.exists()
    assert js.publish(idle, b"late", timeout=20).seq == 1
    assert idle_path.exists()


def test_a_listing_answers_as_each_stream_does(js, stream_name):
    """Infos of hosted streams are asked of each host at once; what they say is what each
    stream says alone (resting, running with messages, R3, and a dedicated one beside)."""
    made = {f"{stream_name}R": dict(hosting="shared"),
            f"{stream_name}M": dict(hosting="shared"),
            f"{stream_name}T": dict(hosting="shared", num_replicas=3),
            f"{stream_name}D": dict(hosting="dedicated")}
    for name, kw in made.items():
        js.add_stream(StreamConfig(name=name, **kw))
    for name in (f"{stream_name}M", f"{stream_name}T", f"{stream_name}D"):
        js.publish(name, b"x", timeout=20)
    listed = js.stream_infos(list(made))
    for name in made:
        alone = js.stream_info(name)
        assert listed[name].config == alone.config, name
        assert listed[name].state == alone.state, name
        assert listed[name].cluster.leader == alone.cluster.leader, name
    assert listed[f"{stream_name}R"].state.messages == 0
    assert listed[f"{stream_name}M"].state.messages == 1
    _, _, path = _replica(js, f"{stream_name}R")
    assert not path.exists()  # a listing leaves a resting stream at rest
