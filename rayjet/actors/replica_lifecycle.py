"""Ray-side operations on groups of replica actors: place, create, change, destroy.

Used by the meta leader. Replica actors are detached, named, restartable and cost no CPU
reservation (they are mostly idle). Where a replica may run follows from its placement:
a replica placed by cluster (region), by ``k:v`` tags or under a unique tag carries a hard
Ray ``label_selector`` built from those labels, so when its node dies Ray restarts it only
on a node that still fits (another node of its region and zone) or keeps it pending until
one joins; it never drifts silently into another region. The node placement chose is a
preference on top (its other labels, with the hard selector as the fallback). Replicas of
unlabelled nodes keep a soft node affinity.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import secrets
import time
import zlib
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any, NamedTuple

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayjet.actors.host import HostedHandle, ReplicaHost, find_replica, hosted_on, record_hosted
from rayjet.actors.names import NAMESPACE, consumer_actor_name, host_actor_name, stream_actor_name
from rayjet.actors.on_demand import starts_on_demand
from rayjet.actors.stream_actor import StreamReplicaActor
from rayjet.api import ConsumerConfig, Placement, StreamConfig
from rayjet.errors import (
    APIError,
    BadRequestError,
    ClusterNoPeersError,
    NotLeaderError,
    ServiceUnavailableError,
)
from rayjet.meta import Catalogue, ConsumerAssignment, Peers, StreamAssignment
from rayjet.placement import (
    CLUSTER_LABEL,
    NODE_ID_LABEL,
    loads_from_assignments,
    normalize_tags,
    select_peers,
    servers_from_ray_nodes,
)
from rayjet.subjects import matches_any

log = logging.getLogger(__name__)

UNIQUE_TAG_ENV = "RAYJET_UNIQUE_TAG"  # e.g. "az": replicas of a group on distinct zones
STRETCH_CLUSTER = "*"
"""``Placement(cluster="*")``: a stretch group, its replicas spread over clusters (regions)."""
STRETCH_UNIQUE_TAG_ENV = "RAYJET_STRETCH_UNIQUE_TAG"  # default: the cluster label itself
GROUP_READY_TIMEOUT = 30.0
LEAD_WAIT = 1.0  # one wait of a consumer replica for its leadership (see ensure_consumer_replicas)
PING_TIMEOUT = 5.0  # a replica whose region is down stays pending: don't wait on it forever
NODES_TTL = 1.0
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


# -- where a replica may run ---------------------------------------------------------------------
_nodes_cache: tuple[float, list[dict[str, Any]]] = (0.0, [])


def recent_ray_nodes() -> list[dict[str, Any]]:
    """``ray.nodes()`` as seen within the last NODES_TTL seconds (one control-store call
    for a reconcile pass, or for many stream creations in a row)."""
    global _nodes_cache
    seen, nodes = _nodes_cache
    if time.monotonic() - seen > NODES_TTL:
        nodes = ray.nodes()
        _nodes_cache = (time.monotonic(), nodes)
    return nodes


def _all_node_labels() -> dict[str, tuple[bool, dict[str, str]]]:
    """(alive, labels) of every Ray node the control store knows, dead ones included."""
    return {n["NodeID"]: (bool(n.get("Alive")),
                          {str(k): str(v) for k, v in (n.get("Labels") or {}).items()})
            for n in recent_ray_nodes()}


def node_labels() -> dict[str, dict[str, str]]:
    """Labels of the alive Ray nodes by node id."""
    return {node: labels for node, (alive, labels) in _all_node_labels().items() if alive}


def is_stretch(placement: Placement | None) -> bool:
    return placement is not None and placement.cluster == STRETCH_CLUSTER


def unique_tag_for(placement: Placement | None) -> str | None:
    """The unique tag placement enforces: for a stretch group the region (cluster label)."""
    if is_stretch(placement):
        return os.environ.get(STRETCH_UNIQUE_TAG_ENV) or CLUSTER_LABEL
    return os.environ.get(UNIQUE_TAG_ENV) or None


def _label(labels: Mapping[str, str], key: str) -> tuple[str, str] | None:
    """The node label whose key equals ``key`` ignoring case (tags are lower-case)."""
    for k, v in labels.items():
        if k.lower() == key.lower():
            return k, v
    return None


def hard_selector(placement: Placement | None, labels: Mapping[str, str] | None,
                  unique_tag: str | None) -> dict[str, str]:
    """The Ray label selector every node hosting this replica must match.

    ``labels`` are those of the node placement chose (None when that node is gone: then the
    placement alone says what it can). Covers the node's cluster, the placement's ``k:v``
    tags and ``!k:v`` exclusions, and the chosen node's value of the unique tag; plain tags
    (from ``rayjet.tags``, a comma list) have no label selector form and are left out.
    """
    sel: dict[str, str] = {}
    labels = labels or {}
    if CLUSTER_LABEL in labels:
        sel[CLUSTER_LABEL] = labels[CLUSTER_LABEL]
    elif placement is not None and placement.cluster and not is_stretch(placement):
        sel[CLUSTER_LABEL] = placement.cluster
    excluded: dict[str, list[str]] = {}
    for tag in normalize_tags(placement.tags if placement else ()):
        negate = tag.startswith("!")
        key, sep, value = tag.lstrip("!").partition(":")
        if not sep or not key or not value:
            continue
        found = _label(labels, key)
        if negate:
            excluded.setdefault(found[0] if found else key, []).append(value)
        elif found and f"{found[0]}:{found[1]}".lower() == tag:
            sel[found[0]] = found[1]
        elif not labels:
            sel[key] = value
    for key, values in excluded.items():
        if key not in sel:
            sel[key] = f"!{values[0]}" if len(values) == 1 else f"!in({','.join(values)})"
    if unique_tag:
        key = unique_tag.rstrip(":=")
        found = _label(labels, key)
        if found and found[0] not in sel:
            sel[found[0]] = found[1]
    return sel


def scheduling_options(config: StreamConfig | None, node_id: str,
                       labels: Mapping[str, str] | None) -> dict[str, Any]:
    """Ray options that put a replica on ``node_id`` and keep it where its placement allows."""
    placement = config.placement if config is not None else None
    hard = hard_selector(placement, labels, unique_tag_for(placement))
    if not hard:
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)}
    # Ray turns a node-id label into a hard affinity that fails once the node is gone, so the
    # preferred node is named by its other labels, with the hard selector as the fallback.
    prefer = {k: v for k, v in (labels or {}).items()
              if k != NODE_ID_LABEL and not k.startswith("ray.io/") and k not in hard}
    if not prefer:
        return {"label_selector": hard}
    return {"label_selector": {**hard, **prefer}, "fallback_strategy": [{"label_selector": hard}]}


# -- asking the autoscaler for nodes ---------------------------------------------------------------
CapacityHook = Callable[[list[dict], list[dict]], None]


def _request_resources(bundles: list[dict], selectors: list[dict]) -> None:
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles, bundle_label_selectors=selectors)


capacity_hook: CapacityHook = _request_resources
"""Called with (bundles, label selectors) when a placement needs nodes that do not exist."""
_capacity_requested = False


def request_capacity(cfg: StreamConfig) -> None:
    """Ask the autoscaler for one node-sized bundle per replica with the placement's labels
    (a hint: the add or update still fails now, and succeeds once nodes have joined)."""
    global _capacity_requested
    sel = hard_selector(cfg.placement, None, None)
    if is_stretch(cfg.placement):
        sel.pop(CLUSTER_LABEL, None)
    try:
        capacity_hook([{"CPU": 1} for _ in range(cfg.num_replicas)],
                      [dict(sel) for _ in range(cfg.num_replicas)])
        _capacity_requested = True
    except Exception as exc:  # noqa: BLE001 - a hint only; the placement error is what counts
        log.warning("could not ask the autoscaler for nodes: %s", exc)


def _clear_capacity_request() -> None:
    global _capacity_requested
    if _capacity_requested:
        with contextlib.suppress(Exception):
            capacity_hook([], [])
        _capacity_requested = False


def captures(cfg: StreamConfig, subject: str) -> bool:
    return matches_any(subject, cfg.subjects)


# -- placement ----------------------------------------------------------------------------------
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
    _clear_capacity_request()
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


# -- replica actors -----------------------------------------------------------------------------
async def lookup(name: str) -> Any:
    """``ray.get_actor`` off the event loop: it waits on the control store, and the meta
    actor's heartbeats must not wait with it."""
    return await asyncio.to_thread(find_replica, name)


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


