"""Ray-side operations on groups of replica actors: place, create, change, destroy.

Used by the meta leader. Replica actors are detached, named, restartable, cost no CPU
reservation (they are mostly idle), and are pinned softly to the node placement chose.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayjet.actors.consumer import ConsumerReplica
from rayjet.actors.names import NAMESPACE, consumer_actor_name, stream_actor_name
from rayjet.actors.stream import StreamReplica
from rayjet.api import ConsumerConfig, StreamConfig
from rayjet.errors import APIError, NotLeaderError, ServiceUnavailableError
from rayjet.meta import Catalogue, ConsumerAssignment, Peers, StreamAssignment
from rayjet.placement import loads_from_assignments, select_peers, servers_from_ray_nodes
from rayjet.subjects import matches_any

UNIQUE_TAG_ENV = "RAYJET_UNIQUE_TAG"  # e.g. "az": replicas of a group on distinct zones
GROUP_READY_TIMEOUT = 30.0
_ACTOR_CLASSES: dict[type, Any] = {}


def remote_class(cls: type) -> Any:
    if cls not in _ACTOR_CLASSES:
        _ACTOR_CLASSES[cls] = ray.remote(cls)
    return _ACTOR_CLASSES[cls]


def actor_options(name: str, node_id: str | None = None) -> dict[str, Any]:
    opts: dict[str, Any] = dict(name=name, namespace=NAMESPACE, lifetime="detached",
                                get_if_exists=True, max_restarts=-1, max_task_retries=0,
                                num_cpus=0, max_concurrency=1000)
    if node_id:
        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)
    return opts


def captures(cfg: StreamConfig, subject: str) -> bool:
    return matches_any(subject, cfg.subjects)


# -- placement ----------------------------------------------------------------------------------
def place_stream(cfg: StreamConfig, catalogue: Catalogue, existing: Peers = ()) -> Peers:
    """(replica id, node id) pairs for ``cfg``: existing replicas kept where they still fit."""
    loads = loads_from_assignments(
        [node for _, node in sa.peers] for sa in catalogue.streams.values())
    servers = servers_from_ray_nodes(ray.nodes(), loads=loads)
    # several replicas per node only when the cluster is too small (a laptop, a test)
    colocate = sum(1 for s in servers if s.selectable) < cfg.num_replicas
    nodes = select_peers(servers, replicas=cfg.num_replicas, placement=cfg.placement,
                         unique_tag=os.environ.get(UNIQUE_TAG_ENV) or None,
                         existing=[node for _, node in existing], allow_colocate=colocate)
    remaining = list(nodes)
    kept: list[tuple[str, str]] = []
    for rid, node in existing:
        if node in remaining and len(kept) < cfg.num_replicas:
            remaining.remove(node)
            kept.append((rid, node))
    used = {rid for rid, _ in existing}
    n = 0
    for node in remaining:
        while f"r{n}" in used:
            n += 1
        used.add(f"r{n}")
        kept.append((f"r{n}", node))
    return tuple(kept)


# -- replica actors -----------------------------------------------------------------------------
def replica_handle(sa: StreamAssignment, rid: str) -> Any:
    return ray.get_actor(stream_actor_name(sa.group, rid), namespace=NAMESPACE)


def create_replica(sa: StreamAssignment, rid: str, node: str | None, data_dir: Any,
                   config: StreamConfig | None = None) -> Any:
    cfg = (config or sa.config).to_dict()
    voters = list(sa.bootstrap) or [r for r, _ in sa.peers]
    return remote_class(StreamReplica).options(
        **actor_options(stream_actor_name(sa.group, rid), node)
    ).remote(cfg, sa.group, rid, voters, str(data_dir), created_ns=sa.created_ns)


async def find_leader(sa: StreamAssignment, timeout: float = GROUP_READY_TIMEOUT,
                      writable: bool = True) -> tuple[str, Any]:
    """The replica that leads the group (and takes writes), waiting up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        for rid, _ in sa.peers:
            try:
                st = await replica_handle(sa, rid).status.remote()
            except (ray.exceptions.RayError, ValueError):
                continue
            if st["role"] == "Leader" and (st["writable"] or not writable):
                return rid, replica_handle(sa, rid)
        if time.monotonic() > deadline:
            raise ServiceUnavailableError(
                f"stream {sa.name!r} has no leader after {timeout:.0f}s: a majority of its "
                f"{len(sa.peers)} replicas is not reachable")
        await asyncio.sleep(0.05)


async def ensure_stream_replicas(sa: StreamAssignment, data_dir: Any, *, wait: bool = True
                                 ) -> None:
    handles = [create_replica(sa, rid, node, data_dir) for rid, node in sa.peers]
    await asyncio.gather(*(h.ping.remote() for h in handles))
    if wait:
        await find_leader(sa)


async def _destroy(names: list[str]) -> None:
    """Stop each named replica actor, delete its data, and kill it for good."""
    for name in names:
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            continue  # already gone
        with contextlib.suppress(ray.exceptions.RayError):
            await handle.destroy.remote()
        ray.kill(handle, no_restart=True)


async def destroy_stream_replicas(sa: StreamAssignment) -> None:
    await _destroy([stream_actor_name(sa.group, rid) for rid, _ in sa.peers])


