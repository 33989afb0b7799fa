"""Ray-side operations on a stream's group of replica actors: place, create, find the
leader, change, destroy. Used by the meta leader. Replica actors are detached, named,
restartable and cost no CPU reservation (they are mostly idle); where they may run is
:mod:`rayjet.actors.node_selection`'s."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import ray

from rayjet.actors.autoscaling import clear_capacity_request, request_capacity
from rayjet.actors.host import record_hosted
from rayjet.actors.host_pools import host_name_for, place_hosted
from rayjet.actors.names import stream_actor_name
from rayjet.actors.node_selection import is_stretch, recent_ray_nodes, unique_tag_for
from rayjet.actors.on_demand import starts_on_demand
from rayjet.actors.replica_actors import (
    GROUP_READY_TIMEOUT,
    PING_TIMEOUT,
    actor_options,
    as_future,
    caught_up,
    destroy_replicas,
    lookup,
    remote_class,
)
from rayjet.actors.stream_actor import StreamReplicaActor
from rayjet.api import StreamConfig
from rayjet.errors import APIError, ClusterNoPeersError, NotLeaderError, ServiceUnavailableError
from rayjet.meta import Catalogue, Peers, StreamAssignment
from rayjet.placement import loads_from_assignments, select_peers, servers_from_ray_nodes
from rayjet.subjects import matches_any


def captures(cfg: StreamConfig, subject: str) -> bool:
    return matches_any(subject, cfg.subjects)


def place_stream(cfg: StreamConfig, catalogue: Catalogue, existing: Peers = (),
                 fresh: tuple[str, ...] = (), avoid: tuple[str, ...] = ()) -> Peers:
    """(replica id, node id) pairs for ``cfg``: existing replicas kept where they still fit,
    new ones named from ``fresh`` in order (the group's next ids, see
    ``StreamAssignment.fresh_ids``), else ``r0``, ``r1``... for a new group. A new group
    is placed on the nodes seen within the last second; a change, on those Ray sees now
    (a move off a node that just left must not choose it again). New replicas go to nodes
    other than ``avoid`` (the node of a replica being replaced) when any other fits, as
    nats-server's peer removal ignores the removed server; else where they would have."""
    loads = loads_from_assignments(
        [node for _, node in sa.peers] for sa in catalogue.streams.values())
    nodes = ray.nodes() if existing else recent_ray_nodes()
    servers = servers_from_ray_nodes(nodes, loads=loads)
    # several replicas per node only when the cluster is too small (a laptop, a test)
    colocate = sum(1 for s in servers if s.selectable) < cfg.num_replicas
    stretch = is_stretch(cfg.placement)
    placement = dataclasses.replace(cfg.placement, cluster=None) if stretch else cfg.placement
    select = functools.partial(
        select_peers, servers, replicas=cfg.num_replicas, placement=placement,
        unique_tag=unique_tag_for(cfg.placement), span_clusters=stretch,
        existing=[node for _, node in existing], allow_colocate=colocate)
    kept_nodes = {node for _, node in existing}
    avoided = tuple(node for node in avoid if node and node not in kept_nodes)
    try:
        try:
            nodes = select(exclude=avoided)
        except ClusterNoPeersError:
            if not avoided:
                raise
            nodes = select()  # no other node fits: the avoided one rather than none
    except ClusterNoPeersError:
        request_capacity(cfg)
        raise
    clear_capacity_request()
    remaining = list(nodes)
    kept: list[tuple[str, str]] = []
    for rid, node in existing:
        if node in remaining and len(kept) < cfg.num_replicas:
            remaining.remove(node)
            kept.append((rid, node))
    used = {rid for rid, _ in existing}
    names = iter(fresh)
    n = 0
    for node in remaining:
        rid = next(names, None)
        if rid is None:
            while f"r{n}" in used:
                n += 1
            rid = f"r{n}"
        used.add(rid)
        kept.append((rid, node))
    return tuple(kept)


async def replica_handle(sa: StreamAssignment, rid: str) -> Any:
    return await lookup(stream_actor_name(sa.group, rid))


def create_replica(sa: StreamAssignment, rid: str, node: str | None, data_dir: Any,
                   config: StreamConfig | None = None, *, new: bool = False) -> Any:
    """Create (or place in a host) replica ``rid``; ``new``: of a stream just made, so
    never placed before. A hosted replica that is its group's only voter may rest until
    used (on_demand.starts_on_demand) where it has never run: a new stream's, or one placed
    again in a new node's host after Ray restarted (the host checks for its files)."""
    cfg = config or sa.config
    voters = list(sa.bootstrap) or [r for r, _ in sa.peers]
    name = stream_actor_name(sa.group, rid)
    args = (cfg.to_dict(), sa.group, rid, voters, str(data_dir))
    kwargs = {"created_ns": sa.created_ns}
    if cfg.shared_hosting:
        # a replica joining a group (a move) has other voters: it starts, to catch up
        return place_hosted(name, "stream", args, kwargs, node, data_dir, cfg, new=new,
                            on_demand=voters == [rid] and starts_on_demand(cfg))
    return remote_class(StreamReplicaActor).options(**actor_options(name, node, cfg)).remote(
        *args, **kwargs)


