"""An R1 stream moved to another node under publish load, in-process (no Ray): every
acknowledged message is in the moved stream.

Real StreamReplica objects, the real ``stream_replicas.apply_stream_update`` and the
real ``GroupRouter``, over a fake Ray: a named-actor registry with ``get_if_exists``,
``ray.kill(no_restart=True)`` that frees the name, and actor calls as asyncio tasks that,
like Ray's, are not cancelled when the caller stops waiting.

The meta leader's reconciliation keeps re-creating the replicas its catalogue names, and
the catalogue names the old replica until the move commits. Were the old replica stopped
before that commit, it would come back empty as the only voter of a group of its own and
acknowledge publishes the moved stream never gets.
"""

from __future__ import annotations

import asyncio
import random

import pytest
import ray
import ray.exceptions

from rayjet.actors import (
    consumer_replicas,
    host_pools,
    node_selection,
    replica_actors,
    replica_collection,
    stream_replicas,
)
from rayjet.actors.cancelling import cancel_and_wait
from rayjet.actors.names import stream_actor_name
from rayjet.actors.router import stream_router
from rayjet.api import StorageType, StreamConfig
from rayjet.api import headers as H
from rayjet.api.stream import Placement
from rayjet.errors import APIError
from rayjet.meta import StreamAssignment
from rayjet.meta.assignment_dicts import assignment_dict


class FakeRef:
    def __init__(self, coro):
        self.task = asyncio.ensure_future(coro)

    def __await__(self):
        return asyncio.shield(self.task).__await__()  # a Ray call is not cancelled

    def future(self):
        return self.task


class FakeHandle:
    def __init__(self, ray_, name, obj):
        self._ray, self._name, self._obj = ray_, name, obj
        self.generation = ray_.created[name]

    def __getattr__(self, method):
        handle = self

        class _M:
            @staticmethod
            def remote(*args, **kwargs):
                async def call():
                    await asyncio.sleep(random.uniform(0, handle._ray.latency))
                    if handle._obj not in handle._ray.alive:
                        raise ray.exceptions.RayActorError()
                    return await getattr(handle._obj, method)(*args, **kwargs)
                return FakeRef(call())
        return _M()


class FakeRay:
    def __init__(self, latency=0.002):
        self.by_name: dict[str, object] = {}
        self.alive: set = set()
        self.created: dict[str, int] = {}  # name -> how many actors had it
        self.objects: list = []  # every actor made, killed ones included
        self.log: list[tuple[str, str]] = []
        self.latency = latency

    def get_actor(self, name, namespace=None):
        obj = self.by_name.get(name)
        if obj is None or obj not in self.alive:
            raise ValueError(f"Failed to look up actor {name!r}")
        return FakeHandle(self, name, obj)

    def kill(self, handle, no_restart=True):
        self.alive.discard(handle._obj)
        if self.by_name.get(handle._name) is handle._obj:
            del self.by_name[handle._name]
        self.log.append(("kill", handle._name))

    def remote_class(self, cls):
        fake = self

        class _Cls:
            @staticmethod
            def options(**opts):
                class _O:
                    @staticmethod
                    def remote(*args, **kwargs):
                        name = opts["name"]
                        obj = fake.by_name.get(name)
                        if obj is not None and opts.get("get_if_exists"):
                            return FakeHandle(fake, name, obj)
                        obj = cls(*args, **kwargs)
                        fake.by_name[name] = obj
                        fake.alive.add(obj)
                        fake.objects.append(obj)
                        fake.created[name] = fake.created.get(name, 0) + 1
                        fake.log.append(("create", name))
                        return FakeHandle(fake, name, obj)
                return _O()
        return _Cls()


class _Ctx:
    @staticmethod
    def get_node_id():
        return "node"


@pytest.fixture
def fake_ray(monkeypatch):
    # replicas in this process report no metrics (set per test: an environment variable
    # left set would reach the actors of a Ray started later in the session)
    monkeypatch.setenv("RAYJET_METRICS", "0")
    fake = FakeRay()
    monkeypatch.setattr(ray, "get_actor", fake.get_actor)
    monkeypatch.setattr(ray, "kill", fake.kill)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: _Ctx())
    # each patched in every module that looks it up (its own, and those that import it)
    for mod in (replica_actors, stream_replicas, host_pools):
        monkeypatch.setattr(mod, "remote_class", fake.remote_class)
    for mod in (node_selection, replica_actors):
        monkeypatch.setattr(mod, "node_labels", lambda: {})

    async def lookup(name):
        return fake.get_actor(name)
    for mod in (replica_actors, stream_replicas, consumer_replicas, replica_collection):
        monkeypatch.setattr(mod, "lookup", lookup)
    return fake


