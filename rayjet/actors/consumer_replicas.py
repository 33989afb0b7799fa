"""Ray-side operations on a durable consumer's group of replica actors: place, create,
grow or shrink, update, destroy. A consumer replica runs beside its stream's replica (in
that dedicated actor) or in the stream's replica hosts. Used by the meta leader."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import time
from collections.abc import Callable
from typing import Any

import ray

from rayjet.actors.host import HostedHandle, hosted_on, record_hosted
from rayjet.actors.host_pools import HOST_PREFIX, place_hosted
from rayjet.actors.names import NAMESPACE, consumer_actor_name, stream_actor_name
from rayjet.actors.replica_actors import (
    GROUP_READY_TIMEOUT,
    PING_TIMEOUT,
    as_future,
    caught_up,
    destroy_replicas,
    lookup,
)
from rayjet.api import ConsumerConfig
from rayjet.errors import NotLeaderError, ServiceUnavailableError
from rayjet.meta import ConsumerAssignment, Peers, StreamAssignment

LEAD_WAIT = 1.0  # one wait of a consumer replica for its leadership (see ensure_consumer_replicas)


def place_consumer(sa: StreamAssignment, replicas: int) -> Peers:
    """Consumer replicas live with the stream's replicas (their first ``replicas`` nodes)."""
    count = replicas or sa.config.num_replicas
    nodes = [node for _, node in sa.peers][:count]
    return tuple((f"r{i}", node) for i, node in enumerate(nodes))


async def consumer_handle(ca: ConsumerAssignment, rid: str) -> Any:
    return await lookup(consumer_actor_name(ca.group, rid))


def create_consumer_replica(ca: ConsumerAssignment, sa: StreamAssignment, rid: str,
                            node: str | None, data_dir: Any, assignment: dict) -> Any:
    name = consumer_actor_name(ca.group, rid)
    args = (assignment, ca.name, ca.config.to_dict(), ca.group, rid,
            [r for r, _ in ca.peers], str(data_dir))
    kwargs = {"created_ns": ca.created_ns}
    if not sa.config.shared_hosting:
        beside = stream_actor_beside(ca, sa, rid)
        if beside is not None:
            host_name, host = beside
            record_hosted(name, host_name)  # findable at once, before it runs there
            host.place.remote(name, "consumer", args, kwargs)
            return HostedHandle(host, host_name, name)
    # a shared stream's consumers share its hosts; so does one of a dedicated stream whose
    # replica beside it is gone (scaled down or moved: it ran on in its node's host)
    if hosted_on(name) is None:
        host_name = stream_host_beside(ca, sa, rid, node)
        if host_name is not None:
            # a new replica goes into the host of its stream's replica on that node (not
            # any host of the node's pool): its reads of the stream are then method calls
            record_hosted(name, host_name)
    return place_hosted(name, "consumer", args, kwargs, node, data_dir, sa.config)


def stream_host_beside(ca: ConsumerAssignment, sa: StreamAssignment, rid: str,
                       node: str | None) -> str | None:
    """The replica host that runs stream replica ``i`` for consumer replica ``i`` when
    that stream replica is on ``node`` and in a host. Blocking: a control-store call."""
    rids = [r for r, _ in ca.peers]
    if rid not in rids:  # a replica the group is growing by: placed by its node alone
        return None
    index = rids.index(rid)
    if index >= len(sa.peers) or sa.peers[index][1] != node:
        return None
    host_name = hosted_on(stream_actor_name(sa.group, sa.peers[index][0]))
    return host_name if host_name and host_name.startswith(HOST_PREFIX + ".") else None


def stream_actor_beside(ca: ConsumerAssignment, sa: StreamAssignment, rid: str
                        ) -> tuple[str, Any] | None:
    """The dedicated stream replica actor that runs (or is to run) consumer replica ``rid``
    of ``ca``: the one it ran in while that one lives, else stream replica ``i`` for consumer
    replica ``i`` when it is among the stream's peers now. None when the consumer replica
    runs in (or belongs in) a replica host. Blocking: control-store calls."""
    known = hosted_on(consumer_actor_name(ca.group, rid))
    if known is not None and not known.startswith(HOST_PREFIX + "."):
        with contextlib.suppress(ValueError):
            return known, ray.get_actor(known, namespace=NAMESPACE)
        return None  # its stream replica is gone: it moved to (or belongs in) a host
    if known is not None:
        return None
    index = [r for r, _ in ca.peers].index(rid)
    if index >= len(sa.peers):
        return None
    name = stream_actor_name(sa.group, sa.peers[index][0])
    with contextlib.suppress(ValueError):
        return name, ray.get_actor(name, namespace=NAMESPACE)
    return None


async def _ping_all(handles: list[Any], timeout: float | None) -> bool:
    """Wait until every replica answers (True) or ``timeout`` passes (False). A replica
    whose region is down stays pending until a fitting node joins."""
    pings = [asyncio.ensure_future(as_future(h.ping.remote())) for h in handles]
    done, pending = await asyncio.wait(pings, timeout=timeout)
    for fut in pending:
        fut.cancel()
    for fut in done:
        fut.result()  # a dead replica raises here
    return not pending