async def _status(sa: StreamAssignment, rid: str, timeout: float,
                  handle: Any = None) -> dict[str, Any] | None:
    try:
        if handle is None:
            handle = await asyncio.wait_for(replica_handle(sa, rid), timeout)
        return await asyncio.wait_for(as_future(handle.status.remote()), timeout)
    except (TimeoutError, ray.exceptions.RayError, ValueError):
        return None  # dead, restarting, or pending until a node of its region joins


async def actual_peers(sa: StreamAssignment, timeout: float = 2.0) -> Peers:
    """``sa.peers`` with each replica's node as it runs now: Ray restarts a replica whose node
    died on another node that fits, which the catalogue does not know yet (a replica that
    does not answer keeps its recorded node)."""
    states = await asyncio.gather(*(_status(sa, rid, timeout) for rid, _ in sa.peers))
    return tuple((rid, (st or {}).get("node") or node)
                 for (rid, node), st in zip(sa.peers, states, strict=True))


async def find_leader(sa: StreamAssignment, timeout: float = GROUP_READY_TIMEOUT,
                      writable: bool = True, handles: dict[str, Any] | None = None
                      ) -> tuple[str, Any]:
    """The replica that leads the group (and takes writes), waiting up to ``timeout``.
    ``handles``: replica handles at hand (the others are looked up)."""
    deadline = time.monotonic() + timeout
    known = dict(handles or {})
    while True:
        rids = [rid for rid, _ in sa.peers]
        states = await asyncio.gather(*(_status(sa, rid, 1.0, known.get(rid))
                                        for rid in rids))
        for rid, st in zip(rids, states):
            if st is None:
                known.pop(rid, None)  # look it up next time: it may have been replaced
            if st and st["role"] == "Leader" and (st["writable"] or not writable):
                return rid, known.get(rid) or await replica_handle(sa, rid)
        if time.monotonic() > deadline:
            raise ServiceUnavailableError(
                f"stream {sa.name!r} has no leader after {timeout:.0f}s: a majority of its "
                f"{len(sa.peers)} replicas is not reachable")
        await asyncio.sleep(0.05)


class ReadyGroup(NamedTuple):
    """A stream group's leader once its replicas run: its id, its handle, and its stream
    info when the leader answered with it (else None)."""

    rid: str
    leader: Any
    info: dict[str, Any] | None


def start_stream_replicas(sa: StreamAssignment, data_dir: Any,
                          peers: Peers | None = None, *, new: bool = False) -> dict[str, Any]:
    """Create the replicas of ``peers`` (default: all of the stream's) that do not exist;
    their handles by replica id (each starts on its own: see :func:`replicas_ready`).
    ``new``: the stream was just made (see :func:`create_replica`)."""
    return {rid: create_replica(sa, rid, node, data_dir, new=new)
            for rid, node in (sa.peers if peers is None else peers)}


def record_new_replicas(sa: StreamAssignment) -> None:
    """Record where each replica of a new shared stream will run, so its name finds it at
    once (a call that comes before its host has placed it waits for the placement).
    Blocking: a control-store write per replica."""
    for rid, node in sa.peers:
        name = stream_actor_name(sa.group, rid)
        record_hosted(name, host_name_for(node, name, sa.config, new=True)[0])


def preferred_replica(sa: StreamAssignment) -> str:
    """The replica a new group's first election makes leader (it campaigns at once)."""
    return (list(sa.bootstrap) or [r for r, _ in sa.peers])[0]


ENSURE_TRIES = 4  # starts of a stream's replicas when a process found dies meanwhile


async def ensure_stream_replicas(sa: StreamAssignment, data_dir: Any, *, wait: bool = True,
                                 peers: Peers | None = None) -> ReadyGroup | None:
    """Create the replicas of ``peers`` (default: all of the stream's) that do not exist and
    wait as :func:`replicas_ready` does. A process that died a moment ago may still be
    found under its name (Ray frees a killed actor's name shortly after): its replicas are
    started again, in a new one, after a short pause."""
    pause = 0.2
    for _ in range(ENSURE_TRIES - 1):
        try:
            return await replicas_ready(sa, start_stream_replicas(sa, data_dir, peers),
                                        wait=wait)
        except ray.exceptions.RayActorError:
            await asyncio.sleep(pause)
            pause *= 2
    return await replicas_ready(sa, start_stream_replicas(sa, data_dir, peers), wait=wait)


async def replicas_ready(sa: StreamAssignment, created: dict[str, Any], *,
                         wait: bool = True) -> ReadyGroup | None:
    """Wait until the ``created`` replicas answer and (``wait``) until the group has a
    leader, which is returned with its stream info (a replica that leads as soon as it runs,
    as a new group's preferred one does, gives it with its first answer)."""
    calls = {rid: asyncio.ensure_future(as_future(h.ready.remote(wait)))
             for rid, h in created.items()}
    done, pending = await asyncio.wait(calls.values(), timeout=PING_TIMEOUT)
    for fut in pending:
        fut.cancel()
    for fut in done:
        fut.result()  # a dead replica raises here
    if not wait:
        return None
    for rid, fut in calls.items():
        if fut in done and fut.result()["leader"]:
            return ReadyGroup(rid, created[rid], fut.result()["info"])
    rid, leader = await find_leader(sa, handles=created)
    return ReadyGroup(rid, leader, None)


