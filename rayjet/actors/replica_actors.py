"""What stream and consumer replica actors share: their Ray class and options, their
names, finding them, stopping them and growing their raft groups."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Any

import ray

from rayjet.actors.host import HostedHandle, find_replica
from rayjet.actors.names import NAMESPACE, consumer_actor_name, stream_actor_name
from rayjet.actors.node_selection import node_labels, scheduling_options
from rayjet.api import StreamConfig
from rayjet.errors import BadRequestError, ServiceUnavailableError

GROUP_READY_TIMEOUT = 30.0
PING_TIMEOUT = 5.0  # a replica whose region is down stays pending: don't wait on it forever
_ACTOR_CLASSES: dict[type, Any] = {}


def remote_class(cls: type) -> Any:
    if cls not in _ACTOR_CLASSES:
        _ACTOR_CLASSES[cls] = ray.remote(cls)
    return _ACTOR_CLASSES[cls]


# a quiet follower keeps one call open on its leader's process (a host, or a stream
# replica actor with consumer replicas beside it)
HOST_CONCURRENCY = 100_000


def actor_options(name: str, node_id: str | None = None,
                  config: StreamConfig | None = None) -> dict[str, Any]:
    opts: dict[str, Any] = dict(name=name, namespace=NAMESPACE, lifetime="detached",
                                get_if_exists=True, max_restarts=-1, max_task_retries=0,
                                num_cpus=0, max_concurrency=HOST_CONCURRENCY)
    if node_id:
        opts.update(scheduling_options(config, node_id, node_labels().get(node_id)))
    return opts


async def lookup(name: str) -> Any:
    """``ray.get_actor`` off the event loop: it waits on the control store, and the meta
    actor's heartbeats must not wait with it."""
    return await asyncio.to_thread(find_replica, name)


async def as_future(ref: Any) -> Any:
    """Await a Ray object ref in a coroutine (what asyncio's task helpers take)."""
    return await ref


STREAM_PREFIX = stream_actor_name("", "").rstrip(".")  # "rayjet.stream"
CONSUMER_PREFIX = consumer_actor_name("", "").rstrip(".")


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaActor:
    kind: str  # "stream" or "consumer"
    group: str
    rid: str
    name: str


def parse_replica_name(name: str) -> ReplicaActor | None:
    """``rayjet.stream.<group>.<rid>`` (or ``rayjet.consumer...``) split up; None for any
    other name. Groups and replica ids never contain dots (stream and consumer names can't)."""
    for kind, prefix in (("stream", STREAM_PREFIX), ("consumer", CONSUMER_PREFIX)):
        if name.startswith(prefix + "."):
            group, dot, rid = name[len(prefix) + 1:].rpartition(".")
            if dot and group and rid:
                return ReplicaActor(kind, group, rid, name)
    return None


async def destroy_handle(handle: Any) -> None:
    """Delete a replica's data (if it answers soon) and kill it for good."""
    if isinstance(handle, HostedHandle):  # the host stays: only the replica goes
        with contextlib.suppress(ray.exceptions.RayError, asyncio.TimeoutError):
            await asyncio.wait_for(as_future(handle.host.remove.remote(handle.name)),
                                   PING_TIMEOUT)
        return
    with contextlib.suppress(ray.exceptions.RayError, asyncio.TimeoutError):
        await asyncio.wait_for(as_future(handle.destroy.remote()), PING_TIMEOUT)
    await asyncio.to_thread(ray.kill, handle, no_restart=True)


def stop_replica(name: str) -> None:
    """Stop replica ``name`` and keep its disk, as when its server goes down: a dedicated
    actor is killed for good, a hosted replica leaves its host. Either way the meta
    leader's reconciliation starts it again from its disk. Blocking; BadRequestError
    when no replica of that name runs."""
    try:
        handle = find_replica(name)
    except ValueError:
        raise BadRequestError(f"no replica named {name!r} runs") from None
    if isinstance(handle, HostedHandle):
        ray.get(handle.host.stop_replica.remote(name), timeout=PING_TIMEOUT * 6)
    else:
        ray.kill(handle, no_restart=True)


async def destroy_replicas(names: list[str]) -> None:
    """Stop each named replica actor, delete its data, and kill it for good."""
    for name in names:
        try:
            handle = await lookup(name)
        except ValueError:
            continue  # already gone
        await destroy_handle(handle)


async def caught_up(leader: Any, rid: str, timeout: float) -> None:
    """Wait until learner ``rid`` has all that ``leader`` committed (then it may vote)."""
    deadline = time.monotonic() + timeout
    while True:
        p = await leader.progress.remote()
        if p["match"].get(rid, 0) >= p["commit"]:
            return
        if time.monotonic() > deadline:
            raise ServiceUnavailableError(f"replica {rid} did not catch up in {timeout:.0f}s")
        await asyncio.sleep(0.05)
