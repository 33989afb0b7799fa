"""Scaling and deleting leave nothing behind: no replica id is reused, no raft message goes
to a dead handle, and a delete cut short by a meta member's death is finished by the next
meta leader's reconciliation."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import ray

from rayjet import ConsumerConfig, StorageType, StreamConfig
from rayjet.actors.names import META_MEMBERS, NAMESPACE, meta_actor_name, meta_member_id
from rayjet.actors.replica_collection import running_replicas
from tests.cluster.test_faults import replica_handles, wait_replicas_equal
from tests.waiting import wait_for


def _live_names(prefix):
    """Replicas that run, dedicated or hosted, whose names start with ``prefix``."""
    return sorted(n for n in asyncio.run(running_replicas()) if n.startswith(prefix))


def test_r3_r1_r3_r5_while_publishing_reuses_no_id_and_calls_no_dead_handle(js, stream_name):
    name = stream_name
    cfg = StreamConfig(name=name, subjects=[f"{name}.*"], num_replicas=3,
                       storage=StorageType.FILE)
    js.add_stream(cfg)
    acked: dict[int, bytes] = {}
    errors: list[BaseException] = []
    stop = threading.Event()

    def publisher():
        i = 0
        while not stop.is_set():
            data = b"m%d" % i
            try:
                ack = js.publish(f"{name}.a", data, headers={"Nats-Msg-Id": f"{i}"}, timeout=60)
                acked[ack.seq] = data
            except BaseException as err:  # recorded: the test fails on any error
                errors.append(err)
                return
            i += 1

    group = js._stream(name, refresh=True)[0]["group"]
    ever = set(replica_handles(js, name))
    removed: set[str] = set()
    thread = threading.Thread(target=publisher)
    thread.start()
    try:
        for replicas in (1, 3, 5):
            before = set(replica_handles(js, name))
            info = js.update_stream(StreamConfig(**{**cfg.__dict__, "num_replicas": replicas}))
            assert info.config.num_replicas == replicas
            now = set(replica_handles(js, name))
            assert len(now) == replicas
            assert not (now - before) & ever, f"replica ids reused: {(now - before) & ever}"
            removed |= before - now
            ever |= now
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not errors, errors
    assert len(removed) == 2 and len(ever) == 7
    for rid in removed:  # removed replicas are gone for good, not left running
        assert _live_names(f"rayjet.stream.{group}.{rid}") == []
    last = js.stream_info(name).state.last_seq
    stored = dict(wait_replicas_equal(js, name, last))
    assert stored == acked  # every acked message, once, at its sequence

    def transports():
        return {rid: ray.get(handle.status.remote(), timeout=30)["transport"]
                for rid, handle in replica_handles(js, name).items()}

    settled = transports()
    for i in range(50):  # the group at work after the changes: raft between the five
        js.publish(f"{name}.a", b"after %d" % i, timeout=60)
    wait_replicas_equal(js, name, last + 50)
    for rid, transport in transports().items():
        assert transport["to_removed"] == 0, (rid, transport)  # no message to a removed id
        # no call reaches a dead actor once the changes are done (one already on its way
        # when a replica was removed may find it gone: nothing is lost, raft moves on)
        assert transport["failed"] == settled[rid]["failed"], (rid, transport)
    js.delete_stream(name)


def cluster_data_dir(js) -> Path:
    """Where the replicas keep their data: the meta group's data dir (whoever started the
    meta group first chose it), not necessarily this connection's."""
    return Path(js.meta_cluster()["data_dir"])


def _meta_leader():
    for i in range(META_MEMBERS):
        handle = ray.get_actor(meta_actor_name(meta_member_id(i)), namespace=NAMESPACE)
        try:
            if ray.get(handle.status.remote(), timeout=10)["role"] == "Leader":
                return handle
        except ray.exceptions.RayError:
            continue
    return None


