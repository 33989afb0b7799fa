"""A new group's preferred leader stands for election at once, without an election timeout;
a replica reopened on its own log waits for one as before."""

from __future__ import annotations

import asyncio

from rayjet.actors.raft_host import RaftHost
from rayjet.replication import GroupOptions, MemoryLog, ReplicaGroup
from tests.replication.test_group import ListMachine

NEVER = 3600.0  # a tick period no test waits for: only an immediate campaign elects


def hosts(names, storages, *, preferred):
    groups: dict[str, RaftHost] = {}

    def sender(peer, messages):
        loop = asyncio.get_running_loop()
        loop.call_soon(groups[peer].receive, messages)

    for name in names:
        group = ReplicaGroup(name, storages[name], ListMachine(), voters=names,
                             options=GroupOptions(quiesce_after=0))
        groups[name] = RaftHost(group, sender, tick_seconds=NEVER, name=name)
    for name, host in groups.items():
        host.start(lead_at_once=name == preferred)
    return groups


async def settle(groups, until, turns=200):
    for _ in range(turns):
        if until():
            return True
        await asyncio.sleep(0)
    return until()


async def stop(groups):
    for host in groups.values():
        await host.stop()


def test_a_new_groups_preferred_replica_leads_without_a_timeout():
    async def run():
        names = ["r0", "r1", "r2"]
        groups = hosts(names, {n: MemoryLog() for n in names}, preferred="r1")
        try:
            assert all(h.group.fresh for h in groups.values())
            assert await settle(groups, lambda: groups["r1"].group.is_leader)
            assert await settle(groups, lambda: all(h.group.leader == "r1"
                                                    for h in groups.values()))
            result = await asyncio.wait_for(groups["r1"].propose(b"x", 5.0), 5.0)
            assert result == 1
        finally:
            await stop(groups)

    asyncio.run(run())


def test_without_a_preferred_replica_nobody_campaigns_before_a_timeout():
    async def run():
        names = ["r0", "r1", "r2"]
        groups = hosts(names, {n: MemoryLog() for n in names}, preferred=None)
        try:
            assert not await settle(groups, lambda: any(h.group.is_leader
                                                        for h in groups.values()))
        finally:
            await stop(groups)

    asyncio.run(run())


def test_a_reopened_replica_is_not_fresh_and_waits_for_a_timeout():
    async def run():
        storage = MemoryLog()
        first = hosts(["r0"], {"r0": storage}, preferred="r0")
        assert await settle(first, lambda: first["r0"].group.is_leader)
        await stop(first)
        again = hosts(["r0"], {"r0": storage}, preferred="r0")
        try:
            assert not again["r0"].group.fresh
            assert not await settle(again, lambda: again["r0"].group.is_leader)
        finally:
            await stop(again)

    asyncio.run(run())
