"""A dedicated stream replica's actor, and the consumer replicas it hosts.

nats-server runs a consumer's replicas on its stream's peers. Here a dedicated stream
replica's actor also runs the replicas of its stream's durable consumers that live beside
it (consumer replica ``i`` beside stream replica ``i``), so an R3 stream with any number of
R3 durable consumers is three processes. Each consumer replica keeps its own raft group,
log and state; only the process is shared. The actor answers the calls of a replica host
(:class:`~rayjet.actors.replica_host.ReplicaHost`: place, call, deliver, remove, release, names),
so routers, raft peers and the meta reach a consumer replica here as in a shared host.

A restarted actor (Ray re-runs ``__init__``) starts its consumer replicas again from its
node's disk. A stream replica that goes away for good (the stream scaled down or moved)
hands its consumer replicas to a replica host on its node, where they run on from the same
disk with the same raft membership.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from typing import Any

import ray

from rayjet.actors.host_pools import place_hosted
from rayjet.actors.names import stream_actor_name
from rayjet.actors.replica_host import ReplicaHost, registry_dir
from rayjet.actors.stream import StreamReplica

log = logging.getLogger(__name__)

HANDOVER_TIMEOUT = 30.0  # seconds a consumer replica's move to a host may take


class StreamReplicaActor(StreamReplica):
    """Plain class; :mod:`rayjet.actors.stream_replicas` wraps it with ``ray.remote``."""

    def __init__(self, config: dict[str, Any], group: str, replica_id: str,
                 voters: list[str], data_dir: str, **kwargs: Any) -> None:
        super().__init__(config, group, replica_id, voters, data_dir, **kwargs)
        self._data_dir = data_dir
        # the guests' host shares this actor's name, which the replica serves: had it
        # served the name too, a restarted replica whose peers' messages came before its
        # first ping would have refused every raft message from then on
        self.guests = ReplicaHost(stream_actor_name(group, replica_id), data_dir,
                                  serves_name=False)

    async def ping(self) -> str:
        self.guests.restore()
        return await super().ping()

    async def ready(self, with_info: bool = False) -> dict[str, Any]:
        self.guests.restore()
        return await super().ready(with_info)

    # -- the replica host's calls, for the consumer replicas here ------------------------------
    async def place(self, name: str, kind: str, args: tuple, kwargs: dict) -> str:
        return await self.guests.place(name, kind, args, kwargs)

    async def call(self, name: str, method: str, args: tuple, kwargs: dict) -> Any:
        return await self.guests.call(name, method, args, kwargs)

    async def deliver(self, batch: list[tuple[str, list]]) -> list[str]:
        return await self.guests.deliver(batch)

    async def remove(self, name: str) -> bool:
        return await self.guests.remove(name)

    async def release(self, name: str) -> tuple[str, tuple, dict] | None:
        return await self.guests.release(name)

    async def stop_replica(self, name: str) -> bool:
        return await self.guests.stop_replica(name)

    async def names(self) -> list[str]:
        return await self.guests.names()

    # -- lifecycle -------------------------------------------------------------------------
    async def destroy(self) -> None:
        """Delete this stream replica for good; its consumer replicas move to a host on
        this node and keep their data."""
        await self._hand_over_guests()
        await self.guests.stop_all()
        shutil.rmtree(registry_dir(self._data_dir, self.guests.name), ignore_errors=True)
        await super().destroy()

    async def shutdown(self) -> None:
        await self.guests.stop_all()
        await super().shutdown()

    async def _hand_over_guests(self) -> None:
        for name in await self.guests.names():
            node = ray.get_runtime_context().get_node_id()
            spec = await self.guests.release(name)
            if spec is None:
                continue
            kind, args, kwargs = spec
            try:
                handle = await asyncio.to_thread(place_hosted, name, kind, args, kwargs, node,
                                                 self._data_dir, self.engine.config)
                await asyncio.wait_for(handle.ping.remote(), HANDOVER_TIMEOUT)
            except Exception:  # noqa: BLE001 - the meta's reconciliation places it again
                log.exception("stream replica %s: consumer replica %s did not move to a host",
                              self.id, name)


__all__ = ["StreamReplicaActor"]