async def ensure_consumer_replicas(ca: ConsumerAssignment, sa: StreamAssignment, data_dir: Any,
                                   assignment: dict, *, wait: bool = True,
                                   peers: Peers | None = None) -> None:
    handles = [create_consumer_replica(ca, sa, rid, node, data_dir, assignment)
               for rid, node in (ca.peers if peers is None else peers)]
    if not wait:
        await _ping_all(handles, PING_TIMEOUT)
        return
    # no ping first: asking each whether it leads waits for its placement too (a round of
    # actor calls less for every new consumer), and a leader means a quorum runs
    deadline = time.monotonic() + GROUP_READY_TIMEOUT
    while time.monotonic() < deadline:
        # each replica answers the moment it leads (a sleep between status polls cost a new
        # consumer 50-100 ms idle and seconds on a loaded machine); the others give up
        # after LEAD_WAIT, and a dead one raises at once: ask again until the deadline
        calls = [asyncio.ensure_future(as_future(h.until_leading.remote(LEAD_WAIT)))
                 for h in handles]
        for fut in asyncio.as_completed(calls):
            with contextlib.suppress(ServiceUnavailableError, ray.exceptions.RayError):
                await fut
                for other in calls:
                    other.cancel()
                return
        if not any(isinstance(fut.exception(), ServiceUnavailableError) for fut in calls):
            await asyncio.sleep(LEAD_WAIT)  # none of them runs (all restarting): not a spin
    raise ServiceUnavailableError(f"consumer {ca.name!r} has no leader after "
                                  f"{GROUP_READY_TIMEOUT:.0f}s")


def consumer_peers_for(ca: ConsumerAssignment, sa: StreamAssignment, replicas: int) -> Peers:
    """``ca``'s peers grown or shrunk to ``replicas``: the first ones kept, new ones on the
    stream's nodes not used yet, under ids never used in the group before."""
    count = replicas or sa.config.num_replicas
    if count <= len(ca.peers):
        return ca.peers[:count]
    used = {node for _, node in ca.peers}
    free = [node for _, node in sa.peers if node not in used] or [n for _, n in sa.peers]
    tag = secrets.token_hex(2)
    grown = [(f"r{len(ca.peers) + i}x{tag}", free[i % len(free)])
             for i in range(count - len(ca.peers))]
    return tuple(ca.peers) + tuple(grown)


async def _consumer_leader(ca: ConsumerAssignment, peers: Peers, timeout: float
                           ) -> tuple[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        for rid, _ in peers:
            try:
                handle = await asyncio.wait_for(consumer_handle(ca, rid), 1.0)
                st = await asyncio.wait_for(as_future(handle.status.remote()), 1.0)
            except (TimeoutError, ray.exceptions.RayError, ValueError):
                continue
            if st.get("role") == "Leader" and st.get("writable"):
                return rid, handle
        if time.monotonic() > deadline:
            raise ServiceUnavailableError(f"consumer {ca.name!r} has no leader after "
                                          f"{timeout:.0f}s")
        await asyncio.sleep(0.05)


async def scale_consumer(ca: ConsumerAssignment, sa: StreamAssignment, peers: Peers,
                         data_dir: Any, assignment: dict, timeout: float = GROUP_READY_TIMEOUT,
                         still_leading: Callable[[], None] = lambda: None) -> list[str]:
    """Grow or shrink the consumer's group to ``peers`` (see
    :func:`~rayjet.actors.stream_replicas.apply_stream_update`:
    a new replica joins as a learner and votes once caught up; a leaving one hands its
    leadership on first). The actor names of the replicas it no longer has, still running:
    the caller stops them once the catalogue stops naming them."""
    current = list(ca.peers)
    removed: list[str] = []
    for rid, node in [p for p in peers if p not in ca.peers]:
        still_leading()
        _, leader = await _consumer_leader(ca, tuple(current), timeout)
        joining = dataclasses.replace(ca, peers=tuple(current))
        handle = create_consumer_replica(joining, sa, rid, node, data_dir, assignment)
        await as_future(handle.ping.remote())
        await leader.change_membership.remote("learner", rid)
        await caught_up(leader, rid, timeout)
        await leader.change_membership.remote("voter", rid)
        current.append((rid, node))
    for rid, node in [p for p in ca.peers if p not in peers]:
        still_leading()
        leader_rid, leader = await _consumer_leader(ca, tuple(current), timeout)
        if leader_rid == rid:
            successor = next(r for r, _ in current if r != rid)
            await leader.transfer_leadership.remote(successor)
            deadline = time.monotonic() + timeout
            while leader_rid == rid:
                if time.monotonic() > deadline:
                    raise NotLeaderError(f"leadership of consumer {ca.name!r} did not move "
                                         f"off {rid}")
                await asyncio.sleep(0.05)
                leader_rid, leader = await _consumer_leader(ca, tuple(current), timeout)
        await leader.change_membership.remote("remove", rid)
        current.remove((rid, node))
        removed.append(consumer_actor_name(ca.group, rid))
    return removed


async def destroy_consumer_replicas(ca: ConsumerAssignment) -> None:
    await destroy_replicas([consumer_actor_name(ca.group, rid) for rid, _ in ca.peers])


def consumer_filters(cfg: ConsumerConfig) -> list[str]:
    if cfg.filter_subjects:
        return list(cfg.filter_subjects)
    return [cfg.filter_subject] if cfg.filter_subject else []


async def update_consumer_config(ca: ConsumerAssignment) -> None:
    for rid, _ in ca.peers:
        with contextlib.suppress(ValueError, ray.exceptions.RayError):
            handle = await consumer_handle(ca, rid)
            await handle.update_config.remote(ca.config.to_dict())