# -- replicas in shared host actors -----------------------------------------------------------
HOSTS_PER_NODE_ENV = "RAYJET_HOSTS_PER_NODE"
DEFAULT_HOSTS_PER_NODE = 3  # an R3 group on one node gets a process per replica


def hosts_per_node() -> int:
    try:
        return max(1, int(os.environ.get(HOSTS_PER_NODE_ENV, DEFAULT_HOSTS_PER_NODE)))
    except ValueError:
        return DEFAULT_HOSTS_PER_NODE


def _selects(value: str | None, want: str) -> bool:
    """One term of a Ray label selector (``v``, ``!v``, ``!in(a,b)``) against a label."""
    if want.startswith("!in(") and want.endswith(")"):
        return value not in want[4:-1].split(",")
    if want.startswith("!"):
        return value != want[1:]
    return value == want


def live_node_for(node: str | None, config: StreamConfig | None) -> str:
    """``node`` while it is alive; else an alive node that fits the placement's labels (a
    dead node's replicas, or every node id after Ray restarted on the same data dir),
    preferring this process's node. Raises ClusterNoPeersError when no alive node fits: a
    replica of a region whose nodes are all gone waits for one to come back."""
    alive = node_labels()
    if node in alive:
        return node
    placement = config.placement if config is not None else None
    # the gone node's labels, while Ray remembers them, keep the replica in its region (a
    # stretch group's replica belongs to its node's region, which the placement can't say)
    _, gone_labels = _all_node_labels().get(node or "", (False, None))
    need = hard_selector(placement, gone_labels or None, unique_tag_for(placement))
    here = ray.get_runtime_context().get_node_id()
    fitting = [n for n, labels in alive.items()
               if all(_selects(labels.get(k), v) for k, v in need.items())]
    if not fitting:
        raise ClusterNoPeersError(
            f"no alive node fits the placement {need} of a replica whose node is gone")
    return here if here in fitting else sorted(fitting)[0]


