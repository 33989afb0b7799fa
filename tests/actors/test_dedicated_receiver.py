"""A dedicated stream replica keeps taking raft messages over the data plane whatever call
reaches it first after a (re)start: its guests' host shares its name and must not take
that name over."""

from __future__ import annotations

import asyncio

from rayjet.actors import data_plane
from rayjet.actors.names import stream_actor_name
from rayjet.actors.stream_actor import StreamReplicaActor
from rayjet.api import StorageType, StreamConfig
from tests.actors.test_dropped_proposal import no_metrics  # noqa: F401 - a fixture


def test_a_first_call_before_the_ping_leaves_raft_messages_served(tmp_path, no_metrics):  # noqa: F811
    cfg = StreamConfig(name="S", subjects=["S.>"], storage=StorageType.MEMORY)

    async def run():
        actor = StreamReplicaActor(cfg.to_dict(), "G", "r0", ["r0"], str(tmp_path))
        name = stream_actor_name("G", "r0")
        try:
            await actor.status()  # e.g. a peer's raft call, before the restart's own ping
            plane = data_plane.plane()
            served = plane.receivers[name]
            await actor.ping()  # starts the guests' host
            assert plane.receivers[name] is served, "the guests' host took the name over"
            served([])  # and it takes raft messages (none here) without refusing them
        finally:
            await actor.shutdown()

    asyncio.run(run())