def test_delete_cut_short_by_a_meta_death_is_finished_by_reconciliation(
        js, stream_name, drop_new_streams):
    name, keep = stream_name, f"{stream_name}K"
    js.add_stream(name=keep, subjects=[f"{keep}.*"], num_replicas=1, storage=StorageType.FILE)
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=3, storage=StorageType.FILE)
    js.add_consumer(name, ConsumerConfig(durable_name="D", num_replicas=1))
    js.publish(f"{name}.a", b"x")
    group = js._stream(name, refresh=True)[0]["group"]
    cgroup = js._meta_call("consumer_assignment", name, "D")["group"]
    keep_actors = _live_names(f"rayjet.stream.{js._stream(keep)[0]['group']}.")
    assert len(_live_names(f"rayjet.stream.{group}.")) == 3
    assert len(_live_names(f"rayjet.consumer.{cgroup}.")) == 1
    group_dir = cluster_data_dir(js) / "streams" / group
    assert group_dir.is_dir()

    def hold_teardown(member):
        """Inside the meta member: deletes commit, then their teardown never runs."""
        import asyncio

        from rayjet.actors import consumer_replicas, stream_replicas

        async def never(*_args, **_kwargs):
            await asyncio.Event().wait()

        stream_replicas.destroy_stream_replicas = never
        consumer_replicas.destroy_consumer_replicas = never
        return member.id

    leader = wait_for(_meta_leader, 60, "a meta leader", interval=0.2)
    ray.get(leader.__ray_call__.remote(hold_teardown), timeout=30)  # defined here: by value
    pending = leader.delete_stream.remote(name)
    wait_for(lambda: name not in js.stream_names(), 60, "the delete committed", interval=0.2)
    # committed, but the member that committed it has not torn anything down
    assert len(_live_names(f"rayjet.stream.{group}.")) == 3
    ray.kill(leader, no_restart=False)  # Ray restarts it; another member takes over
    try:
        ray.get(pending, timeout=30)
    except ray.exceptions.RayError:
        pass

    wait_for(lambda: not _live_names(f"rayjet.stream.{group}.")
             and not _live_names(f"rayjet.consumer.{cgroup}."),
             60, "the deleted stream's replicas collected", interval=0.2)
    wait_for(lambda: not group_dir.exists(), 60, "the deleted stream's directory removed",
             interval=0.2)
    # a stream still in the catalogue keeps its replicas and serves
    assert _live_names(f"rayjet.stream.{js._stream(keep)[0]['group']}.") == keep_actors
    assert js.publish(f"{keep}.a", b"still here", timeout=30).seq == 1


def test_a_replica_outside_its_groups_peers_is_collected(js, stream_name, drop_new_streams):
    from rayjet.actors.stream_replicas import create_replica
    from rayjet.meta import StreamAssignment

    name = stream_name
    js.add_stream(name=name, subjects=[f"{name}.*"], num_replicas=1,
                  storage=StorageType.MEMORY)
    assignment = js._stream(name, refresh=True)[0]
    group = assignment["group"]
    # a replica whose removal was cut short: named in the group, not among its peers, and
    # (a group of its own) not a member the group counts
    stray = StreamAssignment(StreamConfig.from_dict(assignment["config"]), 0, group,
                             (("r7", ""),), bootstrap=("r7",))
    ray.get(create_replica(stray, "r7", None, cluster_data_dir(js)).ping.remote(), timeout=30)
    assert _live_names(f"rayjet.stream.{group}.") == [f"rayjet.stream.{group}.{r}"
                                                      for r in ("r0", "r7")]
    leader = wait_for(_meta_leader, 60, "a meta leader", interval=0.2)
    stats = ray.get(leader.collect_orphans.remote(), timeout=60)
    assert stats["actors"] >= 1
    wait_for(lambda: _live_names(f"rayjet.stream.{group}.") == [f"rayjet.stream.{group}.r0"],
             60, "the stray replica collected", interval=0.2)
    assert js.publish(f"{name}.a", b"served", timeout=30).seq == 1
