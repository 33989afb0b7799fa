"""The pools of shared replica host actors: a few per node, each running many small
replicas (stream and consumer replicas of shared hosting, see
:mod:`rayjet.actors.replica_host`)."""

from __future__ import annotations

import os
import zlib
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rayjet.actors.host import HostedHandle, hosted_on, record_hosted
from rayjet.actors.names import NAMESPACE, host_actor_name
from rayjet.actors.node_selection import live_node_for
from rayjet.actors.replica_actors import HOST_CONCURRENCY, parse_replica_name, remote_class
from rayjet.actors.replica_host import ReplicaHost
from rayjet.api import StreamConfig

HOSTS_PER_NODE_ENV = "RAYJET_HOSTS_PER_NODE"
DEFAULT_HOSTS_PER_NODE = 3  # an R3 group on one node gets a process per replica
HOST_PREFIX = host_actor_name("", 0).rsplit(".", 2)[0]  # "rayjet.host"


def hosts_per_node() -> int:
    try:
        return max(1, int(os.environ.get(HOSTS_PER_NODE_ENV, DEFAULT_HOSTS_PER_NODE)))
    except ValueError:
        return DEFAULT_HOSTS_PER_NODE


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
    name, node = host_name_for(node, key, config, new=new)
    # asked each time (not cached): a host killed for good is created again here
    return name, _host_actor(name, node, data_dir)


def host_name_for(node: str | None, key: str, config: StreamConfig | None = None, *,
                  new: bool = False) -> tuple[str, str]:
    """The name of the host :func:`host_on` gives replica ``key``, and its live node,
    without creating the host."""
    node = live_node_for(node, config)
    known = None if new else hosted_on(key)
    if known is not None and known.startswith(host_actor_name(node, 0)[:-1]):
        return known, node  # keep it where it ran (its spec file is there), whatever the pool
    return host_actor_name(node, host_index(key, hosts_per_node())), node


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
    ``new`` and ``on_demand`` as
    :func:`~rayjet.actors.stream_replicas.create_replica` and ``ReplicaHost.place`` take
    them."""
    host_name, host = host_on(node, name, data_dir, config, new=new)
    record_hosted(name, host_name)  # findable at once, before the host has it running
    host.place.remote(name, kind, args, kwargs, on_demand, True)
    return HostedHandle(host, host_name, name)