async def _run_move(fake, tmp_path, *, reconcile_every, commit_delay):
    name = "S"
    old_cfg = StreamConfig(name=name, subjects=["S.>"], storage=StorageType.MEMORY,
                           placement=Placement(cluster="central"))
    new_cfg = StreamConfig(name=name, subjects=["S.>"], storage=StorageType.MEMORY,
                           placement=Placement(cluster="east"))
    old = StreamAssignment(old_cfg, 1, "G1", (("r0", "c1"),), bootstrap=("r0",),
                           next_replica=1)
    catalogue = {name: old}
    await stream_replicas.ensure_stream_replicas(old, tmp_path)

    routers: dict[str, object] = {}  # the client's cache (JetStream._routers)
    acked: dict[str, tuple[int, str]] = {}
    stop = asyncio.Event()

    async def publisher():
        n = 0
        while not stop.is_set():
            mid = f"m-{n}"
            while True:
                router = routers.get(name)
                if router is None:
                    router = routers[name] = stream_router(assignment_dict(catalogue[name]))
                try:
                    (ans,) = await router.acall(
                        "publish", [("S.a", mid.encode(), {H.MSG_ID: mid})], timeout=10,
                        retry_unknown=True, attempt_timeout=0.5)
                except APIError:
                    routers.pop(name, None)  # _stream_call drops the router on errors
                    await asyncio.sleep(0.05)
                    continue
                if isinstance(ans, BaseException):
                    await asyncio.sleep(0.05)
                    continue
                seq = ans if isinstance(ans, int) else ans.seq
                acked[mid] = (seq, router.leader)
                break
            n += 1
            await asyncio.sleep(0.005)

    async def reconcile():  # MetaMember._reconcile_loop: ensure every catalogued replica
        while not stop.is_set():
            await asyncio.sleep(reconcile_every)
            for sa in list(catalogue.values()):
                try:
                    await stream_replicas.ensure_stream_replicas(sa, tmp_path, wait=False)
                except (APIError, ray.exceptions.RayError, ValueError):
                    pass

    pub = asyncio.create_task(publisher())
    rec = asyncio.create_task(reconcile())
    while len(acked) < 50:
        await asyncio.sleep(0.05)
    # MetaMember.update_stream: apply the move, then commit the new peers
    new_peers = (("r1", "e1"),)
    removed = await stream_replicas.apply_stream_update(old, new_cfg, new_peers, tmp_path)
    assert removed == [stream_actor_name("G1", "r0")]
    assert fake.get_actor(removed[0]) is not None  # still running until the commit
    await asyncio.sleep(commit_delay)  # the meta raft commit (slow on a loaded machine)
    catalogue[name] = StreamAssignment(new_cfg, 1, "G1", new_peers, bootstrap=("r0",),
                                       next_replica=2)
    await replica_actors.destroy_replicas(removed)  # as MetaMember.update_stream: after the commit
    routers.pop(name, None)  # JetStream.update_stream drops the cached router
    moved = len(acked)
    while len(acked) < moved + 50:
        await asyncio.sleep(0.05)
    stop.set()
    await pub
    await cancel_and_wait(rec)

    # assert_exactly_once: read the stream from its (catalogued) leader
    rid, leader = await stream_replicas.find_leader(catalogue[name])
    got = await leader.read_range.remote(1, 1 << 62, max_msgs=100_000)
    stored = {H.decode_headers(h).get(H.MSG_ID): s for s, h in zip(got["seq"], got["hdr"])}
    missing = {mid: acked[mid] for mid in acked if mid not in stored}
    # stop every replica made (a killed one's tasks run on, as nothing stops a fake actor):
    # asyncio.run's own cleanup cancels each task once, which a loop waiting through
    # wait_for can swallow on Python 3.11, and then waits for it forever
    for obj in fake.objects:
        await obj.shutdown()
    return missing, acked, stored


def test_a_moved_r1_stream_loses_nothing_while_reconciliation_runs(fake_ray, tmp_path):
    random.seed(1)
    missing, acked, stored = asyncio.run(
        _run_move(fake_ray, tmp_path, reconcile_every=0.1, commit_delay=0.3))
    assert not missing and set(stored) == set(acked)
    # the old replica was never re-created under its name
    assert fake_ray.created[stream_actor_name("G1", "r0")] == 1
    assert ("kill", stream_actor_name("G1", "r0")) in fake_ray.log
