"""A publish whose proposal raft drops (a leadership transfer under way) is refused with
NotLeaderError and leaves nothing behind: a retry with the same Nats-Msg-Id is stored
once, at the next sequence, and later publishes go on."""

from __future__ import annotations

import asyncio

import pytest

from rayjet.actors.stream import StreamReplica
from rayjet.api import StorageType, StreamConfig
from rayjet.errors import NotLeaderError
from rayjet.raft import ProposalDroppedError


@pytest.fixture(autouse=True)
def no_metrics(monkeypatch):
    monkeypatch.setenv("RAYJET_METRICS", "0")


async def leading(replica: StreamReplica) -> None:
    await replica.ping()
    for _ in range(1000):
        if replica.engine.is_leader:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the single replica did not lead")


def test_a_dropped_proposal_leaves_no_trace(tmp_path, monkeypatch):
    async def run():
        cfg = StreamConfig(name="S", subjects=["S.>"], storage=StorageType.MEMORY)
        replica = StreamReplica(cfg.to_dict(), "G", "r0", ["r0"], str(tmp_path))
        await leading(replica)
        try:
            assert await replica.publish([("S.a", b"1", {"Nats-Msg-Id": "a"})]) == [1]
            group = replica.host.group
            propose = group.propose

            def drop(data):
                raise ProposalDroppedError("leadership transfer in progress")

            monkeypatch.setattr(group, "propose", drop)
            with pytest.raises(NotLeaderError):
                await replica.publish([("S.a", b"2", {"Nats-Msg-Id": "b"})])
            monkeypatch.setattr(group, "propose", propose)
            assert await replica.publish([("S.a", b"2", {"Nats-Msg-Id": "b"})]) == [2]
            assert await replica.publish([("S.a", b"3")]) == [3]
            got = await replica.read_range(1, 10)
            assert got["seq"] == [1, 2, 3] and got["data"] == [b"1", b"2", b"3"]
        finally:
            await replica.shutdown()

    asyncio.run(run())
