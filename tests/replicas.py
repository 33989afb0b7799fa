"""Replica handles and faults for tests, whatever a stream's hosting.

A dedicated replica is an actor of its own. A hosted one runs in a replica host with other
groups' replicas, so killing or pausing it kills or pauses its host (as a node failure
would: every replica the host runs goes with it, and comes back from its disk).

``RAYJET_TEST_HOSTING`` ("shared" or "dedicated") is the hosting the test connections give
streams and buckets that do not choose one; unset, rayjet's defaults.
"""

from __future__ import annotations

import os
from typing import Any

import ray

from rayjet.actors.host import HostedHandle, find_replica
from rayjet.actors.names import consumer_actor_name, stream_actor_name

HOSTING_ENV = "RAYJET_TEST_HOSTING"


def hosting_for_tests() -> str | None:
    """The ``hosting`` for ``rayjet.connect`` in tests (see the module's doc)."""
    return os.environ.get(HOSTING_ENV) or None


def stream_replicas(js: Any, stream: str, *, running_only: bool = False) -> dict[str, Any]:
    """Replica id -> handle of each replica of ``stream``; ``running_only``: leave out those
    that cannot be found (a hosted replica whose host went with its node)."""
    a = js._meta_call("stream_assignment", stream)
    out = {}
    for rid, _ in a["peers"]:
        try:
            out[rid] = find_replica(stream_actor_name(a["group"], rid))
        except ValueError:
            if not running_only:
                raise
    return out


def consumer_replicas(js: Any, stream: str, consumer: str) -> dict[str, Any]:
    """Replica id -> handle of each replica of durable ``consumer`` of ``stream``."""
    ca = js._meta_call("consumer_assignment", stream, consumer)
    return {rid: find_replica(consumer_actor_name(ca["group"], rid)) for rid, _ in ca["peers"]}


def process_of(handle: Any) -> Any:
    """The actor whose process runs the replica: itself, or its host."""
    return handle.host if isinstance(handle, HostedHandle) else handle


def kill(handle: Any, *, restart: bool = True) -> None:
    """Kill the replica's process: Ray restarts it (``restart``), or it is gone for good
    until the meta's reconciliation creates it again."""
    ray.kill(process_of(handle), no_restart=not restart)


def pid(handle: Any, timeout: float = 30) -> int:
    """The OS process id of the replica's process (to pause it with SIGSTOP)."""
    return ray.get(process_of(handle).__ray_call__.remote(lambda self: os.getpid()),
                   timeout=timeout)
