"""Which replicas run, and collecting those the catalogue no longer has: listing replica
actors (dedicated ones and those in hosts), the replica directories on a node, and
stopping the replicas found to be strays."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Container, Iterable
from typing import Any

import ray

from rayjet.actors.host_pools import HOST_PREFIX
from rayjet.actors.names import NAMESPACE
from rayjet.actors.replica_actors import (
    CONSUMER_PREFIX,
    PING_TIMEOUT,
    STREAM_PREFIX,
    ReplicaActor,
    as_future,
    destroy_handle,
    lookup,
    parse_replica_name,
)

_host_handles: dict[str, Any] = {}


def _named_actors() -> list[str]:
    """Names of rayjet's actors that are not dead (alive, pending or restarting).
    Blocking: one control-store call."""
    return [e["name"] for e in ray.util.list_named_actors(all_namespaces=True)
            if e["namespace"] == NAMESPACE]


async def _host_listing(name: str, timeout: float) -> list[str] | None:
    """The replicas host ``name`` runs; None when it does not answer within ``timeout``.
    A kept handle that fails is looked up again once: the host may have been killed for
    good and created again under its name since (the kept handle names the dead actor, and
    its replicas, running in the new one, would have been left out of this listing)."""
    deadline = time.monotonic() + timeout
    for kept in (True, False):
        try:
            handle = _host_handles.get(name) if kept else None
            if handle is None:
                kept = False
                handle = _host_handles[name] = await asyncio.to_thread(
                    ray.get_actor, name, namespace=NAMESPACE)
            return await asyncio.wait_for(as_future(handle.names.remote()),
                                          max(deadline - time.monotonic(), 0.001))
        except (TimeoutError, ray.exceptions.RayError, ValueError) as err:
            _host_handles.pop(name, None)
            if not kept or isinstance(err, TimeoutError):
                return None
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
    again (where they ran while that host lives: see
    :func:`~rayjet.actors.consumer_replicas.create_consumer_replica`);
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
        await destroy_handle(handle)

    consumers = [n for n in names if n.startswith(CONSUMER_PREFIX + ".")]
    for batch in (consumers, [n for n in names if n not in set(consumers)]):
        await asyncio.gather(*(one(n) for n in batch), return_exceptions=True)