def host_index(replica_name: str, pool: int) -> int:
    """Which of a node's ``pool`` hosts runs a replica: by a hash of its group, plus its
    replica number, so the replicas of one group that share a node (a one-node cluster)
    land in different hosts while the pool allows: a paused or dead host then takes at
    most one of them."""
    parsed = parse_replica_name(replica_name)
    if parsed is None:
        return zlib.crc32(replica_name.encode()) % pool
    number = int(parsed.rid[1:]) if parsed.rid[1:].isdigit() else zlib.crc32(parsed.rid.encode())
    return (zlib.crc32(parsed.group.encode()) + number) % pool


def host_on(node: str | None, key: str, data_dir: Any,
            config: StreamConfig | None = None, *, new: bool = False) -> tuple[str, Any]:
    """The host actor on ``node`` (or, when that node is gone, on one that fits ``config``'s
    placement) that runs replica ``key``: one of a small pool per node (:func:`host_index`),
    created when missing. Pinned to its node: a hosted replica never drifts to another node
    (or region) with its host. ``new``: ``key`` never ran anywhere (no record to look up)."""
    node = live_node_for(node, config)
    known = None if new else hosted_on(key)
    if known is not None and known.startswith(host_actor_name(node, 0)[:-1]):
        name = known  # keep it where it ran (its spec file is there), whatever the pool
    else:
        name = host_actor_name(node, host_index(key, hosts_per_node()))
    # asked each time (not cached): a host killed for good is created again here
    return name, _host_actor(name, node, data_dir)


def _host_actor(name: str, node: str, data_dir: Any) -> Any:
    """Host actor ``name`` on ``node``, created when it does not exist."""
    return remote_class(ReplicaHost).options(
        name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=0, num_cpus=0, max_concurrency=HOST_CONCURRENCY,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
    ).remote(name, str(data_dir))


def start_host_pool(data_dir: Any, node: str | None = None) -> list[str]:
    """Create ``node``'s (default: this process's node) pool of hosts now, not waited
    for: a host is a process that takes about a second to start, which the first replica
    placed in it would otherwise wait for (the first publishes to a new server's streams,
    KV buckets and object stores). Blocking (control-store calls); the hosts' names."""
    node = node or ray.get_runtime_context().get_node_id()
    names = [host_actor_name(node, i) for i in range(hosts_per_node())]
    for name in names:
        _host_actor(name, node, data_dir)
    return names