async def destroy_stream_replicas(sa: StreamAssignment) -> None:
    await destroy_replicas([stream_actor_name(sa.group, rid) for rid, _ in sa.peers])


async def apply_stream_update(old: StreamAssignment, cfg: StreamConfig, peers: Peers,
                              data_dir: Any, timeout: float = GROUP_READY_TIMEOUT, *,
                              drop_learners: tuple[str, ...] = (),
                              still_leading: Callable[[], None] = lambda: None
                              ) -> list[str]:
    """Make the running group match ``cfg`` and ``peers``: drop ``drop_learners`` (left by a
    change cut short), grow one replica at a time (as a learner until caught up, then a
    voter), shrink one at a time (moving leadership off a replica first), then commit the
    new config in the stream's own log. ``still_leading`` raises when the caller lost the
    right to change the group (a meta leader that stepped down stops mid-way).

    Returns the actor names of the replicas the group no longer has, still running: the
    caller stops them (:func:`destroy_replicas`) once the catalogue stops naming them.
    Stopped earlier, the meta's reconciliation would create one again from the catalogue,
    empty, as the only voter of a group of its own (an R1 stream's old replica would then
    take writes that the moved stream never sees)."""
    _, leader = await find_leader(old)
    await leader.check_update.remote(cfg.to_dict())
    current = list(old.peers)
    removed: list[str] = []
    for rid in drop_learners:
        still_leading()
        await leader.change_membership.remote("remove", rid)
        removed.append(stream_actor_name(old.group, rid))
    for rid, node in [p for p in peers if p not in old.peers]:
        still_leading()
        grown = StreamAssignment(old.config, old.created_ns, old.group, tuple(current),
                                 bootstrap=old.bootstrap or tuple(r for r, _ in old.peers))
        handle = create_replica(grown, rid, node, data_dir, config=cfg)
        await handle.ping.remote()
        await leader.change_membership.remote("learner", rid)
        await caught_up(leader, rid, timeout)
        await leader.change_membership.remote("voter", rid)
        current.append((rid, node))
    for rid, node in [p for p in old.peers if p not in peers]:
        still_leading()
        view = StreamAssignment(old.config, old.created_ns, old.group, tuple(current))
        leader_rid, leader = await find_leader(view)
        if leader_rid == rid:
            successor = next(r for r, _ in current if r != rid)
            await leader.transfer_leadership.remote(successor)
            leader_rid, leader = await _wait_new_leader(view, rid, timeout)
        await leader.change_membership.remote("remove", rid)
        current.remove((rid, node))
        removed.append(stream_actor_name(old.group, rid))
    view = StreamAssignment(old.config, old.created_ns, old.group, tuple(current))
    _, leader = await find_leader(view)
    await leader.update_config.remote(cfg.to_dict())
    return removed


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


async def _group_progress(sa: StreamAssignment, timeout: float) -> dict[str, Any] | None:
    try:
        _, leader = await find_leader(sa, timeout=timeout, writable=False)
        return await asyncio.wait_for(as_future(leader.progress.remote()), timeout)
    except (APIError, TimeoutError, ray.exceptions.RayError, ValueError):
        return None


async def group_members(sa: StreamAssignment, timeout: float = 2.0) -> set[str] | None:
    """Voters and learners of the stream's raft group as its leader sees them (None when
    no leader answers within ``timeout``)."""
    p = await _group_progress(sa, timeout)
    return None if p is None else set(p["voters"]) | set(p["learners"])


class GroupDrift(NamedTuple):
    """How a stream's raft group differs from the catalogue after a change cut short."""
    voters: Peers  # voters the catalogue does not name, each with the node it runs on
    learners: tuple[str, ...]  # learners the catalogue does not name
    missing: tuple[str, ...]  # replicas the catalogue names that the group no longer has

    def __bool__(self) -> bool:
        return bool(self.voters or self.learners or self.missing)


async def group_drift(sa: StreamAssignment, timeout: float = 2.0) -> GroupDrift:
    """What a change cut short (its meta leader died, a step failed, the client's call was
    retried) left between the stream's group and the catalogue. Empty when no leader answers."""
    p = await _group_progress(sa, timeout)
    if p is None:
        return GroupDrift((), (), ())
    named = {rid for rid, _ in sa.peers}
    members = set(p["voters"]) | set(p["learners"])
    voters = tuple((rid, None) for rid in sorted(p["voters"]) if rid not in named)
    learners = tuple(rid for rid in sorted(p["learners"]) if rid not in named)
    missing = tuple(rid for rid, _ in sa.peers if rid not in members)
    if voters:
        voters = await actual_peers(dataclasses.replace(sa, peers=voters), timeout)
    return GroupDrift(voters, learners, missing)