async def _caught_up(leader: Any, rid: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        p = await leader.progress.remote()
        if p["match"].get(rid, 0) >= p["commit"]:
            return
        if time.monotonic() > deadline:
            raise ServiceUnavailableError(f"replica {rid} did not catch up in {timeout:.0f}s")
        await asyncio.sleep(0.05)


async def apply_stream_update(old: StreamAssignment, cfg: StreamConfig, peers: Peers,
                              data_dir: Any, timeout: float = GROUP_READY_TIMEOUT) -> None:
    """Make the running group match ``cfg`` and ``peers``: grow one replica at a time (as a
    learner until caught up, then a voter), shrink one at a time (moving leadership off a
    replica first), then commit the new config in the stream's own log."""
    _, leader = await find_leader(old)
    await leader.check_update.remote(cfg.to_dict())
    current = list(old.peers)
    for rid, node in [p for p in peers if p not in old.peers]:
        grown = StreamAssignment(old.config, old.created_ns, old.group, tuple(current),
                                 bootstrap=old.bootstrap or tuple(r for r, _ in old.peers))
        handle = create_replica(grown, rid, node, data_dir, config=cfg)
        await handle.ping.remote()
        await leader.change_membership.remote("learner", rid)
        await _caught_up(leader, rid, timeout)
        await leader.change_membership.remote("voter", rid)
        current.append((rid, node))
    for rid, node in [p for p in old.peers if p not in peers]:
        view = StreamAssignment(old.config, old.created_ns, old.group, tuple(current))
        leader_rid, leader = await find_leader(view)
        if leader_rid == rid:
            successor = next(r for r, _ in current if r != rid)
            await leader.transfer_leadership.remote(successor)
            leader_rid, leader = await _wait_new_leader(view, rid, timeout)
        await leader.change_membership.remote("remove", rid)
        current.remove((rid, node))
        try:
            handle = replica_handle(view, rid)
            await handle.destroy.remote()
            ray.kill(handle, no_restart=True)
        except (ValueError, ray.exceptions.RayError):
            pass
    view = StreamAssignment(old.config, old.created_ns, old.group, tuple(current))
    _, leader = await find_leader(view)
    await leader.update_config.remote(cfg.to_dict())


async def _wait_new_leader(sa: StreamAssignment, not_rid: str, timeout: float
                           ) -> tuple[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            rid, handle = await find_leader(sa, timeout=1.0)
            if rid != not_rid:
                return rid, handle
        except APIError:
            pass
        if time.monotonic() > deadline:
            raise NotLeaderError(f"leadership of {sa.name!r} did not move off {not_rid}")
        await asyncio.sleep(0.05)


# -- consumers ----------------------------------------------------------------------------------
def place_consumer(sa: StreamAssignment, replicas: int) -> Peers:
    """Consumer replicas live with the stream's replicas (their first ``replicas`` nodes)."""
    count = replicas or sa.config.num_replicas
    nodes = [node for _, node in sa.peers][:count]
    return tuple((f"r{i}", node) for i, node in enumerate(nodes))


def consumer_handle(ca: ConsumerAssignment, rid: str) -> Any:
    return ray.get_actor(consumer_actor_name(ca.group, rid), namespace=NAMESPACE)


def create_consumer_replica(ca: ConsumerAssignment, sa: StreamAssignment, rid: str,
                            node: str | None, data_dir: Any, assignment: dict) -> Any:
    return remote_class(ConsumerReplica).options(
        **actor_options(consumer_actor_name(ca.group, rid), node)
    ).remote(assignment, ca.name, ca.config.to_dict(), ca.group, rid,
             [r for r, _ in ca.peers], str(data_dir), created_ns=ca.created_ns)


async def ensure_consumer_replicas(ca: ConsumerAssignment, sa: StreamAssignment, data_dir: Any,
                                   assignment: dict, *, wait: bool = True) -> None:
    handles = [create_consumer_replica(ca, sa, rid, node, data_dir, assignment)
               for rid, node in ca.peers]
    await asyncio.gather(*(h.ping.remote() for h in handles))
    if not wait:
        return
    deadline = time.monotonic() + GROUP_READY_TIMEOUT
    while time.monotonic() < deadline:
        states = await asyncio.gather(*(h.status.remote() for h in handles),
                                      return_exceptions=True)
        if any(isinstance(st, dict) and st["role"] == "Leader" and st["writable"]
               for st in states):
            return
        await asyncio.sleep(0.05)
    raise ServiceUnavailableError(f"consumer {ca.name!r} has no leader after "
                                  f"{GROUP_READY_TIMEOUT:.0f}s")


async def destroy_consumer_replicas(ca: ConsumerAssignment) -> None:
    await _destroy([consumer_actor_name(ca.group, rid) for rid, _ in ca.peers])


def consumer_filters(cfg: ConsumerConfig) -> list[str]:
    if cfg.filter_subjects:
        return list(cfg.filter_subjects)
    return [cfg.filter_subject] if cfg.filter_subject else []



async def update_consumer_config(ca: ConsumerAssignment) -> None:
    for rid, _ in ca.peers:
        with contextlib.suppress(ValueError, ray.exceptions.RayError):
            await consumer_handle(ca, rid).update_config.remote(ca.config.to_dict())