def place_hosted(name: str, kind: str, args: tuple, kwargs: dict, node: str | None,
                 data_dir: Any, config: StreamConfig, *, new: bool = False,
                 on_demand: bool = False) -> HostedHandle:
    """Run replica ``name`` in a host on ``node`` (what creating its actor would do);
    ``new`` and ``on_demand`` as :func:`create_replica` and ``ReplicaHost.place`` take
    them."""
    host_name, host = host_on(node, name, data_dir, config, new=new)
    record_hosted(name, host_name)  # findable at once, before the host has it running
    host.place.remote(name, kind, args, kwargs, on_demand, True)
    return HostedHandle(host, host_name, name)


async def _status(sa: StreamAssignment, rid: str, timeout: float,
                  handle: Any = None) -> dict[str, Any] | None:
    try:
        if handle is None:
            handle = await asyncio.wait_for(replica_handle(sa, rid), timeout)
        return await asyncio.wait_for(_as_future(handle.status.remote()), timeout)
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


async def _ping_all(handles: list[Any], timeout: float | None) -> bool:
    """Wait until every replica answers (True) or ``timeout`` passes (False). A replica
    whose region is down stays pending until a fitting node joins."""
    pings = [asyncio.ensure_future(_as_future(h.ping.remote())) for h in handles]
    done, pending = await asyncio.wait(pings, timeout=timeout)
    for fut in pending:
        fut.cancel()
    for fut in done:
        fut.result()  # a dead replica raises here
    return not pending


async def _as_future(ref: Any) -> Any:
    return await ref


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
    calls = {rid: asyncio.ensure_future(_as_future(h.ready.remote(wait)))
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


async def _stop(handle: Any) -> None:
    """Delete a replica's data (if it answers soon) and kill it for good."""
    if isinstance(handle, HostedHandle):  # the host stays: only the replica goes
        with contextlib.suppress(ray.exceptions.RayError, asyncio.TimeoutError):
            await asyncio.wait_for(_as_future(handle.host.remove.remote(handle.name)),
                                   PING_TIMEOUT)
        return
    with contextlib.suppress(ray.exceptions.RayError, asyncio.TimeoutError):
        await asyncio.wait_for(_as_future(handle.destroy.remote()), PING_TIMEOUT)
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
        await _stop(handle)


async def destroy_stream_replicas(sa: StreamAssignment) -> None:
    await destroy_replicas([stream_actor_name(sa.group, rid) for rid, _ in sa.peers])


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
        await _caught_up(leader, rid, timeout)
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


# -- consumers ----------------------------------------------------------------------------------
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
    return place_hosted(name, "consumer", args, kwargs, node, data_dir, sa.config)


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


async def ensure_consumer_replicas(ca: ConsumerAssignment, sa: StreamAssignment, data_dir: Any,
                                   assignment: dict, *, wait: bool = True,
                                   peers: Peers | None = None) -> None:
    handles = [create_consumer_replica(ca, sa, rid, node, data_dir, assignment)
               for rid, node in (ca.peers if peers is None else peers)]
    await _ping_all(handles, PING_TIMEOUT)
    if not wait:
        return
    deadline = time.monotonic() + GROUP_READY_TIMEOUT
    while time.monotonic() < deadline:
        # each replica answers the moment it leads (a sleep between status polls cost a new
        # consumer 50-100 ms idle and seconds on a loaded machine); the others give up
        # after LEAD_WAIT, and a dead one raises at once: ask again until the deadline
        calls = [asyncio.ensure_future(_as_future(h.until_leading.remote(LEAD_WAIT)))
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
                st = await asyncio.wait_for(_as_future(handle.status.remote()), 1.0)
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
    """Grow or shrink the consumer's group to ``peers`` (see :func:`apply_stream_update`:
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
        await _as_future(handle.ping.remote())
        await leader.change_membership.remote("learner", rid)
        await _caught_up(leader, rid, timeout)
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


# -- collecting what the catalogue no longer has ---------------------------------------------------
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


HOST_PREFIX = host_actor_name("", 0).rsplit(".", 2)[0]  # "rayjet.host"
_host_handles: dict[str, Any] = {}


def _named_actors() -> list[str]:
    """Names of rayjet's actors that are not dead (alive, pending or restarting).
    Blocking: one control-store call."""
    return [e["name"] for e in ray.util.list_named_actors(all_namespaces=True)
            if e["namespace"] == NAMESPACE]


async def _host_listing(name: str, timeout: float) -> list[str] | None:
    """The replicas host ``name`` runs; None when it does not answer within ``timeout``."""
    try:
        handle = _host_handles.get(name)
        if handle is None:
            handle = _host_handles[name] = await asyncio.to_thread(
                ray.get_actor, name, namespace=NAMESPACE)
        return await asyncio.wait_for(_as_future(handle.names.remote()), timeout)
    except (TimeoutError, ray.exceptions.RayError, ValueError):
        _host_handles.pop(name, None)
        return None


async def running_replicas(timeout: float = PING_TIMEOUT,
                           guest_hosts: Container[str] | None = None,
                           unanswered: list[str] | None = None) -> set[str]:
    """Names of the stream and consumer replicas that run (or are being restarted by Ray):
    dedicated actors from one listing of named actors, hosted ones from one call per host
    and per dedicated stream replica in ``guest_hosts`` (those whose stream has durable
    consumers, which run beside them; None: every one).
    What costs one reconciliation pass is per process, not per replica, so thousands of
    idle replicas cost their meta leader next to nothing. A host that does not answer
    (restarting, or on a node that is gone) contributes nothing: its replicas are placed
    again (where they ran while that host lives: see :func:`create_consumer_replica`);
    its name is appended to ``unanswered`` when given."""
    names = await asyncio.to_thread(_named_actors)
    running = {n for n in names if parse_replica_name(n) is not None}
    hosts = [n for n in names if n.startswith(HOST_PREFIX + ".")]
    hosts += [n for n in running if n.startswith(STREAM_PREFIX + ".")
              and (guest_hosts is None or n in guest_hosts)]
    listings = await asyncio.gather(*(_host_listing(h, timeout) for h in hosts))
    for host, listing in zip(hosts, listings, strict=True):
        running.update(listing or ())
        if listing is None and unanswered is not None:
            unanswered.append(host)
    return running


def replica_actors(names: Iterable[str]) -> list[ReplicaActor]:
    """The replica names among ``names``, split up."""
    return [p for p in map(parse_replica_name, names) if p is not None]


def local_group_dirs(data_dir: Any) -> list[tuple[str, str, Any]]:
    """(kind, group, path) of the replica directories under ``data_dir`` on this node.
    Blocking (lists directories): run it in a thread."""
    from pathlib import Path

    out = []
    for kind, sub in (("stream", "streams"), ("consumer", "consumers")):
        root = Path(data_dir) / sub
        with contextlib.suppress(OSError):
            out += [(kind, p.name, p) for p in root.iterdir() if p.is_dir()]
    return out


async def collect_replicas(names: list[str]) -> None:
    """Stop, delete the data of, and kill each named replica actor (in parallel): consumer
    replicas first, so that a stream replica going away hands over to a host only those
    beside it that are not being collected too."""

    async def one(name: str) -> None:
        try:
            handle = await lookup(name)
        except ValueError:
            return  # already gone
        await _stop(handle)

    consumers = [n for n in names if n.startswith(CONSUMER_PREFIX + ".")]
    for batch in (consumers, [n for n in names if n not in set(consumers)]):
        await asyncio.gather(*(one(n) for n in batch), return_exceptions=True)


async def _group_progress(sa: StreamAssignment, timeout: float) -> dict[str, Any] | None:
    try:
        _, leader = await find_leader(sa, timeout=timeout, writable=False)
        return await asyncio.wait_for(_as_future(leader.progress.remote()), timeout)
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


def consumer_filters(cfg: ConsumerConfig) -> list[str]:
    if cfg.filter_subjects:
        return list(cfg.filter_subjects)
    return [cfg.filter_subject] if cfg.filter_subject else []



async def update_consumer_config(ca: ConsumerAssignment) -> None:
    for rid, _ in ca.peers:
        with contextlib.suppress(ValueError, ray.exceptions.RayError):
            handle = await consumer_handle(ca, rid)
            await handle.update_config.remote(ca.config.to_dict())
